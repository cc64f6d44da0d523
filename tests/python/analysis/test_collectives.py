"""Collectives per kind x process group (docs/metrics.md, "Collectives"): rows from real NCCL and
gloo traces checked against the records in the files, an exported trace that reads back the same,
the cross-rank split into transfer and waiting with nccl-tests' bandwidths over hand-built ranks
(every number worked out in the comments), and the advice that reads the rows."""

from __future__ import annotations

import gzip
import json

import pytest
from _traces import TRACES

from gpuprof import _core_testing as builders
from gpuprof._native import _core
from gpuprof.advice import advise
from gpuprof.analysis.ranks import summary_from_report
from gpuprof.report.build import analyze_file, build_report, cross_rank_report
from gpuprof.traces.export import export_chrome_trace

A100 = TRACES / "hta_a100_nccl" / "rank0.json.gz"
GLOO = TRACES / "hta_cpu_only" / "rank-34.pt.trace.json.gz"


def _real(path):
    if not path.is_file():
        pytest.skip(f"{path} not present (the real traces live in ../shared/traces)")
    return path


def _events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_a_real_nccl_traces_rows_are_its_kernels_records():
    # The A100 trace's NCCL kernels carry their call's facts (Kineto copies record_param_comms'
    # args onto them): counted here straight from the file.
    path = _real(A100)
    kernels = [
        e for e in _events(path) if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    ]
    rows = {r["name"]: r for r in analyze_file(path).data["collectives"]}
    for torch_name, kind in (("allreduce", "all_reduce"), ("broadcast", "broadcast")):
        mine = [k for k in kernels if k["args"]["Collective name"] == torch_name]
        row = rows[kind]
        assert row["calls"] == len(mine) > 0
        assert (row["process_group"], row["pg_desc"], row["group_size"], row["group_ranks"]) == (
            "0",
            "default_pg",
            2,
            "[0, 1]",
        )
        # S = max(in, out) elements per call, times the dtype's width (DDP's broadcasts send the
        # parameters as Float and the buffers' counters as Long).
        width = {"Float": 4, "Long": 8}
        want_bytes = sum(
            width[k["args"]["dtype"]] * max(k["args"]["In msg nelems"], k["args"]["Out msg nelems"])
            for k in mine
        )
        assert row["bytes"] == want_bytes
        assert row["total_us"] == pytest.approx(sum(k["dur"] for k in mine), abs=0.01)
        assert row["timed_by"] == "device"
        # One rank of the job in the file: no split into transfer and waiting, bandwidths over the
        # whole time. all_reduce, n = 2: busbw = algbw x 2(2-1)/2 = algbw; broadcast: x 1.
        assert row["transfer_us"] is None and row["wait_us"] is None
        algbw = want_bytes / (row["total_us"] * 1000)  # bytes per ns = GB/s
        assert row["algbw_gbps"] == pytest.approx(algbw) and row["busbw_gbps"] == pytest.approx(algbw)


def test_gloo_calls_are_sized_by_their_inputs_and_timed_on_the_host():
    path = _real(GLOO)
    events = _events(path)
    (step,) = [e for e in events if e["name"].startswith("ProfilerStep#")]
    # The calls that start in the trace's one step (the file has 10, 2 of them in the step).
    ranges = [
        e
        for e in events
        if e["name"].startswith("gloo:") and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
    ]
    (row,) = analyze_file(path).data["collectives"]
    assert row["name"] == "all_reduce" and row["calls"] == len(ranges) == 2
    # Input Dims [[n]] of Input type float: 4 n bytes; the 300-rank job has 10 process groups, and
    # gloo's ranges name none: the group is not guessed.
    assert row["bytes"] == sum(4 * e["args"]["Input Dims"][0][0] for e in ranges)
    assert row["total_us"] == pytest.approx(sum(e["dur"] for e in ranges), abs=0.01)
    assert row["timed_by"] == "host" and row["process_group"] == "" and row["group_size"] is None
    assert row["busbw_gbps"] is None  # no n, no bus bandwidth


def test_an_exported_trace_reads_back_the_same_collectives(tmp_path):
    path = _real(A100)
    first = analyze_file(path)
    out = export_chrome_trace(first.trace, tmp_path / "again.json.gz")
    again = analyze_file(out)
    assert again.data["collectives"] == first.data["collectives"]
    assert again.data["collective_calls"] == first.data["collective_calls"]


# ---- hand-built ranks -----------------------------------------------------------------------------
MB100 = 25_000_000  # floats: 100 MB


