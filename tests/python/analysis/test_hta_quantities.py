"""Idle time and launch statistics on the stored GPU traces, against Holistic Trace Analysis.

The expected numbers are traceinsight 0.6.1's (HTA's `get_idle_time_breakdown` and
`get_cuda_kernel_launch_stats`), run by bench/hta_quantities.py with HTA_DISABLE_NS_ROUNDING=1 so
that HTA keeps the traces' fractional microseconds as gpuprof does; the run is recorded in
bench/results/hta_quantities-2026-11-29.json. The rules themselves are specified on hand-built
timelines in tests/cpp/hta_quantities_test.cpp; docs/metrics.md explains the differences kept here.
"""

from __future__ import annotations

import pytest
from _traces import TRACES

from gpuprof.report.build import analyze_file

# trace -> stream -> (host wait, kernel wait, other) in us, as HTA computed them.
HTA_IDLE = {
    "hta_2xv100_ddp/rank0.json.gz": {7: (791330.0, 16727.0, 73829.0), 14: (933139.0, 5568.0, 4444.0)},
    "hta_a100_nccl/rank0.json.gz": {7: (355484.56, 1414.17, 0.0), 40: (381488.45, 0.0, 0.0)},
    "hta_mi250_rocm/rank0.json.gz": {0: (8762.84, 0.0, 0.0)},
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz": {7: (318934.0, 8529.0, 0.0)},
}

# trace -> (launches, cpu total us, gpu total us, delay total us, delay max us, short kernels,
# runtime outliers, delay outliers), HTA's over all launches.
HTA_LAUNCHES = {
    "hta_2xv100_ddp/rank0.json.gz": (17832, 156892.0, 753057.0, 10280212.0, 5799.0, 9686, 2, 6605),
    "hta_a100_nccl/rank0.json.gz": (
        2516,
        23787.895,
        102977.881,
        68120.675640625,
        943.8828828125,
        1380,
        0,
        180,
    ),
    "hta_v100_ns/rank-0.pt.trace.json.gz": (
        4876,
        195772.848,
        378181.762,
        322049139.92,
        90937.858,
        2186,
        675,
        4713,
    ),
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz": (
        7580,
        83728.0,
        503031.0,
        81929231.0,
        31889.0,
        4788,
        5,
        6048,
    ),
}


def _report(rel: str) -> dict:
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"shared trace {path} is absent (tests read ../shared/traces beside the repo)")
    return analyze_file(path).data


@pytest.mark.parametrize("rel", sorted(HTA_IDLE))
def test_idle_time_equals_htas(rel):
    rows = {r["stream"]: r for r in _report(rel)["idle_time"]}
    assert set(rows) == set(HTA_IDLE[rel])
    for stream, (host, kernel, other) in HTA_IDLE[rel].items():
        r = rows[stream]
        # HTA reads the times as binary floats: its sums are off by up to a few thousandths of a us.
        assert r["host_wait_us"] == pytest.approx(host, abs=0.05)
        assert r["kernel_wait_us"] == pytest.approx(kernel, abs=0.05)
        assert r["other_us"] == pytest.approx(other, abs=0.05)
        assert r["idle_us"] == pytest.approx(host + kernel + other, abs=0.1)


def test_idle_time_on_the_nanosecond_trace_differs_by_htas_float_resolution():
    # Timestamps of 1.7e15 us with three decimals: as float64 (HTA) they resolve to 0.25 us, so a
    # launch call starting within 0.25 us of the previous kernel's end can fall on either side.
    # The gaps add up to HTA's total; 56 us of 6453 move from kernel wait to host wait.
    (row,) = _report("hta_v100_ns/rank-0.pt.trace.json.gz")["idle_time"]
    assert row["stream"] == 7
    assert row["idle_us"] == pytest.approx(1290.81 + 5161.96, abs=0.5)
    assert row["host_wait_us"] == pytest.approx(1347.125, abs=0.01)
    assert row["kernel_wait_us"] == pytest.approx(5105.576, abs=0.01)
    assert row["other_us"] == 0.0


@pytest.mark.parametrize("rel", sorted(HTA_LAUNCHES))
def test_launch_stats_equal_htas(rel):
    rows = _report(rel)["launch_stats"]
    launches, cpu, gpu, delay, delay_max, short, runtime_out, delay_out = HTA_LAUNCHES[rel]
    assert sum(r["launches"] for r in rows) == launches
    assert sum(r["short_kernels"] for r in rows) == short
    assert sum(r["runtime_outliers"] for r in rows) == runtime_out
    assert sum(r["delay_outliers"] for r in rows) == delay_out
    assert sum(r["cpu_mean_us"] * r["launches"] for r in rows) == pytest.approx(cpu, rel=1e-9)
    assert sum(r["gpu_mean_us"] * r["launches"] for r in rows) == pytest.approx(gpu, rel=1e-9)
    # Float resolution again (see above): 5 us in 3.2e8 on the nanosecond trace, 0.01 us in 68120
    # on the A100 one.
    assert sum(r["delay_total_us"] for r in rows) == pytest.approx(delay, rel=1e-6)
    assert max(r["delay_max_us"] for r in rows) == pytest.approx(delay_max, abs=0.25)
    totals = [r["delay_total_us"] for r in rows]
    assert totals == sorted(totals, reverse=True)


def test_launch_stats_count_hip_launches_which_hta_does_not():
    # HTA looks for CUDA's launch calls only and finds none in the ROCm trace; gpuprof counts the
    # 14 hipLaunchKernel / hipMemcpyAsync / hipMemsetAsync launches made before the last step.
    rows = _report("hta_mi250_rocm/rank0.json.gz")["launch_stats"]
    assert sum(r["launches"] for r in rows) == 14
    assert sum(r["runtime_outliers"] for r in rows) == 1
    assert sum(r["short_kernels"] for r in rows) == 7


def test_the_reports_show_both_tables():
    path = TRACES / "hta_a100_nccl/rank0.json.gz"
    if not path.exists():
        pytest.skip(f"shared trace {path} is absent (tests read ../shared/traces beside the repo)")
    md = analyze_file(path).to_markdown()
    assert "Stream idle time" in md and "Launch statistics" in md
