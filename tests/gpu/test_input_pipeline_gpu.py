"""The input pipeline on a real GPU: the pin-memory thread's time per batch, the batch's copy to the
device (host time, the copies' device time and how much of it a kernel ran beside), and pinning
named as the bound when it is slower than the step. Needs a CUDA GPU and gpuprof's GPU collection;
skipped elsewhere.

Passed on an NVIDIA H200 on 2026-11-29 (docs/gpu.md), after the copy's walk learned to step over
the DataLoader's cudaEventRecordWithFlags and CUPTI's buffer requests.
"""

import time

import pytest

torch = pytest.importorskip("torch")
import gpuprof  # noqa: E402


class Big(torch.utils.data.Dataset):
    """Samples of `mib` MiB each (pinning copies every byte), made instantly."""

    def __init__(self, mib: float) -> None:
        self.numel = int(mib * (1 << 20)) // 4

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return torch.full((self.numel,), float(i))


def profiled(loader, step, steps=8):
    with gpuprof.profile(schedule=gpuprof.schedule(wait=2, warmup=1, active=steps)) as prof:
        for i, x in enumerate(loader):
            step(x)
            prof.step()
            if i + 1 >= steps + 3:
                break
    torch.cuda.synchronize()
    report = prof.report()
    assert report.to_dict()["metadata"].get("gpu_collection", "").startswith("on")
    return report


def test_pinning_and_the_copy_are_measured():
    w = torch.randn(2048, 2048, device="cuda")
    loader = torch.utils.data.DataLoader(Big(4), batch_size=4, num_workers=2, pin_memory=True)

    def step(x):
        x = x.to("cuda", non_blocking=True)
        for _ in range(20):
            (w @ w).sum()
        return x.sum()

    ip = profiled(loader, step).data["input_pipeline"]
    assert ip["pin_us"]["count"] >= 2 and ip["pin_us"]["mean"] > 0
    assert ip["transfer_us"]["count"] >= 2
    assert ip["transfer_device_us"] is not None and ip["transfer_device_us"]["mean"] > 0
    assert 0.0 <= ip["transfer_overlap_pct"] <= 100.0


def test_pinning_slower_than_the_step_is_the_bound():
    # 64 MiB batches pinned by one thread (tens of ms) against a step of a few small kernels.
    loader = torch.utils.data.DataLoader(Big(16), batch_size=4, num_workers=4, pin_memory=True)

    def step(x):
        torch.ones(16, device="cuda").sum()
        time.sleep(0.001)

    report = profiled(loader, step)
    ip = report.data["input_pipeline"]
    assert ip["pin_us"]["mean"] > ip["law"]["t_step_us"]
    assert ip["bound"] == "pin"
    a = {x["rule"]: x for x in report.advice}["dataloader"]
    assert a["title"] == "Pinning each batch takes longer than a step"