def _rank_trace(rank: int, kernel_ms: list[float], *, device="NVIDIA H100 80GB HBM3", elements=MB100):
    """One step [0, 30 ms) with an NCCL all_reduce every 12 ms, one per entry of ``kernel_ms`` (its
    kernel that long), in the job's default group of 2 ranks."""
    t = _core.Trace()
    d = _core.DeviceProps()
    d.id, d.name, d.num_sms = 0, device, 132
    builders.add_device(t, d)
    t.metadata = {
        "distributedInfo": json.dumps(
            {
                "backend": "nccl",
                "rank": rank,
                "world_size": 2,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}],
            }
        )
    }
    t.add_event("step", "ProfilerStep#1", 0, 30_000_000)
    start = 1_000_000
    for i, ms in enumerate(kernel_ms):
        ext = 100 + i
        t.add_event("host_op", "record_param_comms", start, 50_000, external_id=ext, tid=1)
        builders.add_collective_info(
            t, ext, name="allreduce", in_nelems=elements, out_nelems=elements, dtype="Float"
        )
        t.add_event(
            "runtime", "cudaLaunchKernel", start + 10_000, 10_000, correlation=ext, external_id=ext, tid=1
        )
        builders.add_kernel(
            t, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", start + 100_000, int(ms * 1e6), correlation=ext
        )
        start += 12_000_000
    return t


def _job(kernel_ms_by_rank: dict, **kw):
    """The cross-rank report of hand-built ranks, as `gpuprof analyze DIR` builds it."""
    results = []
    for rank, kernel_ms in kernel_ms_by_rank.items():
        data = build_report(_rank_trace(rank, kernel_ms, **kw)).to_dict()
        results.append((summary_from_report(data), data))
    return cross_rank_report(results)


def test_the_cross_rank_split_takes_each_calls_fastest_rank_as_its_transfer():
    # Two all_reduces of 100 MB. Rank 0's kernels take 2 ms and 3 ms, rank 1's 5 ms and 1 ms: in the
    # first call rank 0 arrived last (it only moved data: 2 ms), in the second rank 1 (1 ms).
    # Rank 0: transfer = min(2, 5) + min(3, 1) = 3 ms; waiting = (2 - 2) + (3 - 1) = 2 ms; total 5 ms.
    report = _job({0: [2.0, 3.0], 1: [5.0, 1.0]})
    (row,) = report.data["collectives"]
    assert row["total_us"] == pytest.approx(5000.0)
    assert row["transfer_us"] == pytest.approx(3000.0) and row["wait_us"] == pytest.approx(2000.0)
    # algbw over the transfer time: 200e6 bytes / 3e6 ns = 66.67 GB/s; all_reduce, n = 2:
    # busbw = algbw x 2 x (2 - 1) / 2 = 66.67 GB/s.
    assert row["bytes"] == 200_000_000
    assert row["algbw_gbps"] == pytest.approx(200e6 / 3e6)
    assert row["busbw_gbps"] == pytest.approx(200e6 / 3e6)


def test_calls_that_do_not_match_one_to_one_are_not_split():
    # Rank 1 has one call in the step where rank 0 has two: the step cannot be paired, and it is the
    # only step, so the row keeps its whole time and no split.
    report = _job({0: [2.0, 3.0], 1: [5.0]})
    (row,) = report.data["collectives"]
    assert row["transfer_us"] is None and row["wait_us"] is None
    assert row["algbw_gbps"] == pytest.approx(200e6 / 5e6)  # over the whole 5 ms


def test_low_bus_bandwidth_is_advised_against_the_nvlink_of_the_gpu():
    # H100 SXM: NVLink 450 GB/s one way. Two 100 MB all_reduces whose transfer takes 10 ms each on the
    # faster rank: algbw = busbw (n = 2) = 200e6 / 20e6 = 10 GB/s, 2.2% of the link (under 25%).
    report = _job({0: [10.0, 10.0], 1: [10.0, 10.0]})
    (a,) = [a for a in report.advice if a["rule"] == "low_bus_bandwidth"]
    assert a["evidence"]["busbw_gbps"] == pytest.approx(10.0) and a["evidence"]["link_gbps"] == 450.0
    # Bound: 20 ms of transfer in the 30 ms step x (1 - 10 / 450) = 65.2%, under the exposed
    # communication share (the kernels: 20 of 30 ms, 66.7%).
    assert a["saving_bound_pct"] == pytest.approx(100.0 * 20 / 30 * (1 - 10 / 450), abs=0.1)
    # At 300 GB/s bus bandwidth (two 100 MB calls in 0.667 ms each) nothing is said; nor on a GPU
    # whose link is not known (a PCIe part), nor for one rank alone (its time includes waiting).
    fast = _job({0: [2 / 3, 2 / 3], 1: [2 / 3, 2 / 3]})
    assert "low_bus_bandwidth" not in [x["rule"] for x in fast.advice]
    pcie = _job({0: [10.0, 10.0], 1: [10.0, 10.0]}, device="NVIDIA H100 PCIe")
    assert "low_bus_bandwidth" not in [x["rule"] for x in pcie.advice]
    alone = build_report(_rank_trace(0, [10.0, 10.0]))
    assert "low_bus_bandwidth" not in [x["rule"] for x in alone.advice]


