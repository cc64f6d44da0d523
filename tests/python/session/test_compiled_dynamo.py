"""torch.compile's recompilations and graph breaks, named live from Dynamo's own records: a loop
whose batch length changes every step, and a print in forward (the eager backend: Dynamo alone
decides recompiles and breaks, and it compiles in well under a second on a loaded CPU)."""

import inspect

import pytest

import gpuprof

torch = pytest.importorskip("torch")

BATCHES = (2, 3, 4, 5, 6)


class Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        print("", end="")  # the graph break
        return y.relu().sum()


PRINT_LINE = inspect.getsourcelines(Printing.forward)[1] + 2


def _run(model, batches, warm=0):
    for b in batches[:warm]:
        model(torch.randn(b, 8)).sum().backward()
    with gpuprof.profile() as prof:
        for b in batches[warm:]:
            model(torch.randn(b, 8)).sum().backward()
            prof.step()
    return prof.report()


@pytest.fixture(scope="module")
def static_shapes():
    """dynamic=False: every new batch length is a recompile of forward (Dynamo's cache holds 8)."""
    torch._dynamo.reset()
    model = torch.compile(
        torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend="eager", dynamic=False
    )
    return _run(model, BATCHES, warm=1)


@pytest.fixture(scope="module")
def printing():
    torch._dynamo.reset()
    return _run(torch.compile(Printing(), backend="eager"), (4, 4, 4, 4))


def test_a_changing_batch_length_is_counted_and_names_the_dimension(static_shapes):
    compiled = static_shapes.data["compiled"]
    # The batch of 2 compiled before the span; 3, 4, 5, 6 each failed the size guard inside it.
    (row,) = compiled["recompilations"]
    assert row["count"] == 4
    assert row["dimension"] == "args[0].size(0)"  # Dynamo's name for the Sequential's input
    assert row["values"] == [3, 4, 5, 6]
    assert "size mismatch at index 0" in row["guard"]
    assert row["compile_us"] > 0
    assert compiled["graphs"] == 4  # one graph per batch length the span ran
    assert compiled["graph_breaks"] == []
    advice = {a["rule"]: a for a in static_shapes.data["advice"]}
    rec = advice["recompilations"]
    assert rec["evidence"]["recompilations"] == 4
    assert "torch._dynamo.mark_dynamic(x, 0)" in rec["fix"] and "calls args[0]" in rec["fix"]
    assert "dynamic=True" in rec["fix"]
    assert row["dimension"] in rec["evidence"]["summary"]
    assert "graph_break" not in advice


def test_recompilations_before_the_span_are_not_the_spans():
    """Compiled during warmup (before the span): the span's own steps reuse the graphs."""
    torch._dynamo.reset()
    model = torch.compile(torch.nn.Linear(8, 8), backend="eager", dynamic=False)
    for b in (2, 3, 2, 3):
        model(torch.randn(b, 8)).sum().backward()
    with gpuprof.profile() as prof:
        for b in (2, 3, 2):
            model(torch.randn(b, 8)).sum().backward()
            prof.step()
    compiled = prof.report().data["compiled"]
    assert compiled["recompilations"] == []
    assert compiled["graphs"] == 2
    assert "recompilations" not in {a["rule"] for a in prof.report().data["advice"]}


def test_a_print_in_forward_is_named_with_its_file_and_line(printing):
    compiled = printing.data["compiled"]
    (brk,) = compiled["graph_breaks"]
    assert brk["source"] == f"{__file__}:{PRINT_LINE}"
    assert brk["function"] == "forward"
    assert "print" in brk["explanation"]
    assert brk["count"] == 4  # the code after the print ran once per step
    assert brk["compiles"] == 1
    assert compiled["graphs"] == 2  # before the print and after it
    assert compiled["recompilations"] == []
    advice = {a["rule"]: a for a in printing.data["advice"]}
    assert f"{__file__}:{PRINT_LINE}" in advice["graph_break"]["title"]
    assert advice["graph_break"]["evidence"]["runs_per_step"] == 1
    assert f":{PRINT_LINE}" in compiled["note"]
    text = " ".join(str(printing).split())  # the terminal report, its wrapped lines joined
    assert f"graph break at {__file__}:{PRINT_LINE}: Failed to trace builtin operator" in text
