"""`small_batch`: a CPU loop whose batch is too small to pay for each operator call's fixed cost.

The rule fires on the matrix operators' work per call (FLOPs counted from the shapes: the same on a
quiet or a loaded machine) and sizes its claim by the time outside them. Why not on time alone: on
this shared 2-CPU machine the share of an MLP's step outside the operators' own time read 0.44-0.77
at batch 2 and 0.18-0.38 at batch 32, and 0.15 at batch 2 in one run under a load of 5, so no
threshold on it separated them; the FLOPs per matrix call are 0.30 M at batch 2 and 38.8 M at 256
in every run.
"""

import json
import subprocess
import sys

import pytest

from gpuprof.advice import advise
from gpuprof.advice.rules import SMALL_BATCH_MATRIX_FLOPS, SMALL_BATCH_MIN_PCT


def cpu_report(
    *,
    total_us=1000.0,
    dataloader_us=100.0,
    matrix=(("aten::addmm", 3, 150.0), ("aten::mm", 5, 250.0)),
    flops_per_call=300_000,
    other_self_us=100.0,
    batch_size=2,
    steps=1,
):
    """A CPU-only report of `steps` steps of `total_us`, with the given matrix operators (name, calls
    per step, own time per step) at `flops_per_call` each, and one elementwise operator."""
    ops = [
        {
            "name": n,
            "calls": c * steps,
            "host_self_us": us * steps,
            "host_total_us": us * steps,
            "flops": c * steps * flops_per_call,
        }
        for n, c, us in matrix
    ]
    ops.append(
        {
            "name": "aten::add_",
            "calls": 6 * steps,
            "host_self_us": other_self_us * steps,
            "host_total_us": other_self_us * steps,
            "flops": 0,
        }
    )
    step = {"total_us": total_us, "dataloader_us": dataloader_us, "cpu_exec_us": total_us - dataloader_us}
    return {
        "schema_version": 4,
        "steps": [dict(step, step=i) for i in range(steps)],
        "average": {**step, "dataloader_pct": 100.0 * dataloader_us / total_us},
        "dataloaders": [{"batch_size": batch_size, "num_workers": 0}] if batch_size else [],
        "host": {"cuda_available": False, "cpus_available": 2},
        "counts": {"events": 100},
        "operators": ops,
    }


def small(data):
    return [a for a in advise(data) if a["rule"] == "small_batch"]


def test_small_matrix_calls_with_most_of_the_step_outside_them_fire():
    # 8 matrix calls of 0.3 MFLOP (under the 2 MFLOP a call must do to outweigh its fixed cost),
    # 400 us of their own time in a 1000 us step of which 100 us wait for the DataLoader: 900 - 400
    # = 500 us, 50% of the step, is outside the matrix work. The batch is raised until a call does
    # at least 4 x 2 MFLOP: 0.3 M x 32 = 9.6 M, so batch 2 -> 64.
    (a,) = small(cpu_report(steps=3))
    ev = a["evidence"]
    assert ev["matrix_flops_per_call"] == 300_000 and ev["matrix_calls_per_step"] == 8
    assert ev["matrix_self_pct"] == 40.0 and ev["outside_matrix_pct"] == 50.0
    assert a["saving_bound_pct"] == 50.0 and ev["operator_calls_per_step"] == 14
    assert ev["batch_size"] == 2 and ev["samples_per_s"] == 2000.0 and ev["batch_factor"] == 32
    assert a["change"] == {"DataLoader": {"batch_size": 64}}
    assert a["fix"].startswith("DataLoader(..., batch_size=64) (now 2)")
    assert "gpuprof diff" in a["fix"] and "learning rate" in a["fix"]
    assert a["confidence"] == "medium" and "gpuprof diff" in a["confidence_reason"]
    assert a["docs"] == "docs/advice.md#small_batch"
    # Without a recorded batch size (an imported trace) it says how much larger, and changes nothing.
    (a,) = small(cpu_report(batch_size=None))
    assert a["fix"].startswith("a 32x larger batch") and "change" not in a


