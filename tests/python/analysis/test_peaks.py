"""The peak table (gpuprof/analysis/peaks.csv): every row checked for consistency, device names as
CUDA/ROCm/NVML report them matched to rows, and the CPU's estimated peak (on this machine and from
hand-written /proc/cpuinfo texts)."""

from __future__ import annotations

import os
import platform
import re
from collections import defaultdict

import pytest

from gpuprof.analysis import peaks

ROWS = peaks.table()


def _by_device() -> dict[str, list[peaks.PeakRow]]:
    out = defaultdict(list)
    for r in ROWS:
        out[r.device].append(r)
    return out


def _dense(rows, dtype, engine=None):
    found = [r for r in rows if r.dtype == dtype and r.sparsity == "dense" and engine in (None, r.engine)]
    return max((r.peak for r in found), default=None)


# Devices where NVIDIA's "dense" figure is printed beside the sparse one but is not half of it.
PRINTED_DENSE_NOT_HALF = {("L40S", "fp16"), ("L40S", "bf16")}
# HPC parts with FP64 on the tensor/matrix cores, at or above their FP32 SIMT (vector) rate.
HPC = {
    "A100 PCIe 40GB",
    "A100 PCIe 80GB",
    "A100 SXM 40GB",
    "A100 SXM 80GB",
    "H100 SXM",
    "H100 PCIe",
    "H100 NVL",
    "H200 SXM",
    "H200 NVL",
    "MI250X",
    "MI300X",
}


def test_the_table_covers_the_devices_it_promises():
    want = {
        "V100 SXM2 16GB",
        "V100 SXM2 32GB",
        "V100 PCIe 16GB",
        "V100 PCIe 32GB",
        "B200",
        "L4",
        "L40S",
        "A10",
        "T4",
        "RTX 4090",
    } | HPC
    assert set(peaks.devices()) == want


def test_every_row_is_well_formed():
    for r in ROWS:
        where = f"{r.device}/{r.dtype}/{r.engine}/{r.sparsity}"
        assert r.dtype in peaks.DTYPES, where
        assert r.engine in peaks.ENGINES, where
        assert r.sparsity in peaks.SPARSITIES, where
        assert r.unit == ("TOPS" if r.dtype == "int8" else "TFLOPS"), where
        assert r.peak > 0, where  # a missing figure is a missing row, never 0
        assert r.memory_bandwidth_gbps > 0 and r.memory_gb > 0, where
        assert r.devices_per_package >= 1, where
        assert re.search(r"(datasheet|whitepaper|page)", r.source), where
        assert "table" in r.source or "specifications" in r.source, where
        assert r.note, where
        if r.sparsity == "sparse":
            assert "never used for MFU" in r.note, where


def test_no_duplicate_rows():
    keys = [(r.device, r.dtype, r.engine, r.sparsity) for r in ROWS]
    assert len(keys) == len(set(keys))


def test_a_device_has_one_memory_size_bandwidth_and_package():
    for device, rows in _by_device().items():
        assert len({(r.memory_gb, r.memory_bandwidth_gbps, r.devices_per_package) for r in rows}) == 1, device


def test_sparse_is_twice_dense():
    dense = {(r.device, r.dtype, r.engine): r for r in ROWS if r.sparsity == "dense"}
    sparse = [r for r in ROWS if r.sparsity == "sparse"]
    assert sparse
    for s in sparse:
        d = dense.get((s.device, s.dtype, s.engine))
        assert d is not None, f"{s.device} {s.dtype}: a sparse figure without its dense one"
        if (s.device, s.dtype) in PRINTED_DENSE_NOT_HALF:
            assert s.peak / d.peak == pytest.approx(733 / 362.05)
            assert "not half" in d.note
            continue
        # Vendors round each printed figure: MI300X prints 1,307.4 dense and 2,614.9 sparse.
        assert s.peak == pytest.approx(2 * d.peak, rel=1e-4), f"{s.device} {s.dtype}"
        if d.note.startswith("dense = half"):
            assert d.peak == s.peak / 2  # derived exactly


def test_fp16_and_bf16_dense_agree_where_both_are_given():
    both = 0
    for device, rows in _by_device().items():
        fp16, bf16 = _dense(rows, "fp16"), _dense(rows, "bf16")
        if fp16 is not None and bf16 is not None:
            both += 1
            assert fp16 == bf16, device
    assert both == len(peaks.devices()) - 5  # V100 x4 and T4 have no bf16


