"""The critical path of a live span (docs/metrics.md, "Critical path"): a real CPU training loop
whose DataLoader sleeps in every sample goes through the same analysis as a trace file."""

import pytest
import torch
from _loops import SleepyImages, make_cnn, train_step
from torch.utils.data import DataLoader

import gpuprof


@pytest.fixture(scope="module")
def report():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # 4 samples x 15 ms of sleeping per batch, loaded in the loop's own thread (no workers).
    loader = DataLoader(SleepyImages(n=4 * 7, sleep_s=0.015), batch_size=4, num_workers=0)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=4)) as prof:
        for x, y in loader:
            train_step(model, opt, x, y)
            prof.step()
    return prof.report().to_dict()


def test_each_step_chain_is_the_step_with_causes_adding_to_100(report):
    paths = report["critical_path"]["steps"]
    assert [p["step"] for p in paths] == [s["step"] for s in report["steps"]] and len(paths) == 4
    for p, s in zip(paths, report["steps"]):
        assert p["length_us"] == pytest.approx(s["total_us"], abs=1e-3)
        assert sum(p["by_cause_pct"].values()) == pytest.approx(100.0, abs=1e-6)
        # No GPU: nothing on the device, no launches.
        for cause in ("gpu_compute_bound", "gpu_kernel_launch_overhead", "gpu_kernel_kernel_overhead"):
            assert p["by_cause_pct"][cause] == 0.0


def test_the_dataloader_wait_is_on_the_chain(report):
    # The 60 ms of sleeping per batch happen inside the DataLoader's __next__ on the loop's thread,
    # which the chain walks through: at least those 60 ms are data_loading, the largest cause, and
    # the DataLoader's range is the name with most time on the chain.
    for p in report["critical_path"]["steps"]:
        pct = p["by_cause_pct"]
        assert pct["data_loading"] * p["length_us"] / 100 >= 0.95 * 60_000, p
        assert pct["data_loading"] == max(pct.values()), p
        assert p["top"][0]["name"].startswith("enumerate(DataLoader)#"), p