def test_it_stays_quiet_for_large_matrix_calls_a_busy_step_inside_them_or_a_gpu():
    assert SMALL_BATCH_MATRIX_FLOPS == 2e6 and SMALL_BATCH_MIN_PCT == 30.0
    # Matrix calls of 2 MFLOP each: big enough, whatever the time around them.
    assert small(cpu_report(flops_per_call=2_000_000)) == []
    # Small calls, but the matrix operators fill the step: 900 - 650 = 250 us outside, 25% < 30%.
    assert small(cpu_report(matrix=(("aten::addmm", 3, 250.0), ("aten::mm", 5, 400.0)))) == []
    # No FLOPs counted (a trace without shapes): nothing to size the calls by.
    assert small(cpu_report(flops_per_call=0)) == []
    # A GPU run: launch_bound and batch_size speak for the device.
    data = cpu_report()
    data["host"]["cuda_available"] = True
    assert small(data) == []


# ---- a real MLP on the CPU ------------------------------------------------------------------------
LAYERS = ((784, 256), (256, 256), (256, 10))


@pytest.fixture
def one_thread():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_mlp(batch_size, steps=8):
    import torch

    import gpuprof

    torch.manual_seed(0)
    n = batch_size * (steps + 4)
    data = torch.utils.data.TensorDataset(torch.randn(n, 784), torch.randint(0, 10, (n,)))
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, num_workers=0)
    model = torch.nn.Sequential(
        torch.nn.Linear(*LAYERS[0]),
        torch.nn.ReLU(),
        torch.nn.Linear(*LAYERS[1]),
        torch.nn.ReLU(),
        torch.nn.Linear(*LAYERS[2]),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=2, active=steps)) as prof:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if i + 1 >= steps + 3:
                break
    return prof.report()


def matrix_flops_per_call(batch):
    """Forward: one product per layer, 2 x batch x in x out. Backward: each layer's weight gradient
    (the same count) and the input gradient of every layer but the first: 8 calls a step."""
    forward = [2 * batch * i * o for i, o in LAYERS]
    backward = forward + forward[1:]
    return (sum(forward) + sum(backward)) / (len(forward) + len(backward))


def per_sample_us(report, batch):
    """The fastest recorded step per sample: the step least disturbed by other processes."""
    return min(s["total_us"] for s in report.data["steps"]) / batch


def test_batch_2_is_named_batch_256_is_not_and_the_advised_batch_trains_faster_per_sample(
    tmp_path, one_thread
):
    tiny = train_mlp(2)
    (a,) = [x for x in tiny.advice if x["rule"] == "small_batch"]
    assert a["evidence"]["matrix_flops_per_call"] == matrix_flops_per_call(2) == 302_848
    assert a["saving_bound_pct"] >= SMALL_BATCH_MIN_PCT
    advised = a["change"]["DataLoader"]["batch_size"]
    assert advised == 64  # 0.30 M x 32 >= 8 M
    big = train_mlp(256)
    assert "small_batch" not in [x["rule"] for x in big.advice]
    assert matrix_flops_per_call(256) > SMALL_BATCH_MATRIX_FLOPS
    # Following the advice: the rule no longer fires, and each sample takes less time. At batch 2
    # a sample took about 190 us of a quiet step, at 64 about 25 us: the margin asked is 2x.
    after = train_mlp(advised)
    assert "small_batch" not in [x["rule"] for x in after.advice]
    assert per_sample_us(after, advised) * 2 < per_sample_us(tiny, 2)
    # The check the fix names: `gpuprof diff` says the batch changed and compares per sample.
    tiny.to_json(tmp_path / "before.json")
    after.to_json(tmp_path / "after.json")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprof",
            "diff",
            str(tmp_path / "before.json"),
            str(tmp_path / "after.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "batch size changed: 2 -> 64 samples per step" in out.stdout and "per sample:" in out.stdout
    assert json.loads((tmp_path / "after.json").read_text())["dataloaders"][0]["batch_size"] == 64
