"""The live module view (docs/metrics.md, "Modules") on real CPU training loops: a small ResNet built in
the test (tests/python/_loops.py), its tree, its totals, its backward, and the same loop under
torch.profiler(with_stack=True) compared call for call; the hooks' life cycle and failure modes."""

from __future__ import annotations

import re
import warnings

import pytest

torch = pytest.importorskip("torch")

from _loops import make_tiny_resnet  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof._native import _core  # noqa: E402

EVALUATE = "autograd::engine::evaluate_function: "


def _data():
    torch.manual_seed(0)
    return torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))


def _loop(model, steps, prof=None, ranges=False):
    """`steps` SGD steps with a CrossEntropyLoss module (a second root beside the model)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = _data()
    for _ in range(steps):
        opt.zero_grad()
        if ranges:
            with gpuprof.range("forward"):
                loss = loss_fn(model(x), y)
            with gpuprof.range("backward"):
                loss.backward()
        else:
            loss_fn(model(x), y).backward()
        opt.step()
        if prof is not None:
            prof.step()


def _global_hooks() -> int:
    from torch.nn.modules import module as m

    return len(m._global_forward_pre_hooks) + len(m._global_forward_hooks)


@pytest.fixture(scope="module")
def resnet_span():
    torch.manual_seed(0)
    model = make_tiny_resnet()
    _loop(model, 1)  # first-call costs (allocations, oneDNN's kernels) outside the span
    with gpuprof.profile(with_modules=True) as prof:
        _loop(model, 4, prof, ranges=True)
    return model, prof.report()


def test_the_module_tree_is_the_models(resnet_span):
    """Every module of the model is a row named as in model.named_modules(), with its class, its
    caller as parent and the calls the loop made: one per step, two for each block's ReLU (applied
    twice, as torchvision's BasicBlock does). The loss module, called beside the model, is a root
    of its own; the model, with every other module below it, is the root ""."""
    model, report = resnet_span
    rows = report.data["modules"]
    jsonschema = pytest.importorskip("jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    jsonschema.validate(report.to_dict(), SCHEMA)  # the rows as docs/schema.md declares them
    named = dict(model.named_modules())
    assert {r["path"] for r in rows} == set(named) | {"CrossEntropyLoss"}
    assert rows[0]["path"] == "" and rows[0]["type"] == "TinyResNet"
    for r in rows:
        if r["path"] == "CrossEntropyLoss":
            assert (r["type"], r["parent"], r["depth"], r["calls"]) == ("CrossEntropyLoss", None, 0, 4)
            continue
        assert r["type"] == type(named[r["path"]]).__name__
        assert r["parent"] == (None if r["path"] == "" else r["path"].rpartition(".")[0])
        assert r["depth"] == (r["path"].count(".") + 1 if r["path"] else 0)
        block_relu = re.fullmatch(r"layer\d\.\d\.relu", r["path"])
        assert r["calls"] == (8 if block_relu else 4), r


def test_each_total_covers_its_children(resnet_span):
    """A module's host and device totals hold its children's (its calls enclose theirs, and their
    backward rolls up into it); its self time is what its children leave."""
    _, report = resnet_span
    rows = report.data["modules"]
    for r in rows:
        children = [c for c in rows if c["parent"] == r["path"]]
        host = sum(c["host_total_us"] for c in children)
        assert r["host_total_us"] >= host - 0.01, r
        assert r["host_self_us"] == pytest.approx(r["host_total_us"] - host, abs=0.01), r
        assert r["device_total_us"] >= sum(c["device_total_us"] for c in children)
    # Depth first: each row comes right after its parent's subtree began.
    seen = set()
    for r in rows:
        assert r["parent"] is None or r["parent"] in seen
        seen.add(r["path"])


def test_forward_and_backward_add_up_to_the_steps_operator_time(resnet_span):
    """The roots' totals are their forward calls plus every backward op of the step but
    AccumulateGrad (which differentiates no forward op): exactly, since each evaluate_function op
    is matched to the forward op that made its node. And forward + backward of the model and its loss
    equal the forward range's time plus the backward ops, within 10% (the module hooks run inside
    the forward range but outside the calls they time; the range's own Python code between them)."""
    _, report = resnet_span
    data = report.data
    roots = [r for r in data["modules"] if r["parent"] is None]
    total_us = sum(r["host_total_us"] for r in roots)
    calls = _core.trace_events(report.trace, "python_function")
    root_names = {"nn.Module: TinyResNet (TinyResNet)", "nn.Module: CrossEntropyLoss (CrossEntropyLoss)"}
    forward_us = sum(e["dur_ns"] for e in calls if e["name"] in root_names) / 1000.0
    backward_ops_us = sum(
        o["host_total_us"]
        for o in data["operators"]
        if o["name"].startswith(EVALUATE) and not o["name"].endswith("AccumulateGrad")
    )
    assert backward_ops_us > 0
    assert total_us - forward_us == pytest.approx(backward_ops_us, abs=0.01 * len(data["operators"]))
    ranges = {r["name"]: r["host_total_us"] for r in data["ranges"]}
    assert forward_us <= ranges["forward"]
    assert total_us == pytest.approx(ranges["forward"] + backward_ops_us, rel=0.10)