def test_tf32_is_at_most_fp16_and_fp8_int8_at_least():
    for device, rows in _by_device().items():
        fp16 = _dense(rows, "fp16")
        for lower in ("tf32", "fp32"):
            v = _dense(rows, lower)
            if v is not None and fp16 is not None:
                assert v <= fp16, f"{device}: {lower}"
        for higher in ("fp8", "int8"):
            v = _dense(rows, higher)
            if v is not None and fp16 is not None:
                assert v >= fp16, f"{device}: {higher}"


def test_fp64_at_most_fp32_except_fp64_tensor_cores_on_hpc_parts():
    for device, rows in _by_device().items():
        f64_vec, f32_vec = _dense(rows, "fp64", "vector"), _dense(rows, "fp32", "vector")
        if f64_vec is not None:
            assert f32_vec is not None and f64_vec <= f32_vec, device
        f64_tc = _dense(rows, "fp64", "tensor")
        if device in HPC:
            # FP64 tensor/matrix cores: as fast as FP32 SIMT (A100, H100, H200, MI300X) or faster
            # (MI250X: 95.7 FP64 matrix against 47.9 FP32 vector), never above the best FP32 path.
            assert f64_tc is not None and f64_tc >= f32_vec, device
            assert f64_tc <= _dense(rows, "fp32"), device
        else:
            assert f64_tc is None, device
    mi250x = _by_device()["MI250X"]
    assert _dense(mi250x, "fp64", "tensor") > _dense(mi250x, "fp32", "vector")


@pytest.mark.parametrize(
    "device,dtype,value",
    [
        ("V100 SXM2 32GB", "fp16", 125),
        ("V100 PCIe 16GB", "fp32", 14),
        ("A100 SXM 80GB", "bf16", 312),
        ("A100 SXM 80GB", "fp64", 19.5),  # tensor cores beat the 9.7 of the FP64 units
        ("H100 SXM", "bf16", 989.5),  # half of the datasheet's 1,979 with sparsity
        ("H100 PCIe", "fp16", 756.5),
        ("H200 NVL", "fp8", 1670.5),
        ("L4", "fp16", 121),
        ("L40S", "bf16", 362.05),
        ("T4", "fp16", 65),
        ("RTX 4090", "bf16", 165.2),
        ("MI300X", "bf16", 1307.4),
    ],
)
def test_spot_values_against_the_datasheets(device, dtype, value):
    assert _dense(_by_device()[device], dtype) == value


def test_dtypes_a_device_lacks_are_absent():
    by = _by_device()
    assert _dense(by["V100 SXM2 32GB"], "bf16") is None
    assert _dense(by["A100 SXM 80GB"], "fp8") is None
    assert _dense(by["T4"], "tf32") is None
    assert _dense(by["MI250X"], "tf32") is None
    assert not [r for r in by["V100 SXM2 32GB"] + by["T4"] + by["MI250X"] if r.sparsity == "sparse"]


# ---------------------------------------------------------------------------------------------------
# Matching device names

NAMES = [
    ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ("Tesla V100-DGXS-32GB", "V100 SXM2 32GB"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe 32GB"),
    ("Tesla V100S-PCIE-32GB", None),  # V100S: other clocks and bandwidth
    ("Tesla V100-FHHL-16GB", None),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100X", None),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", None),  # Grace Hopper: not an H200
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", None),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", None),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", None),  # the AWS part: its own clocks
    ("Tesla T4", "T4"),
    ("Quadro T4000", None),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
    ("NVIDIA GeForce RTX 4080", None),
    ("AMD Instinct MI250X", "MI250X"),
    ("AMD Instinct MI250X/MI250", None),  # ROCm's name for two parts with different peaks
    ("AMD Instinct MI250", None),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI300A", None),
    ("", None),
]


@pytest.mark.parametrize("name,device", NAMES)
def test_device_names_match_their_rows(name, device):
    m = peaks.match_device(name)
    assert m.device == device
    assert m.known == (device is not None)
    if device is None:
        assert m.rows == ()
        assert m.reason.startswith(f"unknown device {name!r}")
        assert "gpuprof.profile(peak_tflops=...)" in m.reason
        assert m.peak_tflops("bf16") is None and m.memory_bandwidth_gbps is None
    else:
        assert m.rows and all(r.device == device for r in m.rows)
        assert repr(device) in m.reason