def test_many_small_all_reduces_are_advised_to_fill_larger_buckets():
    # 16 all_reduces of 64 KiB (16,384 floats) in a 20 ms step, 0.5 ms each: 8 ms, 40% of the step.
    t = _core.Trace()
    t.add_event("step", "ProfilerStep#1", 0, 20_000_000)
    for i in range(16):
        ext = 10 + i
        t.add_event("user_range", "gloo:all_reduce", 1_000_000 * (i + 1), 500_000, external_id=ext, tid=5)
        builders.add_collective_info(t, ext, in_nelems=16_384, dtype="Float")
    data = build_report(t).to_dict()
    (a,) = [a for a in advise(data) if a["rule"] == "small_collectives"]
    assert a["evidence"]["calls_per_step"] == 16 and a["evidence"]["mean_bytes"] == 65_536
    assert a["evidence"]["collective_pct"] == pytest.approx(40.0)
    assert "bucket_cap_mb" in a["fix"]
    # The bound: those 8 ms (40%), at most the exposed communication (the gloo ranges: 40% here).
    assert a["saving_bound_pct"] == pytest.approx(40.0, abs=0.1)
    # Four calls of the same size per step are not "many".
    few = _core.Trace()
    few.add_event("step", "ProfilerStep#1", 0, 20_000_000)
    for i in range(4):
        few.add_event(
            "user_range", "gloo:all_reduce", 1_000_000 * (i + 1), 2_000_000, external_id=10 + i, tid=5
        )
        builders.add_collective_info(few, 10 + i, in_nelems=16_384, dtype="Float")
    assert "small_collectives" not in [a["rule"] for a in advise(build_report(few).to_dict())]


def test_a_merged_timeline_shifts_each_clock_so_that_the_collectives_end_together(tmp_path):
    # Two ranks on two hosts. Rank 1's clock reads 1 s more than rank 0's; each all_reduce ends at
    # the same moment on both (within 20 us), though rank 1 started each later (it arrived last).
    from gpuprof.cli import main

    folder = tmp_path / "job"
    folder.mkdir()
    for rank, shift, kernels in ((0, 0, [2.0, 3.0]), (1, 1_000_000_000, [1.0, 1.5])):
        t = _core.Trace()
        t.metadata = {**_rank_trace(rank, []).metadata, "hostname": f"node{rank}"}
        t.add_event("step", "ProfilerStep#1", shift, 30_000_000)
        start = 1_000_000
        for i, ms in enumerate(kernels):
            ext = 100 + i
            end = start + 3_100_000 + (20_000 if rank else 0)  # the call's end: rank 1's 20 us later
            t.add_event("host_op", "record_param_comms", shift + start, 50_000, external_id=ext, tid=1)
            builders.add_collective_info(
                t, ext, name="allreduce", in_nelems=MB100, out_nelems=MB100, dtype="Float"
            )
            t.add_event(
                "runtime",
                "cudaLaunchKernel",
                shift + start + 10_000,
                10_000,
                correlation=ext,
                external_id=ext,
                tid=1,
            )
            builders.add_kernel(
                t,
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                shift + end - int(ms * 1e6),
                int(ms * 1e6),
                correlation=ext,
            )
            start += 12_000_000
        export_chrome_trace(t, folder / f"rank{rank}.json.gz")
    assert main(["export", str(folder), "--merged", str(tmp_path / "merged.json.gz")]) == 0
    with gzip.open(tmp_path / "merged.json.gz", "rt") as f:
        merged = json.load(f)
    (r0, r1) = merged["gpuprofMerged"]["ranks"]
    assert r0["offset_us"] == 0 and r1["aligned_by"] == "collectives" and r1["matched"] == 2
    assert r1["offset_us"] == pytest.approx(-1_000_000 - 20, abs=0.001)  # the median of -1 s - 20 us
    ends = {
        pid: sorted(
            e["ts"] + e["dur"] for e in merged["traceEvents"] if e.get("cat") == "kernel" and e["pid"] == pid
        )
        for pid in (0, 1)
    }
    # On the merged clock the calls end together, and the steps start together (the 1 s is gone).
    assert all(abs(a - b) < 0.01 for a, b in zip(ends[0], ends[1]))
    steps = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e.get("name") == "ProfilerStep#1"}
    assert abs(steps[0] - steps[1]) == pytest.approx(20, abs=0.01)
    # Device lanes are threads of their rank's process.
    lanes = {(e["pid"], e["args"]["name"]) for e in merged["traceEvents"] if e.get("name") == "thread_name"}
    assert lanes == {(0, "GPU 0 stream 0"), (1, "GPU 0 stream 0")}
