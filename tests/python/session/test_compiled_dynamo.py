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
    markdown = printing.to_markdown()
    assert f"> **torch.compile:** graph break at {__file__}:{PRINT_LINE}:" in markdown.replace("\\_", "_")


class Reading(torch.nn.Module):
    """A scalar read in forward: .item() breaks the graph (Dynamo does not capture scalar outputs)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        scale = y.abs().max().item()  # the graph break
        return (y / scale).sum()


ITEM_LINE = inspect.getsourcelines(Reading.forward)[1] + 2


def test_an_item_in_forward_is_named_with_its_line_and_the_report_validates(printing, static_shapes):
    torch._dynamo.reset()
    report = _run(torch.compile(Reading(), backend="eager"), (4, 4, 4))
    (brk,) = report.data["compiled"]["graph_breaks"]
    assert brk["source"] == f"{__file__}:{ITEM_LINE}"
    assert "item" in (brk["explanation"] or brk["reason"]).lower()
    assert brk["count"] == 3
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    for each in (report, printing, static_shapes):
        jsonschema.validate(each.to_dict(), SCHEMA)


def test_hand_built_records_pair_each_break_with_its_resume_frame():
    """Dynamo's records as the span copies them: a reset (frame ids from 0/0 again) hides the older
    generation; a break whose code after it did not run in the span and was compiled before it is
    left out; the break's line is the resume frame's, its count the resume frame's region calls."""
    from gpuprof.analysis.compiled import dynamo_section

    def rec(cid, name, line, *, restart=(), reason=None, in_span=False, secs=0.5):
        return {
            "compile_id": cid,
            "co_name": name,
            "co_filename": "m.py",
            "co_firstlineno": line,
            "recompile_reason": reason,
            "has_guarded_code": True,
            "restart_reasons": list(restart),
            "in_span": in_span,
            "entire_frame_compile_time_s": secs,
        }

    print_break = "Failed to trace builtin operator\n  Explanation: `print`\n  Hint: avoid it"
    records = [
        rec("0/0", "forward", 3, restart=["stale break"]),  # before torch._dynamo.reset()
        rec("1/0", "torch_dynamo_resume_in_forward_at_9", 9),
        rec("0/0", "forward", 3, restart=[print_break]),
        rec("1/0", "torch_dynamo_resume_in_forward_at_5", 5),
        rec("2/0", "step", 20, restart=["Unsupported Tensor.item() call"]),  # never ran in the span
        rec("3/0", "torch_dynamo_resume_in_step_at_22", 22),
        rec(
            "0/1",
            "forward",
            3,
            restart=[print_break],
            in_span=True,
            reason="0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3",
        ),
        rec(
            "1/1",
            "torch_dynamo_resume_in_forward_at_5",
            5,
            in_span=True,
            reason="1/0: tensor 'y' size mismatch at index 0. expected 2, actual 3",
            secs=0.25,
        ),
    ]
    operators = [
        {"name": "Torch-Compiled Region: 0/0", "calls": 1},
        {"name": "Torch-Compiled Region: 0/1", "calls": 3},
        {"name": "Torch-Compiled Region: 1/0", "calls": 1},
        {"name": "Torch-Compiled Region: 1/1", "calls": 3},
        {"name": "TorchDynamo Cache Lookup", "calls": 8},
    ]
    out = dynamo_section(records, operators)
    assert out["graphs"] == 4
    assert out["graph_breaks"] == [
        {
            "reason": "Failed to trace builtin operator",
            "explanation": "`print`",
            "function": "forward",
            "source": "m.py:5",
            "count": 4,  # 1/0 once, 1/1 three times
            "compiles": 2,  # 0/0 before the span, 0/1 inside it
        }
    ]
    assert [(r["function"], r["dimension"], r["values"], r["compile_us"]) for r in out["recompilations"]] == [
        ("forward", "x.size(0)", [3], 500000.0),
        ("torch_dynamo_resume_in_forward_at_5", "y.size(0)", [3], 250000.0),
    ]
