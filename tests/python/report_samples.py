"""Reports for the renderer and CLI tests: one from a real torch loop on the CPU, and GPU sections
added by hand with values chosen here (the GPU collection and analysis are tested elsewhere; here
the question is only whether every section shows what the report holds)."""

from __future__ import annotations

import copy
import functools
import time

# Injected into kernel and operator names: a page that runs it gains a data-pwned attribute.
SCRIPT_PAYLOAD = "<script>document.documentElement.setAttribute('data-pwned','1')</script>"
IMG_PAYLOAD = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">"


@functools.cache
def _cpu_report_dict(num_workers: int = 0, steps: int = 6) -> dict:
    import torch

    import gpuprof

    class SlowDataset(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            time.sleep(0.001)  # 8 samples per batch: ~8 ms of DataLoader per step
            return torch.randn(16), i % 4

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=8, num_workers=num_workers)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if i >= steps + 1:
                break
    return prof.report().to_dict()


def cpu_report_dict() -> dict:
    """A real report of a CPU loop whose Dataset sleeps 1 ms per sample (a deep copy)."""
    return copy.deepcopy(_cpu_report_dict())


def cpu_report():
    import gpuprof

    return gpuprof.Report.from_dict(cpu_report_dict())


def with_gpu_sections(data: dict, *, hostile_names: bool = False) -> dict:
    """``data`` plus every GPU section, with these chosen values:

    - one GPU, "NVIDIA H100 80GB HBM3": utilization 71.5%, SM efficiency 60.2%, occupancy 45.0%,
      tensor cores 12.0% of kernel time, eligible 80.0%, 80 GiB, peak 30 GiB;
    - 7 kernels whose total_us are 700, 600, ..., 100 (k0 heaviest), so the terminal's top 5 is
      k0..k4 and k5, k6 are left out;
    - 2 operators (aten::addmm 2000 us, aten::relu 300 us), 1 copy, 1 sync;
    - 20 NVML samples 0.1 s apart (utilization 50..69%, memory used 10..29 GiB);
    - 50 memory samples 1 ms apart (allocated cycling 0..1.5 GiB, reserved 2 GiB);
    - advice: `mixed_precision` (bound 20%) listed before `dataloader` (bound 73%), so a renderer
      that ranks by the bound must show `dataloader` first.
    """
    d = copy.deepcopy(data)
    k0 = (SCRIPT_PAYLOAD + "ampere_sgemm_128x64_nn") if hostile_names else "ampere_sgemm_128x64_nn"
    op0 = ("aten::addmm" + IMG_PAYLOAD) if hostile_names else "aten::addmm"
    d["devices"] = [
        {
            "id": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization_pct": 71.5,
            "sm_efficiency_pct": 60.2,
            "achieved_occupancy_pct": 45.0,
            "tensor_core_pct": 12.0,
            "tc_eligible_pct": 80.0,
            "memory_total_bytes": 80 * 2**30,
            "peak_allocated_bytes": 30 * 2**30,
        }
    ]
    names = [k0] + [f"kernel_{i}" for i in range(1, 7)]
    # Listed lightest first, so that a renderer must sort to get k0 on top.
    d["kernels"] = [
        {
            "name": names[i],
            "calls": 10 * (i + 1),
            "total_us": float(700 - 100 * i),
            "mean_us": (700 - 100 * i) / (10 * (i + 1)),
        }
        for i in reversed(range(7))
    ]
    d["operators"] = [
        {"name": "aten::relu", "calls": 40, "total_us": 300.0, "self_us": 300.0},
        {"name": op0, "calls": 40, "total_us": 2000.0, "self_us": 500.0},
    ]
    d["copies"] = [
        {
            "name": "Memcpy HtoD (Pageable -> Device)",
            "calls": 12,
            "total_us": 420.0,
            "total_bytes": 12 * 2**20,
        }
    ]
    d["syncs"] = [{"name": "cudaStreamSynchronize", "op": "aten::item", "calls": 6, "total_us": 90.0}]
    d["gpu_samples"] = [
        {
            "device": 0,
            "time_us": i * 100_000,
            "utilization_pct": 50.0 + i,
            "memory_used_bytes": (10 + i) * 2**30,
        }
        for i in range(20)
    ]
    d["memory"] = [
        {"device": 0, "time_us": i * 1000, "allocated_bytes": (i % 7) * 2**28, "reserved_bytes": 2**31}
        for i in range(50)
    ]
    d["advice"] = [
        {
            "rule": "mixed_precision",
            "title": "Use mixed precision",
            "evidence": ["FP32 GEMMs: 80% of kernel time"],
            "saving_bound_pct": 20.0,
            "confidence": "medium",
            "fix": "torch.autocast('cuda', dtype=torch.bfloat16)",
            "docs": "docs/advice.md#mixed_precision",
        },
        {
            "rule": "dataloader",
            "title": "The input pipeline starves the GPU",
            "evidence": "DataLoader is 73% of the step with num_workers=0",
            "saving_bound_pct": 73.0,
            "confidence": "high",
            "fix": "DataLoader(..., num_workers=8, persistent_workers=True)",
            "docs": "docs/advice.md#dataloader",
        },
    ]
    return d


def gpu_report(*, hostile_names: bool = False):
    import gpuprof

    return gpuprof.Report.from_dict(with_gpu_sections(cpu_report_dict(), hostile_names=hostile_names))
