"""Drawing a step's critical path reuses the analysis pass's walk: `gpu_tables` keeps the paths of
the steps a report draws (the slowest and the median, as step_views picks them), and
`critical_path_pieces` takes a step from them only when they belong to the trace it is given;
otherwise it walks the trace again. Either way the pieces are the same."""

from __future__ import annotations

import pytest

from gpuprof import _core_testing as builders
from gpuprof._native import _core
from gpuprof.analysis import _median_step, process_groups
from gpuprof.report.build import analyze_file

MS = 1_000_000
# Three steps of 10, 30 and 20 ms: the slowest is step 2, the median (the second of 10, 20, 30)
# step 3.
LENGTHS_MS = {1: 10, 2: 30, 3: 20}


def _trace(kernel: str):
    """Each step: an aten::mm launching `kernel`_N on stream 7 from 0.2 ms to half the step, a
    cudaStreamSynchronize waiting for it until 50 us after, then the host idle to the step's end."""
    t = _core.Trace()
    start = 0
    for n, length_ms in LENGTHS_MS.items():
        length = length_ms * MS
        t.add_event("step", f"ProfilerStep#{n}", start, length)
        t.add_event("host_op", "aten::mm", start + 100_000, 100_000, external_id=n, tid=1)
        t.add_event(
            "runtime", "cudaLaunchKernel", start + 110_000, 20_000, correlation=n, external_id=n, tid=1
        )
        builders.add_kernel(
            t, f"{kernel}_{n}", start + 200_000, length // 2 - 200_000, correlation=n, stream=7
        )
        t.add_event("runtime", "cudaStreamSynchronize", start + 300_000, length // 2 - 250_000, tid=1)
        start += length
    return t


def _analysed(t):
    return _core.gpu_tables(t, False, process_groups(t.metadata))


def _pieces(t, steps, kept=None):
    return _core.critical_path_pieces(t, steps, 2000, kept)


def test_the_slowest_and_the_median_step_are_kept_and_drawn_the_same():
    t = _trace("gemm")
    a = _analysed(t)
    steps = a["breakdown"]["steps"]
    assert [s["total_ns"] for s in steps] == [10 * MS, 30 * MS, 20 * MS]
    kept = a["critical_path_kept"]
    # step_views' own choice, on the same steps.
    rows = [{"step": s["step"], "total_us": s["total_ns"] / 1000} for s in steps]
    typical = _median_step(rows)["step"]
    assert kept.steps == [max(rows, key=lambda s: s["total_us"])["step"], typical] == [2, 3]
    walked = _pieces(t, steps)
    assert _pieces(t, steps, kept) == walked
    # Step 2 from its end: the host idle for 14.95 ms, the sync waiting for gemm_2 (50 us), the
    # kernel itself from 0.2 ms, and the launch overhead back to the launch call at 0.11 ms, whose
    # 0.1 ms before that are inside aten::mm and the host's.
    step2 = walked[1]
    by_name = {step2["names"][p[3]]: p for p in step2["pieces"]}
    assert by_name["gemm_2"][1] == pytest.approx(14_800.0)
    assert by_name["host between operators"][1] >= 14_950.0
    assert {"cpu_bound", "gpu_compute_bound", "gpu_kernel_launch_overhead"} <= {p[2] for p in step2["pieces"]}
    assert sum(p[1] for p in step2["pieces"]) == pytest.approx(30_000.0)


def test_kept_paths_of_another_trace_are_not_taken():
    mine = _trace("gemm")
    other = _trace("conv")
    kept = _analysed(mine)["critical_path_kept"]
    steps = _analysed(other)["breakdown"]["steps"]  # the same steps, in times and numbers
    drawn = _pieces(other, steps, kept)
    assert drawn == _pieces(other, steps)
    assert "conv_2" in drawn[1]["names"] and "gemm_2" not in drawn[1]["names"]


def test_kept_paths_are_not_taken_once_the_trace_has_grown():
    t = _trace("gemm")
    a = _analysed(t)
    steps, kept = a["breakdown"]["steps"], a["critical_path_kept"]
    assert "aten::late" not in _pieces(t, steps, kept)[1]["names"]
    # An operator in step 2's idle host time, after the analysis: it is on the path walked now.
    t.add_event("host_op", "aten::late", 10 * MS + 25 * MS, 2 * MS, tid=1)
    drawn = _pieces(t, steps, kept)
    assert drawn == _pieces(t, steps)
    assert "aten::late" in drawn[1]["names"]


@pytest.mark.parametrize("rel", ["hta_2xv100_ddp/rank0.json.gz", "hta_v100_ns/rank-0.pt.trace.json.gz"])
def test_stored_traces_draw_the_kept_paths_as_walked_again(rel, shared_traces):
    report = analyze_file(str(shared_traces / rel))
    views = report.data["step_views"]["timelines"]
    a = _analysed(report.trace)
    kept = a["critical_path_kept"]
    assert kept.steps == [tl["step"] for tl in views]
    by_step = {s["step"]: s for s in a["breakdown"]["steps"]}
    for tl in views:
        (walked,) = _pieces(report.trace, [by_step[tl["step"]]])
        assert tl["critical_path"] == walked