def test_matching_ignores_case_and_spacing():
    assert peaks.match_device("  nvidia   h100_pcie ").device == "H100 PCIe"


def test_the_dense_peak_is_the_best_engine_and_never_sparse():
    a100 = peaks.match_device("NVIDIA A100-SXM4-80GB")
    assert a100.peak_tflops("fp64") == 19.5  # tensor, not the 9.7 vector row
    assert a100.peak_tflops("fp16") == 312  # not the 624 with sparsity
    assert a100.dense_peak("fp16").sparsity == "dense"
    assert a100.peak_tflops("fp8") is None
    assert a100.memory_bandwidth_gbps == 2039


def test_an_mi250x_device_is_one_gcd():
    m = peaks.match_device("AMD Instinct MI250X")
    assert m.dense_peak("bf16").peak == 383  # the module, as printed
    assert m.peak_tflops("bf16") == 191.5  # one of its two GCDs, which is what ROCm shows
    assert m.memory_bandwidth_gbps == 1600


# ---------------------------------------------------------------------------------------------------
# The CPU's peak


def _cpu(n, **fields):
    lines = [f"processor\t: {n}"] + [f"{k}\t: {v}" for k, v in fields.items()]
    return "\n".join(lines) + "\n\n"


def _x86(ncpu, flags, model_name="Intel(R) Xeon(R) CPU", mhz="2000.000", cores_of=None, **extra):
    return "".join(
        _cpu(
            i,
            vendor_id=extra.get("vendor", "GenuineIntel"),
            **{"cpu family": extra.get("family", "6"), "model": extra.get("model", "85")},
            **{"model name": model_name, "cpu MHz": mhz, "physical id": "0"},
            **({"core id": str(cores_of(i))} if cores_of else {}),
            flags=flags,
        )
        for i in range(ncpu)
    )


AVX512_FLAGS = "fpu sse sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl"


def test_cpu_avx512_with_smt_siblings_and_turbo_clock():
    # 4 CPUs, 2 cores with 2 hyperthreads each (core id 0 0 1 1); cpufreq max 3.5 GHz.
    text = _x86(4, AVX512_FLAGS, "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", cores_of=lambda i: i // 2)
    p = peaks.cpu_peak(cpuinfo=text, cpus={0, 1, 2, 3}, machine="x86_64", cpufreq_max_khz={0: 3_500_000})
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle, p.cores, p.clock_ghz) == (64, 32, 2, 3.5)
    assert p.fp32_tflops == pytest.approx(64 * 3.5e9 * 2 / 1e12)
    assert p.fp64_tflops == pytest.approx(32 * 3.5e9 * 2 / 1e12)
    assert p.estimate and p.derivation.startswith("Estimate:")
    assert "AVX-512" in p.derivation and "turbo" in p.derivation and "448.0 / 224.0 GFLOP/s" in p.derivation
    # Without cpufreq: the base clock in the model name.
    p = peaks.cpu_peak(cpuinfo=text, cpus={0, 2}, machine="x86_64", cpufreq_max_khz={})
    assert (p.cores, p.clock_ghz) == (2, 2.1) and "base clock" in p.clock_source
    p = peaks.cpu_peak(cpuinfo=text, cpus={0, 1}, machine="x86_64", cpufreq_max_khz={})
    assert p.cores == 1  # two siblings of one core


def test_cpu_avx2_machine():
    text = _x86(2, "fpu sse sse2 avx fma avx2", "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz", cores_of=int)
    p = peaks.cpu_peak(cpuinfo=text, cpus={0, 1}, machine="x86_64", cpufreq_max_khz={})
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle) == (32, 16)  # 2 units x 16 / 8
    assert p.fp32_tflops == pytest.approx(32 * 2.5e9 * 2 / 1e12)
    assert "AVX2 FMA" in p.isa


def test_cpu_amd_vector_widths():
    zen4 = _x86(1, AVX512_FLAGS, "AMD EPYC 9654 96-Core Processor", vendor="AuthenticAMD", family="25")
    p = peaks.cpu_peak(cpuinfo=zen4, cpus={0}, machine="x86_64", cpufreq_max_khz={0: 3_700_000})
    assert p.fp32_flops_per_cycle == 32 and "Zen 4" in p.isa
    zen1 = _x86(1, "sse2 avx fma avx2", "AMD EPYC 7601", vendor="AuthenticAMD", family="23", model="1")
    assert peaks.cpu_peak(cpuinfo=zen1, cpus={0}, machine="x86_64").fp32_flops_per_cycle == 16
    zen2 = _x86(1, "sse2 avx fma avx2", "AMD EPYC 7742", vendor="AuthenticAMD", family="23", model="49")
    assert peaks.cpu_peak(cpuinfo=zen2, cpus={0}, machine="x86_64").fp32_flops_per_cycle == 32


