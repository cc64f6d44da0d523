"""GPU collection on a real GPU: CUPTI records against CUDA-event timing and known byte counts, the
one clock, attribution to host ops, device properties, NVML samples."""

import pytest

import gpuprof
from gpuprof._native import _core

pytestmark = pytest.mark.gpu


def _profiled(fn):
    """Runs fn() inside one gpuprof span; returns (fn's result, the span's native Trace)."""
    with gpuprof.profile() as prof:
        result = fn()
    report = prof.report()
    note = report.to_dict()["metadata"].get("gpu_collection", "")
    assert note.startswith("on"), f"GPU collection did not run: {note}"
    return result, report.trace


def test_gpu_collection_starts_with_cupti_13(cuda):
    status = _core.gpu_start(gpuprof.collect.gpu.cupti_search_dirs())
    try:
        assert status["enabled"], status["message"]
        assert status["cupti_version"] // 10000 == 13
    finally:
        _core.gpu_release()


@pytest.mark.parametrize("duration_ms", [1, 5, 20])
def test_spin_kernel_duration_matches_cuda_events_within_2_percent(cuda, kernels, duration_ms):
    event_ms, trace = _profiled(lambda: kernels.spin_ns(duration_ms * 1_000_000, 1, 3))
    spins = [k for k in _core.trace_events(trace, "kernel") if "spin_ns_kernel" in k["name"]]
    assert len(spins) == 3
    for k, ms in zip(sorted(spins, key=lambda k: k["start_ns"]), event_ms):
        cupti_ms = k["dur_ns"] / 1e6
        assert cupti_ms == pytest.approx(ms, rel=0.02), (cupti_ms, ms)
        assert cupti_ms >= duration_ms * 0.999  # it spun at least as long as asked
        assert k["grid"] == (1, 1, 1) and k["block"] == (32, 1, 1)
        assert k["registers_per_thread"] > 0


def test_copy_bytes_are_exact_and_pageable_vs_pinned_is_recognised(cuda, kernels):
    nbytes = 48 * 1024 * 1024 + 123  # an odd size: no rounding hides a mistake

    def copies():
        kernels.host_to_device(nbytes, False, 2)
        kernels.host_to_device(nbytes, True, 2)

    _, trace = _profiled(copies)
    h2d = [c for c in _core.trace_events(trace, "memcpy") if c["copy_kind"] == "HtoD"]
    pageable = [c for c in h2d if c["src_kind"] == "pageable"]
    pinned = [c for c in h2d if c["src_kind"] == "pinned"]
    assert sum(c["bytes"] for c in pageable) == 2 * nbytes
    assert sum(c["bytes"] for c in pinned) == 2 * nbytes
    assert all(c["dst_kind"] == "device" for c in h2d)
    assert len(pinned) == 2 and all(c["bytes"] == nbytes for c in pinned)
    assert all("Pinned -> Device" in c["name"] for c in pinned)


def test_torch_copies_are_attributed_and_pinned_memory_recognised(cuda):
    torch = cuda
    host = torch.ones(1 << 20, dtype=torch.float32)
    pinned = host.pin_memory()

    def copies():
        host.to("cuda")
        pinned.to("cuda", non_blocking=True)
        torch.cuda.synchronize()

    _, trace = _profiled(copies)
    h2d = [c for c in _core.trace_events(trace, "memcpy") if c["copy_kind"] == "HtoD"]
    assert sorted(c["src_kind"] for c in h2d) == ["pageable", "pinned"]
    assert all(c["bytes"] == 4 << 20 for c in h2d)
    op_ids = {e["external_id"] for e in _core.trace_events(trace, "host_op")}
    assert all(c["external_id"] in op_ids for c in h2d)  # both come from aten::copy_ / to


def _torch_work(torch, steps=5):
    a = torch.randn(512, 512, device="cuda")
    for _ in range(steps):
        b = torch.relu(a @ a)
        b.sum().item()


def test_kernels_never_start_before_their_launch_and_carry_the_host_op(cuda):
    _, trace = _profiled(lambda: _torch_work(cuda))
    # Launches through the runtime (cudaLaunchKernel) or straight through the driver (cuLaunchKernel).
    runtime = {r["correlation"]: r for kind in ("driver", "runtime") for r in _core.trace_events(trace, kind)}
    kernels = _core.trace_events(trace, "kernel")
    assert len(kernels) >= 15  # 5 x (gemm, relu, sum)
    op_ids = {e["external_id"] for e in _core.trace_events(trace, "host_op")}
    for k in kernels:
        launch = runtime.get(k["correlation"])
        assert launch is not None, f"kernel {k['name']} has no runtime call (correlation {k['correlation']})"
        assert launch["start_ns"] <= k["start_ns"], (launch, k)  # one clock for host and device
        assert k["external_id"] in op_ids, f"kernel {k['name']} not attributed to a host op"
        assert launch["external_id"] == k["external_id"]


def test_device_properties_match_torch(cuda):
    _, trace = _profiled(lambda: _torch_work(cuda, steps=1))
    (dev,) = [d for d in _core.trace_devices(trace) if d["id"] == cuda.cuda.current_device()]
    props = cuda.cuda.get_device_properties(dev["id"])
    assert dev["num_sms"] == props.multi_processor_count
    assert (dev["compute_major"], dev["compute_minor"]) == (props.major, props.minor)
    assert dev["total_global_mem"] == props.total_memory
    assert dev["name"] == props.name
    assert dev["max_threads_per_sm"] > 0 and dev["regs_per_sm"] > 0 and dev["shared_mem_per_sm"] > 0


def test_nvml_samples_every_100_ms_while_active(cuda, kernels):
    _, trace = _profiled(lambda: kernels.spin_ns(600_000_000, 132, 1))  # 0.6 s of a busy GPU
    # The periodic samples; the readings at the span's boundaries carry the energy counter alone.
    fields = (
        "gpu_util_pct",
        "mem_util_pct",
        "memory_used_bytes",
        "power_mw",
        "sm_clock_mhz",
        "temperature_c",
    )
    mine = [s for s in _core.gpu_samples(trace) if s["device"] == cuda.cuda.current_device()]
    samples = [s for s in mine if any(s[f] != -1 for f in fields)]
    assert all(s["energy_mj"] >= 0 for s in mine if s not in samples), mine
    assert 4 <= len(samples) <= 9, samples
    assert all(0 <= s["gpu_util_pct"] <= 100 for s in samples), samples
    assert max(s["gpu_util_pct"] for s in samples) > 50
    assert all(s["memory_used_bytes"] > 0 and s["sm_clock_mhz"] > 0 for s in samples)


def test_runtime_and_kernel_categories_fill_the_breakdown(cuda):
    def loop():
        with gpuprof.profile() as prof:
            for _ in range(4):
                _torch_work(cuda, steps=2)
                prof.step()
        return prof.report()

    report = loop()
    avg = report.average
    assert avg["kernel_us"] > 0 and avg["runtime_us"] > 0
    assert report.to_dict()["counts"]["dropped"] == 0


def test_gemm_kernels_compute_the_right_result(cuda, kernels):
    n = 256
    for tc in (False, True):
        out = kernels.gemm_check(n, tc)
        assert min(out) == max(out) == n * 0.5
    _, trace = _profiled(lambda: (kernels.gemm_fp32(n, 1), kernels.gemm_tensor_core(n, 1)))
    names = " ".join(k["name"] for k in _core.trace_events(trace, "kernel"))
    assert "sgemm_simt_kernel" in names and "gemm_wmma_kernel" in names
