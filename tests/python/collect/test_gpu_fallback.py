"""GPU collection where it cannot run: host-only profiling, one clear line saying why, no crash.

These run on any machine; tests/gpu proves the collection itself on a real GPU.
"""

import ctypes
import os

import pytest

import gpuprof
from gpuprof._native import _core
from gpuprof.collect.gpu import cupti_search_dirs

torch = pytest.importorskip("torch")


def _driver_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _small_loop(prof, steps=3):
    for _ in range(steps):
        with gpuprof.range("forward"):
            torch.randn(32, 32) @ torch.randn(32, 32)
        prof.step()


@pytest.mark.skipif(_driver_loadable(), reason="an NVIDIA driver is present (tests/gpu covers it)")
def test_no_driver_means_host_only_with_the_reason():
    status = _core.gpu_start([])
    assert status["enabled"] is False
    assert "no NVIDIA driver" in status["message"] and "libcuda.so.1" in status["message"]
    assert "host-side only" in status["message"]
    assert not _core.gpu_enabled()
    _core.gpu_release()  # harmless when nothing was started

    with gpuprof.profile() as prof:
        _small_loop(prof)
    report = prof.report()
    note = report.to_dict()["metadata"]["gpu_collection"]
    assert note.startswith("off: no NVIDIA driver")
    assert "GPU collection off: no NVIDIA driver" in str(report)
    # The host side is intact: three steps, CPU Exec present, no device events.
    assert len(report.steps) == 3
    assert report.average["cpu_exec_us"] > 0
    assert _core.trace_events(report.trace, "kernel") == []


def test_gpu_false_is_reported_as_not_requested():
    with gpuprof.profile(gpu=False) as prof:
        _small_loop(prof, steps=2)
    note = prof.report().to_dict()["metadata"]["gpu_collection"]
    assert note == "off: GPU collection not requested (gpu=False)"


def test_torch_profiler_already_active_means_host_only_with_the_reason():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with gpuprof.profile() as prof:
            _small_loop(prof, steps=2)
    report = prof.report()
    note = report.to_dict()["metadata"]["gpu_collection"]
    assert note.startswith("off: torch.profiler is active in this process")
    assert "host-side only" in note
    assert len(report.steps) == 2


def test_cupti_search_dirs_lists_only_existing_folders():
    dirs = cupti_search_dirs()
    assert all(os.path.isdir(d) for d in dirs)
    # torch's own lib folder is always a candidate when torch is installed.
    assert any(d.endswith(os.path.join("torch", "lib")) for d in dirs)


def test_nvtx_ranges_without_a_tool_are_harmless():
    for _ in range(1000):
        _core.nvtx_push("gpuprof-test")
        _core.nvtx_pop()
    with gpuprof.range("outer"):
        with gpuprof.range("inner"):
            pass


def test_trace_events_expose_kernel_and_copy_properties_of_a_hand_built_trace():
    t = _core.Trace()
    t.add_event("kernel", "spin", 100, 50, correlation=7, device=0, tid=13)
    t.add_event("runtime", "cudaLaunchKernel", 90, 5, correlation=7, external_id=3)
    (k,) = _core.trace_events(t, "kernel")
    assert (k["name"], k["start_ns"], k["dur_ns"], k["device"], k["tid"], k["correlation"]) == (
        "spin",
        100,
        50,
        0,
        13,
        7,
    )
    assert "grid" not in k  # hand-added events carry no launch properties
    (r,) = _core.trace_events(t, "runtime")
    assert (r["name"], r["external_id"], r["device"]) == ("cudaLaunchKernel", 3, -1)
    assert _core.gpu_samples(t) == []
    assert _core.trace_devices(t) == []
