"""The first example of docs/quickstart.md and of README's Quickstart, run as written over a
32-batch epoch on the CPU: the printed report is the whole span the schedule asks for, not a
partial one. Their schedules (wait=1, warmup=1, active=N, repeat=1) record steps 2 to N+1 once;
with repeat=0 the cycle starts again and the epoch ends in a partial span (quickstart's: steps 30
and 31 of 32), which `report()` returns."""

import contextlib
import io
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[3]


def _first_python_block(text: str) -> str:
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "no ```python block"
    return m.group(1)


def _run(code: str, tmp_path, monkeypatch, opt_name: str):
    monkeypatch.chdir(tmp_path)  # the examples write runs/report.html, report.json ... here
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)  # 32 batches: one epoch
    model = torch.nn.Linear(16, 4)
    names = {
        "loader": loader,
        "model": model,
        "loss_fn": torch.nn.CrossEntropyLoss(),
        opt_name: torch.optim.SGD(model.parameters(), lr=0.1),
    }
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "example", "exec"), names)
    return names["report"], out.getvalue()


def _printed_steps(text: str) -> list:
    """The step numbers of the printed step table (rows from its header to `mean`)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("step  total us"))
    steps = []
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("mean"):
            return steps
        steps.append(int(line.split()[0]))
    raise AssertionError("the step table has no mean row")


@pytest.mark.parametrize(
    ("doc", "heading", "opt_name", "steps"),
    [
        ("docs/quickstart.md", "## Profile a training loop", "opt", [2, 3, 4, 5, 6]),
        ("README.md", "## Quickstart", "optimizer", [2, 3, 4]),
    ],
)
def test_the_first_example_prints_the_whole_span_it_asks_for(
    doc, heading, opt_name, steps, tmp_path, monkeypatch
):
    text = (REPO / doc).read_text(encoding="utf-8")
    code = _first_python_block(text[text.index(heading) :])
    report, printed = _run(code, tmp_path, monkeypatch, opt_name)
    source = report.to_dict()["source"]
    assert (source["first_step"], source["last_step"], source["partial_span"]) == (steps[0], steps[-1], False)
    assert _printed_steps(printed) == steps
