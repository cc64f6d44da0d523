"""The breakdown and the GPU summary of one Report come from the same steps, whatever the step rules."""

from gpuprof import _core_testing as builders
from gpuprof._native import _core
from gpuprof.report.build import build_report


def three_steps_last_incomplete():
    # Steps #1 [0,1000), #2 [1000,2000), #3 [2000,3000) ns. Steps 1 and 2 each launch 5 kernels of
    # 100 ns; step 3 launches 2 (2 < 0.8 x 5: the plugin's rule drops it as incomplete).
    t = _core.Trace()
    corr = 1
    for step, n in ((1, 5), (2, 5), (3, 2)):
        base = (step - 1) * 1000
        t.add_event("step", f"ProfilerStep#{step}", base, 1000)
        for k in range(n):
            t.add_event("runtime", "cudaLaunchKernel", base + 10 * k, 5, correlation=corr)
            builders.add_kernel(t, "gemm", base + 100 + 150 * k, 100, correlation=corr)
            corr += 1
    return t


def test_incomplete_last_step_dropped_by_default_and_kept_on_request():
    dropped = build_report(three_steps_last_incomplete())
    kept = build_report(three_steps_last_incomplete(), drop_incomplete_last_step=False)
    assert [s["step"] for s in dropped.steps] == [1, 2]
    assert [s["step"] for s in kept.steps] == [1, 2, 3]
    assert dropped.to_dict()["step_rules"]["dropped_incomplete_last"] is True
    # GPU utilization over the kept steps' window: 2 x 500 ns of kernels in [0, 2000) = 50%;
    # with step 3 kept: (500 + 500 + 200) ns in [0, 3000) = 40%.
    (d,) = dropped.to_dict()["devices"]
    (k,) = kept.to_dict()["devices"]
    assert abs(d["utilization_pct"] - 50.0) < 1e-9
    assert abs(k["utilization_pct"] - 40.0) < 1e-9


def test_nvml_samples_reach_the_report_and_its_html(tmp_path):
    # Two samples of GPU 0, 100 ms apart, as the NVML sampler stores them; -1 (power not reported
    # by this board) becomes None, never a made-up 0.
    t = three_steps_last_incomplete()
    builders.add_gpu_sample(t, 0, device=0, gpu_util_pct=35, memory_used_bytes=2 << 30, power_mw=-1)
    builders.add_gpu_sample(
        t, 100_000_000, device=0, gpu_util_pct=90, memory_used_bytes=3 << 30, power_mw=250_500
    )
    report = build_report(t)
    samples = report.to_dict()["gpu_samples"]
    assert [s["gpu_util_pct"] for s in samples] == [35, 90]
    assert [s["ts_ns"] for s in samples] == [0, 100_000_000]
    assert [s["power_w"] for s in samples] == [None, 250.5]
    html = report.to_html(tmp_path / "r.html")
    assert html.count("NVML") >= 1 and "<svg" in html


def test_repeated_and_nested_step_markers_are_merged_with_a_counted_note():
    # Five copies of ProfilerStep#3 over [0,1000) (a trace written twice over, prof.step() called
    # twice) and a nested profiler's ProfilerStep#9 inside step 4 [1000,2000): two steps of 1000 ns,
    # not one step and four of 0 us, and the report says what was merged and dropped.
    t = _core.Trace()
    for start, dur in ((0, 1000), (0, 1000), (100, 900), (0, 900), (0, 1000)):
        t.add_event("step", "ProfilerStep#3", start, dur)
    t.add_event("step", "ProfilerStep#4", 1000, 1000)
    t.add_event("step", "ProfilerStep#9", 1200, 300)
    t.add_event("host_op", "aten::mm", 200, 600)
    report = build_report(t)
    assert [(s["step"], s["total_us"]) for s in report.steps] == [(3, 1.0), (4, 1.0)]
    assert report.steps[0]["cpu_exec_us"] == 0.6
    rules = report.to_dict()["step_rules"]
    assert rules["duplicate_step_markers"] == 5 and rules["nested_step_markers"] == 1
    note = "5 ProfilerStep markers repeated a step number"
    assert note in report.to_text(width=200) and note in report.to_markdown()
    assert "1 ProfilerStep marker inside another step (a nested profiler?) was dropped" in report.to_text(
        width=200
    )