def test_cpu_without_avx():
    text = _x86(1, "fpu sse sse2 sse4_1 sse4_2", "Intel(R) Atom(TM) CPU", mhz="1600.000")
    p = peaks.cpu_peak(cpuinfo=text, cpus={0}, machine="x86_64", cpufreq_max_khz={})
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle) == (8, 4)
    assert p.clock_ghz == 1.6 and "cpu MHz" in p.clock_source
    assert p.fp32_tflops == pytest.approx(8 * 1.6e9 / 1e12)


def test_cpu_aarch64():
    neoverse_n1 = "".join(
        _cpu(i, BogoMIPS="50.00", Features="fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp")
        for i in range(4)
    )
    p = peaks.cpu_peak(
        cpuinfo=neoverse_n1, cpus={0, 1, 2}, machine="aarch64", cpufreq_max_khz={0: 3_000_000, 1: 3_000_000}
    )
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle, p.cores) == (16, 8, 3)  # no core ids: CPUs
    assert p.fp32_tflops == pytest.approx(16 * 3e9 * 3 / 1e12) and "NEON" in p.isa
    grace = _cpu(0, Features="fp asimd sve sve2 bf16")
    p = peaks.cpu_peak(cpuinfo=grace, cpus={0}, machine="aarch64", cpufreq_max_khz={0: 3_400_000})
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle) == (32, 16) and "SVE" in p.isa
    # aarch64's /proc/cpuinfo has no clock: without cpufreq there is no estimate, and it says why.
    p = peaks.cpu_peak(cpuinfo=grace, cpus={0}, machine="aarch64", cpufreq_max_khz={})
    assert p.fp32_tflops is None and p.estimate and "no clock" in p.derivation


def _expected_per_cycle(block: dict) -> tuple[int, int]:
    flags = set(block.get("flags", "").split())
    amd = block.get("vendor_id") == "AuthenticAMD"
    family, model = int(block.get("cpu family", "0")), int(block.get("model", "0"))
    if "avx512f" in flags:
        return (32, 16) if amd and family == 25 else (2 * 32, 2 * 16)
    if "avx2" in flags and "fma" in flags:
        return (16, 8) if amd and family == 23 and model < 0x30 else (2 * 16, 2 * 8)
    if "avx" in flags:
        return 16, 8
    return (8, 4) if "sse2" in flags else (2, 2)


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"), reason="x86-64 Linux only"
)
def test_cpu_peak_of_this_machine():
    p = peaks.cpu_peak()
    assert p.estimate and p.derivation.startswith("Estimate:")
    assert p.fp32_tflops > 0 and p.fp64_tflops > 0
    # The same formula from what this test reads itself.
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        blocks = [
            dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in b.splitlines()))
            for b in f.read().split("\n\n")
            if b.strip()
        ]
    cpus = os.sched_getaffinity(0)
    mine = [b for b in blocks if int(b["processor"]) in cpus]
    fp32, fp64 = _expected_per_cycle(mine[0])
    freqs = []
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/cpufreq/cpuinfo_max_freq") as f:
                freqs.append(int(f.read()) / 1e6)
        except OSError:
            pass
    base = re.search(r"@\s*([\d.]+)\s*GHz", mine[0].get("model name", ""))
    if freqs:
        ghz = max(freqs)
    else:
        ghz = float(base.group(1)) if base else max(float(b["cpu MHz"]) for b in mine) / 1e3
    cores = len({(b.get("physical id"), b["core id"]) for b in mine}) if "core id" in mine[0] else len(cpus)
    assert (p.fp32_flops_per_cycle, p.fp64_flops_per_cycle, p.clock_ghz, p.cores) == (fp32, fp64, ghz, cores)
    assert p.fp32_tflops == pytest.approx(fp32 * ghz * cores / 1e3)
    assert p.fp64_tflops == pytest.approx(fp64 * ghz * cores / 1e3)
