"""The roofline sweep's arithmetic, and its behaviour on a machine without a GPU."""

import subprocess
import sys

import pytest

from gpuprof import roofline

# An H100 SXM as the CUDA runtime describes it: 132 SMs at 1980 MHz, HBM3 at 2619 MHz on 5120 bits.
H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "sm_count": 132,
    "compute_capability": (9, 0),
    "clock_khz": 1_980_000,
    "memory_clock_khz": 2_619_000,
    "memory_bus_bits": 5120,
}


def test_peaks_of_an_h100():
    # 132 SMs x 128 FP32 lanes x 2 flop (FMA) x 1.98 GHz = 66,908 GFLOP/s
    assert roofline.peak_gflops(H100) == pytest.approx(66_908.16)
    # 2 transfers x 2.619 GHz x 640 bytes = 3,352 GB/s
    assert roofline.peak_gbps(H100) == pytest.approx(3352.32)


def test_the_datasheet_line_reads_the_peak_table():
    line = roofline.datasheet_line(H100["name"])
    assert "FP32 67,000 GFLOP/s" in line and "memory bandwidth 3,350 GB/s" in line
    assert "H100 Tensor Core GPU datasheet" in line
    # the ridge the reports' roofline uses for fp32 on an H100: 67 TFLOP/s / 3,350 GB/s = 20 FLOP/byte
    assert "ridge at AI 20.0" in line
    assert "no FP32 figure" in roofline.datasheet_line("NVIDIA B200")
    assert "no row for 'NVIDIA GH200 480GB'" in roofline.datasheet_line("NVIDIA GH200 480GB")


def test_fp32_lanes_per_sm_by_architecture():
    assert roofline.fp32_lanes_per_sm(7, 0) == 64  # V100
    assert roofline.fp32_lanes_per_sm(8, 0) == 64  # A100
    assert roofline.fp32_lanes_per_sm(8, 6) == 128  # A10 / RTX 30
    assert roofline.fp32_lanes_per_sm(9, 0) == 128  # H100
    assert roofline.fp32_lanes_per_sm(12, 0) == 128  # Blackwell


def test_summarize_a_memory_bound_and_a_compute_bound_k():
    n = 1 << 25
    # k = 1: 2 flop and 8 bytes per element; 0.1 ms -> 8 * 2^25 B / 1e-4 s = 2,684 GB/s,
    # AI 0.25, roof = 0.25 x 3352.32 = 838.08 GFLOP/s, attained 2 * 2^25 / 1e-4 / 1e9 = 671.09.
    row = roofline.summarize(1, n, [0.1, 0.1, 0.1], 66_908.16, 3352.32)
    assert row.ai == 0.25
    assert row.gbps == pytest.approx(2684.35, rel=1e-5)
    assert row.gflops == pytest.approx(671.09, rel=1e-5)
    assert row.pct_of_roof == pytest.approx(80.07, abs=0.01)
    assert row.spread_pct == 0 and not row.unstable
    # k = 1000: AI 250, far past the ridge (~20): the roof is the compute peak.
    row = roofline.summarize(1000, n, [1.0, 1.02, 1.07], 66_908.16, 3352.32)
    assert row.median_ms == 1.02
    assert row.spread_pct == pytest.approx(0.07 / 1.02 * 100)  # 6.9% > 5%: flagged
    assert row.unstable
    assert row.pct_of_roof == pytest.approx(2 * 1000 * n / 1.02e-3 / 1e9 / 66_908.16 * 100)
    table = roofline.format_table([row], H100, 66_908.16, 3352.32)
    assert "spread > 5%" in table and "NVIDIA H100" in table


def test_without_a_gpu_it_says_so_and_fails():
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present: tests/gpu runs the sweep")
    except ImportError:
        pass
    r = subprocess.run(
        [sys.executable, "-m", "gpuprof.roofline", "--k", "1", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert r.stdout == ""
    msg = r.stderr.strip()
    assert msg.startswith("gpuprof roofline:"), msg
    assert any(
        m in msg
        for m in ("no NVIDIA driver", "no usable NVIDIA GPU", "built without its CUDA validation kernels")
    )
    assert len(msg.splitlines()) == 1


def test_bad_arguments_are_rejected():
    with pytest.raises(SystemExit) as e:
        roofline.main(["--k", "0"])
    assert e.value.code == 2
