"""Advice on real CPU training loops: each input-pipeline bottleneck fires `dataloader` with the
fix that fits it, and a loop without a bottleneck fires nothing.

The CPU count the advice sizes workers by is the process's affinity mask, so the tests that need
"workers == CPUs" or "workers > CPUs" set the mask themselves (os.sched_setaffinity: a real
restriction, inherited by the DataLoader's worker processes), and put it back afterwards. The model
trains on one intra-op thread: on this shared 2-CPU machine two threads make its ~2 ms step take
100 times longer whenever other processes hold the CPUs.
"""

import contextlib
import json
import math
import os
import subprocess
import sys

import pytest
from _loops import SleepyImages, make_cnn, train_step

torch = pytest.importorskip("torch")
import gpuprof  # noqa: E402
from gpuprof.collect.dataloader import cpus_available  # noqa: E402

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")


@contextlib.contextmanager
def cpus(n):
    """Run the block on the first `n` CPUs this process may use."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(before)[:n])
    try:
        yield len(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)


class HeavyTransforms(SleepyImages):
    """Per-sample CPU work (repeated blur and normalisation of a 64x64 image, ~3 ms): what a chain
    of torchvision augmentations costs. Unlike sleeping, it needs a CPU, so workers compete for them."""

    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        k = torch.ones(3, 1, 3, 3) / 9.0
        x = x.unsqueeze(0)
        for _ in range(12):
            x = torch.nn.functional.conv2d(x, k, padding=1, groups=3)
            x = (x - x.mean()) / (x.std() + 1e-6)
        return x.squeeze(0), y


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def profile_loop(dataset, *, num_workers, batch_size=8, steps=6, reps=1):
    model = make_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, num_workers=num_workers, persistent_workers=num_workers > 0
    )
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=steps)) as prof:
        for i, (x, y) in enumerate(loader):
            train_step(model, opt, x, y, reps=reps)
            prof.step()
            if i + 1 >= steps + 2:
                break
    return prof.report()


def rules_of(report):
    return [a["rule"] for a in report.advice]


def test_slow_dataset_without_workers_gets_num_workers_by_littles_law():
    # 8 samples x 4 ms of waiting per batch (~33 ms) against a ~2 ms training step: the loop waits
    # most of the step, loading in the training process. Sleeping needs almost no CPU, so the CPU
    # bound is far above what the law asks unless the steps are very short.
    report = profile_loop(SleepyImages(sleep_s=0.004), num_workers=0)
    ip = report.data["input_pipeline"]
    law = ip["law"]
    assert ip["wait_pct"] > 50
    assert rules_of(report) == ["dataloader"]  # nothing else is wrong with this loop
    a = report.advice[0]
    ev = a["evidence"]
    assert ev["num_workers"] == 0 and law["cpu_budget"] == cpus_available()
    # The bound is the whole wait: workers can at best hide all of it.
    assert a["saving_bound_pct"] == pytest.approx(ip["wait_pct"], abs=0.05)
    # The workers: N = ceil(T_batch / T_step), T_batch measured in the loop (num_workers=0), held
    # to what the CPUs run.
    assert law["workers_needed"] == math.ceil(law["t_batch_us"] / law["t_step_us"]) >= 3
    expected = min(law["workers_needed"], law["cpu_limit"])
    assert ev["recommended_num_workers"] == ip["recommended_num_workers"] == expected
    assert f"num_workers={expected}, persistent_workers=True" in a["fix"] and "Little's law" in a["fix"]
    assert "pin_memory" not in a["fix"]  # no CUDA here: pinning would not help
    assert a["docs"] == "docs/advice.md#dataloader"
    assert "Top recommendations" in report.to_text() and "num_workers=" in report.to_text()


def test_following_the_dataloader_advice_cuts_the_dataloader_share():
    # The same loop, run again with the settings the fix names: the DataLoader share must fall.
    before = profile_loop(SleepyImages(sleep_s=0.004), num_workers=0)
    workers = before.advice[0]["change"]["DataLoader"]["num_workers"]
    after = profile_loop(SleepyImages(sleep_s=0.004), num_workers=workers, steps=8)
    assert (
        after.average["dataloader_pct"] < before.average["dataloader_pct"] / 2
        or after.average["total_us"] < before.average["total_us"] / 1.5
    )


@needs_affinity
def test_workers_equal_to_cpus_with_heavy_transforms_points_at_per_sample_cost():
    # Two CPUs, two workers, ~3 ms of CPU work per sample x 8 samples: each worker needs a whole
    # CPU for ~25 ms per batch while the model step takes a few ms. The law wants several workers;
    # the CPUs run one beside the training: more workers cannot help, cheaper samples can.
    with cpus(2) as n:
        report = profile_loop(HeavyTransforms(), num_workers=n, steps=6)
    ip = report.data["input_pipeline"]
    law = ip["law"]
    a = {x["rule"]: x for x in report.advice}["dataloader"]
    assert ip["wait_pct"] > 20 and law["worker_cpu_share"] > 0.6
    assert law["workers_needed"] > law["cpu_limit"] and ip["recommended_num_workers"] == law["cpu_limit"]
    assert ip["bound"] == "cpu"
    assert "the rest of the wait needs cheaper batches" in a["fix"] and "more CPUs per task" in a["fix"]
    assert "pre-processed once into packed, decoded arrays" in a["fix"]  # the work is in __getitem__
    assert a["confidence"] == "medium"


@needs_affinity
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # torch warns about the same thing
def test_more_workers_than_cpus_is_called_oversubscription():
    # One CPU, three workers doing CPU-heavy transforms: they and the training process take turns
    # on one core, the loop waits for data, and the fix brings the workers down to what fits.
    with cpus(1):
        report = profile_loop(HeavyTransforms(), num_workers=3, steps=4)
    ip = report.data["input_pipeline"]
    a = {x["rule"]: x for x in report.advice}["dataloader"]
    assert a["evidence"]["num_workers"] == 3 and ip["law"]["cpu_budget"] == 1
    assert ip["law"]["cpu_limit"] == 1 and ip["bound"] == "cpu"
    assert a["title"].startswith("More DataLoader workers than the CPUs can run")
    assert "num_workers=1" in a["fix"] and "num_workers=3 oversubscribes them" in a["fix"]


class InMemory(torch.utils.data.Dataset):
    def __init__(self, n=256):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 32, 32, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i % 10


def test_a_loop_without_a_bottleneck_gets_no_advice():
    # Samples already in memory (collating 16 costs ~0.1 ms, up to ~1 ms while other builds hold the
    # CPUs) against a model step repeated 12 times (~25 ms on one thread): the DataLoader is well
    # under 5%, no GPU exists, so no rule has anything to say.
    report = profile_loop(InMemory(), num_workers=0, batch_size=16, reps=12)
    assert report.average["dataloader_pct"] < 5
    assert report.advice == []
    assert report.to_dict()["advice"] == []
    assert report.host["cuda_available"] is torch.cuda.is_available()


def test_advice_and_rendering_never_import_torch(tmp_path):
    # The advice runs on `gpuprof analyze` and `gpuprof report` paths, which must not load torch.
    report = profile_loop(SleepyImages(sleep_s=0.002), num_workers=0, steps=3)
    path = tmp_path / "report.json"
    d = report.to_dict()
    d.pop("advice")
    path.write_text(json.dumps(d))
    code = (
        "import sys, json\n"
        "from gpuprof.report.model import Report\n"
        f"r = Report.load({str(path)!r})\n"
        "rules = [a['rule'] for a in r.advise()]\n"
        "r.to_text(); r.to_markdown()\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(rules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "dataloader" in out.stdout


@contextlib.contextmanager
def spinning(n):
    """`n` processes that keep a CPU busy each (plain Python loops), on the CPUs this process may use."""
    code = "while True:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_affinity
@pytest.mark.skipif(
    not os.access("/proc/stat", os.R_OK), reason="the other processes' CPUs come from /proc/stat"
)
def test_busy_cpus_beside_the_loop_take_back_the_workers_saving():
    # Two CPUs, two processes spinning on them, and a loop that loads CPU-heavy batches itself
    # (num_workers=0): the loop waits for data, but a worker would need a whole CPU that the
    # spinners hold. The advice keeps num_workers=0 and says why: no change of setting, low
    # confidence, and how to check (the wait stays its upper bound).
    with cpus(2) as n, spinning(n):
        report = profile_loop(HeavyTransforms(), num_workers=0, steps=4)
    ip = report.data["input_pipeline"]
    law = ip["law"]
    assert ip["wait_pct"] > 20 and law["worker_cpu_share"] >= 0.5
    # /proc/stat saw the spinners: nearly two CPUs busy beyond this process, taken out of the bound.
    assert law["other_cpus"] is not None and law["other_cpus"] >= 1.0
    assert law["other_cpus_subtracted"] == law["other_cpus"] and law["cpu_limit"] == 0
    a = {x["rule"]: x for x in report.advice}["dataloader"]
    assert a["title"] == "Other processes hold the CPUs that DataLoader workers would need"
    assert "change" not in a and a["confidence"] == "low"
    assert a["saving_bound_pct"] == pytest.approx(ip["wait_pct"], abs=0.05)
    assert a["fix"].startswith("keep num_workers=0") and "gpuprof diff" in a["fix"]