def test_live_and_torch_profiler_agree_call_for_call():
    """The same loop under both profilers at once (they coexist: each has its own RecordFunction
    callbacks): torch.profiler(with_stack=True) writes its nn.Module events, gpuprof its own ranges.
    Matched module for module (by type, in the order the model registers them, which is the order
    torch numbers them), the tree and the calls agree exactly and the times within each call's hook
    overhead: gpuprof times a call from its pre-hook to its hook, inside the range torch.profiler
    takes around the whole module call, and both time the same backward ops, so the typical module
    differs by at most 100 us per call."""
    model = make_tiny_resnet()
    _loop(model, 1)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/both.json"
        with (
            gpuprof.profile(with_modules=True) as gp,
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as tp,
        ):
            _loop(model, 3, gp)
        tp.export_chrome_trace(path)
        trace = gpuprof.analyze(path).to_dict()["modules"]
    live = gp.report().data["modules"]
    order = {name: i for i, (name, _) in enumerate(model.named_modules())}

    def children(rows, parent):
        return [r for r in rows if r["parent"] == parent]

    pairs = [(live[0], trace[0])] + [
        (a, b)
        for a in live
        for b in trace
        if a["parent"] is None and b["parent"] is None and a["path"] != "" and b["path"] != ""
    ]
    i = 0
    while i < len(pairs):
        a, b = pairs[i]
        mine, theirs = children(live, a["path"]), children(trace, b["path"])
        assert sorted(r["type"] for r in mine) == sorted(r["type"] for r in theirs), a["path"]
        for kind in {r["type"] for r in mine}:
            ours = sorted((r for r in mine if r["type"] == kind), key=lambda r: order[r["path"]])
            torchs = sorted(
                (r for r in theirs if r["type"] == kind), key=lambda r: int(r["path"].rsplit("_", 1)[1])
            )
            pairs += list(zip(ours, torchs))
        i += 1
    assert len(pairs) == len(live) == len(trace)
    per_call = []
    for a, b in pairs:
        assert (a["type"], a["calls"], a["depth"]) == (b["type"], b["calls"], b["depth"]), (a, b)
        per_call.append(abs(b["host_total_us"] - a["host_total_us"]) / a["calls"])
    # They differ by what torch.profiler's range holds beyond ours (our hooks, Module._call_impl,
    # its Python tracer's work at the call's edges) and, on backward ops, by whose RecordFunction
    # callback runs first. On a loaded machine a call can also be preempted between two edges, so
    # the typical module is held to it, and three in four.
    per_call.sort()
    assert per_call[len(per_call) // 2] <= 100.0, per_call
    assert per_call[(3 * len(per_call)) // 4] <= 250.0, per_call


def test_hooks_are_installed_only_while_a_span_is_hooked():
    """torch's global module hooks are there in warmup and active steps only (a wait step runs
    torch's own fast path), gone after the session, and never there without with_modules=True (the
    default): then the report has no module rows and says how to get them."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    before = _global_hooks()
    seen = []
    schedule = gpuprof.schedule(wait=1, warmup=1, active=2, repeat=1)
    with gpuprof.profile(schedule=schedule, with_modules=True) as prof:
        for _ in range(5):
            seen.append(_global_hooks() - before)
            model(x).sum().backward()
            prof.step()
    assert seen == [0, 2, 2, 2, 0]
    assert _global_hooks() == before
    assert [r["path"] for r in prof.report().data["modules"]] == ["", "0", "1"]
    assert "module_view" not in prof.report().metadata
    with gpuprof.profile() as prof:
        for _ in range(2):
            assert _global_hooks() == before
            model(x).sum().backward()
            prof.step()
    report = prof.report()
    assert report.data["modules"] == []
    assert report.metadata["module_view"] == "off: gpuprof.profile(with_modules=True) records it"
    assert "No module view: off: gpuprof.profile(with_modules=True) records it." in report.to_html()


def test_module_lists_unregistered_modules_and_threads():
    """A ModuleList's blocks run by the model itself are named `layers.0` under it (the list is
    never called); a module the model keeps in a plain list is named by its class under its caller;
    a model run on a second thread gets the same rows."""
    import threading

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
            self.hidden = [torch.nn.Tanh()]  # not registered

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.hidden[0](x)

    model, x = Net(), torch.randn(2, 4)
    with gpuprof.profile(with_modules=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
            worker = threading.Thread(target=lambda: model(x).sum().backward())
            worker.start()
            worker.join()
            prof.step()
    rows = {r["path"]: (r["type"], r["parent"], r["calls"]) for r in prof.report().data["modules"]}
    assert rows == {
        "": ("Net", None, 4),
        "layers.0": ("Linear", "", 4),
        "layers.1": ("Linear", "", 4),
        "Tanh": ("Tanh", "", 4),
    }


def test_a_forward_that_raises_reaches_the_user_and_the_tree_stays_right():
    """A module whose forward raises: the user's exception comes out unchanged, its call is closed
    (always_call=True), and the calls after it nest as before."""

    class Flaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.fail = True

        def forward(self, x):
            y = self.inner(x)
            if self.fail:
                self.fail = False
                raise ValueError("user error")
            return y

    model = torch.nn.Sequential(Flaky(), torch.nn.ReLU())
    x = torch.randn(2, 4)
    with gpuprof.profile(with_modules=True) as prof:
        with pytest.raises(ValueError, match="^user error$"):
            model(x)
        model(x).sum().backward()
        prof.step()
    rows = {r["path"]: (r["parent"], r["calls"]) for r in prof.report().data["modules"]}
    assert rows == {"": (None, 2), "0": ("", 2), "0.inner": ("0", 2), "1": ("", 1)}


def test_a_failing_hook_is_one_warning_and_training_goes_on(caplog):
    """The hooks never raise into the model: a module whose tree cannot be read (named_modules
    raises) stops the module view with one warning; the step runs and the report says why."""

    class Odd(torch.nn.Linear):
        def named_modules(self, *args, **kwargs):
            raise RuntimeError("cannot list")

    model, x = Odd(4, 4), torch.randn(2, 4)
    before = _global_hooks()
    with gpuprof.profile(with_modules=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
            prof.step()
    assert _global_hooks() == before
    warned = [r for r in caplog.records if "module hooks failed" in r.getMessage()]
    assert len(warned) == 1
    note = prof.report().metadata["module_view"]
    assert note.startswith("incomplete: the module hooks failed (RuntimeError: cannot list)")
    assert prof.report().data["operators"]  # the operators are still recorded


def test_torch_compile_sees_the_compiled_module_without_graph_breaks():
    """A torch.compile'd model (the eager backend: no compiler needed) runs with the hooks on: they
    add no graph break and no recompilation (they return at once while Dynamo traces), torch's
    warning about global hooks is not shown, and the compiled module is one row."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend="eager")
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(with_modules=True) as prof:
            for _ in range(3):
                model(x).sum().backward()
                prof.step()
    assert not [w for w in caught if "global hooks" in str(w.message)]
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1
    assert [(r["type"], r["calls"]) for r in prof.report().data["modules"]] == [("OptimizedModule", 3)]


def test_an_exported_span_gives_the_same_module_view(resnet_span, tmp_path):
    """A live span written as a Chrome trace (module calls as python_function events, the autograd
    links as Sequence number / Fwd thread id) and read back: the same rows, to the nanosecond."""
    _, report = resnet_span
    from gpuprof.traces.export import export_chrome_trace

    path = tmp_path / "span.json.gz"

    export_chrome_trace(report.trace, str(path))
    again = gpuprof.analyze(str(path)).data["modules"]
    assert again == report.data["modules"]
