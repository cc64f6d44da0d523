"""Device memory in a live session on a real GPU, checked against torch.cuda's own statistics."""

import pytest

import gpuprof

pytestmark = pytest.mark.gpu

MiB = 1 << 20


def _steps(torch, sizes_mib):
    """One step per size: allocate a tensor of that size, free it, and return torch's own peak of
    each step (reset before it)."""
    peaks = []
    for mib in sizes_mib:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        del t
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        yield peaks[-1]


def test_profile_memory_peaks_match_torch_max_memory_allocated(cuda):
    import torch

    # Steps of 64, 256 and 16 MiB: with every allocation recorded, each step's peak is exactly what
    # torch.cuda.max_memory_allocated says for that step.
    torch_peaks = []
    with gpuprof.profile(profile_memory=True) as prof:
        for peak in _steps(torch, [64, 256, 16]):
            torch_peaks.append(peak)
            prof.step()
    rows = [r for r in prof.report().to_dict()["memory"] if r["device"] == torch.cuda.current_device()]
    assert [r["peak_allocated_bytes"] for r in rows] == torch_peaks
    assert all(r["peak_reserved_bytes"] >= r["peak_allocated_bytes"] for r in rows)
    assert all(r["capacity_bytes"] == torch.cuda.get_device_properties(0).total_memory for r in rows)


def test_step_boundary_sampling_gets_the_peaks_of_steps_that_raise_the_high_water_mark(cuda):
    import torch

    # Default mode: allocator statistics at step boundaries. 32, then 128 MiB (a new high-water
    # mark: exact), then 8 MiB (no new mark: the step's row is a lower bound, at most its true
    # peak). reset_peak_memory_stats() runs before gpuprof starts only.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with gpuprof.profile() as prof:
        for mib in (32, 128, 8):
            t = torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")
            t.fill_(1)
            del t
            torch.cuda.synchronize()
            prof.step()
    rows = [r for r in prof.report().to_dict()["memory"] if r["device"] == torch.cuda.current_device()]
    assert len(rows) == 3
    assert rows[0]["peak_allocated_bytes"] >= base + 32 * MiB
    assert rows[1]["peak_allocated_bytes"] == torch.cuda.max_memory_allocated()
    assert base <= rows[2]["peak_allocated_bytes"] <= base + 8 * MiB


def test_host_rss_is_sampled_on_a_gpu_run(cuda):
    import torch

    with gpuprof.profile() as prof:
        for _ in range(2):
            torch.ones(1024, device="cuda").sum().item()
            prof.step()
    host = [r for r in prof.report().to_dict()["memory"] if r["device"] == -1]
    assert len(host) == 2 and all(r["peak_rss_bytes"] > 100 * MiB for r in host)


def _mlp(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    return model, torch.optim.Adam(model.parameters())


def _train_step(torch, model, opt, batch):
    x = torch.randn(batch, 1024, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()


def _block_bytes(tensors):
    # The caching allocator hands out blocks in multiples of 512 bytes. Only device tensors: Adam
    # keeps each parameter's `step` count in a CPU tensor (unless capturable or fused).
    return sum(-(-t.untyped_storage().nbytes() // 512) * 512 for t in tensors if t.is_cuda)


def test_the_composition_at_a_gpu_peak_is_the_models_bytes(cuda):
    import torch

    # Parameters, gradients (kept: zero_grad(set_to_none=False)) and Adam's state on GPU 0, all
    # allocated before the recording; the activations grow with the batch.
    model, opt = _mlp(torch)
    _train_step(torch, model, opt, 512)
    with gpuprof.profile(profile_memory=True, batch_size=512) as prof:
        for _ in range(3):
            _train_step(torch, model, opt, 512)
            prof.step()
    data = prof.report().to_dict()
    device = str(torch.cuda.current_device())
    c = data["memory_composition"][device]
    assert c["parameters"] == _block_bytes(model.parameters()) == c["gradients"]
    assert c["optimizer_state"] == _block_bytes(t for s in opt.state.values() for t in s.values())
    assert c["activations"] >= 512 * 4096 * 4  # the hidden layer's output the backward needs
    peak = data["memory_peak"][device]
    assert max(a for _t, a, _r in data["memory_curve"][device]) == peak["bytes"]
    assert any(r["device"] == int(device) for r in data["memory_ops"])


def test_a_real_out_of_memory_error_produces_the_report(cuda, tmp_path):
    import torch

    # A request for more than the whole device inside a profiled loop: torch's CUDA caching
    # allocator raises OutOfMemoryError; the span's report says what the device held and the batch
    # that fits, and the error reaches the caller as torch raised it.
    model, opt = _mlp(torch)
    _train_step(torch, model, opt, 256)
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    with pytest.raises(torch.OutOfMemoryError) as raised:
        with gpuprof.profile(
            profile_memory=True, batch_size=256, on_trace_ready=gpuprof.save(tmp_path)
        ) as prof:
            for _ in range(3):
                _train_step(torch, model, opt, 256)
                prof.step()
            torch.empty(total + MiB, dtype=torch.uint8, device="cuda")
    assert "Tried to allocate" in str(raised.value)
    oom = prof.report().data["out_of_memory"]
    assert oom["device"] == torch.cuda.current_device() and not oom["notes"]
    assert abs(oom["requested_bytes"] - (total + MiB)) <= 0.01 * total  # the message rounds to 0.01 GiB
    assert abs(oom["capacity_bytes"] - total) <= 0.01 * total
    c = oom["composition"]
    assert c["parameters"] == _block_bytes(model.parameters())
    assert oom["largest_batch_that_fits"] > 256  # a small model on a whole GPU
    assert (tmp_path / "span_000" / "report.json").exists()
