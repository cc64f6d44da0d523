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
