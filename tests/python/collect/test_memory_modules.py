"""The memory view by module (docs/metrics.md, "Memory"): with the module view on
(``with_modules=True``) the memory live at a peak or a failure is named by the module paths of the
model (``layer1.0.conv1``), a backward's allocations by the module whose forward made them; without
it, every output says how to turn it on. A real training loop of a small ResNet on the CPU, whose
out-of-memory error the test raises as torch would, inside the forward (tests/gpu runs a real one).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _loops import make_tiny_resnet  # noqa: E402
from test_memory_oom import CUDA_MESSAGE  # noqa: E402

import gpuprof  # noqa: E402

BATCH = 16
KiB = 1024
# One float activation of the first stage: 16 samples x 8 channels x 32 x 32 (the second stage's
# convolution output: 16 x 16 channels x 16 x 16, half of it).
STAGE1 = BATCH * 8 * 32 * 32 * 4


def _run(tmp_path, with_modules: bool):
    """Three steps of the tiny ResNet, then a fourth whose forward runs out of memory right after
    layer2.0.conv1 made its output: the report of the span, and the error that reached the caller."""
    torch.manual_seed(0)
    model = make_tiny_resnet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    error = torch.OutOfMemoryError(CUDA_MESSAGE)
    failing = []

    def out_of_memory(module, args, out):
        if failing:
            raise error  # where the next allocation would have failed

    model.layer2[0].conv1.register_forward_hook(out_of_memory)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    with pytest.raises(torch.OutOfMemoryError) as raised:
        with gpuprof.profile(
            profile_memory=True,
            with_modules=with_modules,
            batch_size=BATCH,
            on_trace_ready=gpuprof.save(tmp_path),
        ) as prof:
            for i in range(4):
                if i == 3:
                    failing.append(True)
                step()
                prof.step()
    assert raised.value is error
    return prof.report()


def test_the_memory_live_at_a_failure_is_named_by_module_path(tmp_path):
    report = _run(tmp_path, with_modules=True)
    oom = report.data["out_of_memory"]
    # At the failure the step's forward has run up to layer2.0.conv1. Live: what the backward will
    # need: each convolution's output (kept by its BatchNorm; 512 KiB in the first stage), each ReLU
    # module's output (kept by its backward and the next layer; a BasicBlock's ReLU module runs twice:
    # two blocks) and layer2.0.conv1's output (256 KiB); BatchNorm's saved mean and inverse std (8
    # floats each). The BatchNorm outputs and the residual sums were freed: nothing keeps them.
    assert oom["top_modules"] == [
        {"name": "layer1.0.relu", "bytes": 2 * STAGE1, "count": 2},
        {"name": "layer1.1.relu", "bytes": 2 * STAGE1, "count": 2},
        {"name": "conv1", "bytes": STAGE1, "count": 1},
        {"name": "layer1.0.conv1", "bytes": STAGE1, "count": 1},
        {"name": "layer1.0.conv2", "bytes": STAGE1, "count": 1},
        {"name": "layer1.1.conv1", "bytes": STAGE1, "count": 1},
        {"name": "layer1.1.conv2", "bytes": STAGE1, "count": 1},
        {"name": "relu", "bytes": STAGE1, "count": 1},
        {"name": "layer2.0.conv1", "bytes": STAGE1 // 2, "count": 1},
        {"name": "bn1", "bytes": 2 * 8 * 4, "count": 2},
    ]
    # Every module named at the peaks is a row of the module view, by its path.
    paths = {r["path"] for r in report.data["modules"]}
    for peak in report.data["memory_peak"].values():
        assert peak["top_modules"] and {m["name"] for m in peak["top_modules"]} <= paths
    # The activation-checkpointing fix names the modules that made the most, by path.
    (rec,) = [a for a in report.data["advice"] if a["rule"] == "out_of_memory"]
    assert (
        "on the largest blocks, those around the modules that made most of it (layer1.0.relu 1.0 MiB, "
        "layer1.1.relu 1.0 MiB, conv1 512.0 KiB), keeps only their inputs"
    ) in rec["fix"]
    # Every output shows them.
    by_module = "live allocations by module: layer1.0.relu 1.0 MiB, layer1.1.relu 1.0 MiB, conv1 512.0 KiB"
    assert by_module in report.to_text()
    assert by_module in report.to_markdown()
    html = report.to_html()
    assert by_module in html and "layer2.0.conv1" in html
    saved = gpuprof.Report.load(tmp_path / "span_000" / "report.json")
    assert saved.data["out_of_memory"]["top_modules"] == oom["top_modules"]


def test_without_the_module_view_the_report_says_how_to_name_modules(tmp_path):
    report = _run(tmp_path, with_modules=False)
    oom = report.data["out_of_memory"]
    assert oom["top_modules"] == [] and oom["top_ops"]
    assert all(p["top_modules"] == [] for p in report.data["memory_peak"].values())
    hint = "by module: the module view is off; gpuprof.profile(with_modules=True) (gpuprof run --modules)"
    assert hint in report.to_text() and hint in report.to_html()
    assert hint.replace("_", "\\_") in report.to_markdown()  # Markdown escapes the underscores
    (rec,) = [a for a in report.data["advice"] if a["rule"] == "out_of_memory"]
    off = "on the largest blocks (gpuprof.profile(with_modules=True) names the modules that made it)"
    assert off in rec["fix"]
