"""Advice on real GPU loops: each bottleneck fires its rule, and following the fix makes the step
measurably faster. Needs a CUDA GPU and gpuprof's GPU collection (CUPTI); skipped elsewhere.

Ran on an NVIDIA H200 on 2026-11-29 (docs/gpu.md, docs/advice.md): all five pass after the fixes that
run found (the FP32 cuBLAS kernel taken for a tensor-core one; too little device work behind each
.item() to hide). The figures they print go to docs/advice.md ("Measured effect of following the
advice"); run pytest with -s to see them.
"""

import time

import pytest

torch = pytest.importorskip("torch")
import gpuprof  # noqa: E402

STEPS = 8


def profiled(step_fn, steps=STEPS, gpu_work=True):
    """Profile `steps` calls of step_fn after 2 warm-up calls; returns the Report. gpu_work: whether
    step_fn runs anything on the GPU (the report must then list a device that did work)."""
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=steps, repeat=1)) as prof:
        for _ in range(steps + 2):
            step_fn()
            prof.step()
    torch.cuda.synchronize()
    report = prof.report()
    # GPU collection exists in every build now: where it did not run, the advice proofs below would
    # be about a host-only report, so that is a failure (with gpuprof's own reason), not a skip.
    note = report.to_dict()["metadata"].get("gpu_collection", "")
    assert note.startswith("on"), f"GPU collection did not run: {note}"
    if gpu_work:
        assert report.to_dict().get("devices"), "GPU collection ran but no device did any work"
    return report


def step_ms(step_fn, reps=20):
    for _ in range(3):
        step_fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step_fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000.0 / reps


def advice(report):
    return {a["rule"]: a for a in report.advice}


def test_cpu_model_with_cuda_available_fires_no_gpu_work():
    model = torch.nn.Linear(1024, 1024)
    x = torch.randn(256, 1024)
    report = profiled(lambda: model(x).sum().backward(), gpu_work=False)
    assert report.host["cuda_available"] is True
    assert "no_gpu_work" in advice(report)


def test_pageable_copies_fire_pin_memory_and_pinning_is_faster():
    host = torch.randn(64, 1024, 1024)  # 256 MiB, pageable
    w = torch.randn(1024, 1024, device="cuda")

    def pageable():
        (host.to("cuda") @ w).sum()

    a = advice(profiled(pageable)).get("pin_memory")
    assert a is not None and a["evidence"]["h2d_copies_per_step"] >= 1
    pinned_host = host.pin_memory()

    def pinned():
        (pinned_host.to("cuda", non_blocking=True) @ w).sum()

    before, after = step_ms(pageable), step_ms(pinned)
    print(f"pin_memory: {before:.2f} ms -> {after:.2f} ms per step (bound {a['saving_bound_pct']}%)")
    assert after < before * 0.95


def test_item_in_the_loop_fires_host_sync_and_removing_it_is_faster():
    # 64 MiB: each iteration's two kernels take about as long on the device as their launches on the
    # host, so waiting for them at every .item() costs time that launching ahead would hide.
    x = torch.randn(1 << 24, device="cuda")

    def with_item():
        total = 0.0
        for _ in range(50):
            total += (x * 1.0001).sum().item()

    a = advice(profiled(with_item)).get("host_sync")
    assert a is not None and a["evidence"]["syncs_per_step"] >= 50
    assert "item" in a["evidence"]["top_op"]

    def on_gpu():
        total = torch.zeros((), device="cuda")
        for _ in range(50):
            total += (x * 1.0001).sum()
        total.item()

    before, after = step_ms(with_item), step_ms(on_gpu)
    print(f"host_sync: {before:.2f} ms -> {after:.2f} ms per step (bound {a['saving_bound_pct']}%)")
    assert after < before * 0.9


def test_fp32_matmuls_fire_mixed_precision_and_autocast_is_faster():
    torch.backends.cuda.matmul.allow_tf32 = False
    a_ = torch.randn(8192, 8192, device="cuda")
    b_ = torch.randn(8192, 8192, device="cuda")

    def fp32():
        torch.mm(a_, b_)

    a = advice(profiled(fp32)).get("mixed_precision")
    assert a is not None and a["evidence"]["tensor_core_pct"] < a["evidence"]["tc_eligible_pct"] / 2

    def bf16():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            torch.mm(a_, b_)

    assert "mixed_precision" not in advice(profiled(bf16))
    before, after = step_ms(fp32), step_ms(bf16)
    print(f"mixed_precision: {before:.2f} ms -> {after:.2f} ms per step (bound {a['saving_bound_pct']}%)")
    assert after < before * 0.7


def test_tiny_batch_fires_a_batch_rule_and_a_larger_batch_is_faster_per_sample():
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch):
        def run():
            loss = model(torch.randn(batch, 256, device="cuda")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        return run

    fired = set(advice(profiled(step(2))))
    assert fired & {"launch_bound", "low_utilization", "batch_size", "memory_capacity"}, fired
    per_sample_small = step_ms(step(2)) / 2
    per_sample_large = step_ms(step(256)) / 256
    print(f"batch: {per_sample_small * 1000:.1f} us -> {per_sample_large * 1000:.1f} us per sample")
    assert per_sample_large < per_sample_small / 10
