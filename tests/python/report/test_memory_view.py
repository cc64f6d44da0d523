"""The memory view on real CPU training loops (docs/metrics.md, "Memory"): with profile_memory=True
torch's CPU allocator reports every allocation and free, with its address, so the view is complete on
this CPU-only machine: the curve, what filled memory at the peak (parameters, gradients and optimizer
state found from the modules and optimizers the loop ran), the plugin's per-operator statistics, and
memory that grows across steps.
"""

from __future__ import annotations

import json

import pytest
import torch

import gpuprof
from gpuprof.collect import hooks as _hooks_loader

# A three-layer MLP: 128*256 + 256 + 256*256 + 256 + 256*10 + 10 = 101,386 parameters, 405,544 bytes
# in float32. Adam keeps two moments per parameter and a step count per tensor: 2 x 405,544 + 6 x 4.
IN, HIDDEN, OUT = 128, 256, 10


def _model(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, OUT),
    )
    return model, torch.optim.Adam(model.parameters())


def _step(model, opt, batch: int, *, set_to_none: bool = False, keep: list | None = None) -> None:
    x = torch.randn(batch, IN)
    y = torch.randint(0, OUT, (batch,))
    loss = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
    opt.zero_grad(set_to_none=set_to_none)
    loss.mean().backward()
    opt.step()
    if keep is not None:
        keep.append(loss)  # the per-sample losses, kept as tensors: 4 bytes a sample every step


def _profiled(batch: int, steps: int = 3, **kw):
    model, opt = _model()
    _step(model, opt, batch, **kw)  # Adam's state exists before the recording, as in a long run
    with gpuprof.profile(profile_memory=True, batch_size=batch) as prof:
        for _ in range(steps):
            _step(model, opt, batch, **kw)
            prof.step()
    return prof.report(), model, opt


def _nbytes(tensors) -> int:
    seen = {}
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def test_parameters_gradients_and_adam_state_are_the_bytes_the_model_holds():
    # Every tensor of the model and of Adam was allocated before the recording (the warm-up step):
    # no allocation record names them, the storages the session saw do. Gradients persist
    # (zero_grad(set_to_none=False)), so at the peak each part is exactly what the model holds.
    report, model, opt = _profiled(1024)
    params = _nbytes(model.parameters())
    grads = _nbytes(p.grad for p in model.parameters())
    state = _nbytes(t for s in opt.state.values() for t in s.values())
    assert params == 405_544 and grads == params and state == 2 * params + 6 * 4
    c = report.data["memory_composition"]["-1"]
    assert abs(c["parameters"] - params) <= 0.01 * params
    assert abs(c["gradients"] - grads) <= 0.01 * grads
    assert abs(c["optimizer_state"] - state) <= 0.01 * state
    assert c["activations"] > 0
    # The composition adds up to the level at the peak.
    assert sum(c.values()) == report.data["memory_peak"]["-1"]["bytes"]


def test_activations_grow_with_the_batch():
    # The activations held at the peak (the forward's outputs the backward needs, and the input) are
    # about proportional to the batch: 4x the batch, about 4x the bytes; the rest stays the same.
    small = _profiled(256)[0].data["memory_composition"]["-1"]
    large = _profiled(1024)[0].data["memory_composition"]["-1"]
    assert small["activations"] > 0
    assert 3.6 * small["activations"] <= large["activations"] <= 4.4 * small["activations"]
    for key in ("parameters", "gradients", "optimizer_state"):
        assert small[key] == large[key]


def test_the_curves_maximum_is_the_reported_peak():
    report = _profiled(256)[0]
    curve = report.data["memory_curve"]["-1"]
    peak = report.data["memory_peak"]["-1"]
    assert max(a for _t, a, _r in curve) == peak["bytes"]
    assert [t for t, a, _r in curve if a == peak["bytes"]][0] == peak["t_us"]
    # The per-step table reads the same levels: the highest step peak is the peak.
    host = [r for r in report.data["memory"] if r["device"] == -1]
    assert max(r["peak_allocated_bytes"] for r in host) == peak["bytes"]
    assert peak["step"] in [r["step"] for r in host]
    # The peak is in the backward or the forward, where the loop's operators made what was live.
    assert peak["top_ops"] and all(o["bytes"] > 0 for o in peak["top_ops"])


def test_agreement_with_torchs_memory_profiler():
    # torch's own memory profiler categorises the same loop (run separately: torch.profiler cannot
    # start while gpuprof records allocations on the same thread). At the peak both see the same
    # level; parameters, gradients and optimizer state agree; what torch splits into inputs,
    # activations and autograd details (and leaves uncategorised) is what gpuprof calls activations
    # (made by an operator outside the optimizer step, outliving it).
    mp = pytest.importorskip("torch.profiler._memory_profiler")
    batch = 1024
    model, opt = _model()
    _step(model, opt, batch)
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as tp:
        for _ in range(2):
            _step(model, opt, batch)
    times, sizes = mp.MemoryProfileTimeline(tp._memory_profile())._coalesce_timeline("cpu")
    names = [None] + [c.name if c is not None else "NONE" for c in mp._CATEGORY_TO_INDEX]
    totals = [sum(s) for s in sizes]
    at = dict(zip(names, sizes[totals.index(max(totals))]))

    ours = _profiled(batch, steps=2)[0].data
    c = ours["memory_composition"]["-1"]
    assert ours["memory_peak"]["-1"]["bytes"] == max(totals)
    assert abs(c["parameters"] - at["PARAMETER"]) <= 0.01 * at["PARAMETER"]
    assert abs(c["gradients"] - at["GRADIENT"]) <= 0.01 * at["GRADIENT"]
    assert abs(c["optimizer_state"] - at["OPTIMIZER_STATE"]) <= 0.01 * at["OPTIMIZER_STATE"]
    theirs = sum(at.get(k, 0) for k in ("INPUT", "ACTIVATION", "AUTOGRAD_DETAIL", "TEMPORARY", "NONE", None))
    assert abs(c["activations"] + c["temporary"] + c["unknown"] - theirs) <= 0.01 * theirs


def test_a_loop_that_keeps_its_losses_is_flagged_with_their_rate_and_operator():
    # Each step appends its per-sample losses to a list: 32,768 floats, 131,072 bytes a step, made
    # by cross_entropy's loss op and never freed. The level at every step end rises by exactly that.
    batch = 32_768
    kept: list = []
    report = _profiled(batch, steps=6, keep=kept)[0]
    g = report.data["memory_growth"]["-1"]
    assert g["flagged"] and g["rising_steps"] == len(g["steps"]) - 1
    assert g["bytes_per_step"] == pytest.approx(4 * batch, rel=0.01)
    assert g["mb_per_step"] == pytest.approx(4 * batch / 1e6, rel=0.01)
    top = g["ops"][0]
    assert top["name"] == "aten::cross_entropy_loss" and top["bytes_per_step"] == 4 * batch
    (leak,) = [a for a in report.advice if a["rule"] == "memory_leak"]
    assert ".item()" in leak["fix"] and leak["evidence"]["top_op"] == "aten::cross_entropy_loss"
    assert "Memory grows on the host" in report.to_text(color=False)


def test_a_clean_loop_is_never_flagged():
    # The same loop keeping loss.mean().item() (a Python float): the level at step ends is flat.
    model, opt = _model()
    floats: list = []

    def step():
        x = torch.randn(32_768, IN)
        loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, OUT, (32_768,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        floats.append(loss.item())

    step()
    with gpuprof.profile(profile_memory=True) as prof:
        for _ in range(6):
            step()
            prof.step()
    g = prof.report().data["memory_growth"]["-1"]
    assert not g["flagged"] and g["bytes_per_step"] == 0.0 and g["ops"] == []
    assert not [a for a in prof.report().advice if a["rule"] == "memory_leak"]


def test_memory_ops_counts_as_the_plugin_does_on_a_live_loop():
    # A forward of Linear(64, 32) on 16 samples, 3 times: aten::addmm allocates the 16 x 32 output
    # (2,048 bytes) each call; aten::linear allocates nothing itself and everything inside it.
    model = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    with torch.no_grad(), gpuprof.profile(profile_memory=True) as prof:
        outs = [model(x) for _ in range(3)]
        prof.step()
    rows = {r["name"]: r for r in prof.report().data["memory_ops"] if r["device"] == -1}
    addmm, linear = rows["aten::addmm"], rows["aten::linear"]
    assert addmm["calls"] == linear["calls"] == 3
    assert addmm["self_alloc_bytes"] == addmm["alloc_bytes"] == 3 * 16 * 32 * 4
    assert addmm["self_alloc_count"] == 3
    assert linear["self_alloc_bytes"] == 0 and linear["alloc_bytes"] == 3 * 16 * 32 * 4
    assert linear["size_increase_bytes"] == 3 * 16 * 32 * 4  # the outputs outlive the calls
    assert len(outs) == 3


def test_host_allocations_are_recorded_only_with_profile_memory():
    # The CPU allocator reports only while the reporter says memory is profiled, on the thread that
    # installed it: inside a profile_memory=True session, not before nor after, nor in a default one.
    h = _hooks_loader.hooks()
    model, opt = _model()
    assert not h.memory_profiling_enabled()
    with gpuprof.profile() as prof:
        assert not h.memory_profiling_enabled()
        _step(model, opt, 64)
        prof.step()
    assert "-1" not in prof.report().data["memory_curve"]
    assert prof.report().data["memory_ops"] == []
    with gpuprof.profile(profile_memory=True) as prof:
        assert h.memory_profiling_enabled()
        _step(model, opt, 64)
        prof.step()
    assert not h.memory_profiling_enabled()
    assert prof.report().data["memory_curve"]["-1"] and prof.report().data["memory_ops"]


def test_the_memory_view_in_every_format(tmp_path):
    from gpuprof.cli import main
    from gpuprof.report.json_schema import SCHEMA

    jsonschema = pytest.importorskip("jsonschema")
    kept: list = []
    report = _profiled(32_768, steps=6, keep=kept)[0]
    text = report.to_text(color=False)
    assert "Host at its peak" in text and "parameters" in text and "live at the peak, by operator" in text
    md = report.to_markdown()
    assert "### Memory by operator" in md and "Host at its peak" in md
    html = report.to_html()
    assert "What fills memory at the peak" in html and 'class="peak"' in html and 'class="boundary"' in html
    path = tmp_path / "r.json"
    report.to_json(path)
    data = json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["schema_version"] == 4
    # Budgets: the growth rate is a metric of the host (no capacity: no peak_memory_pct there).
    assert main(["check", str(path), "--max", "memory_growth_mb_per_step=0.1"]) == 1
    assert main(["check", str(path), "--max", "memory_growth_mb_per_step=0.2"]) == 0


def test_the_chrome_trace_keeps_what_the_memory_view_needs(tmp_path):
    # Exported and read back, every allocation keeps its address and thread: the per-operator
    # statistics are the live report's, and the same blocks make the same activations at the peak.
    # The storages' roles are not in a Chrome trace: there they count as unknown.
    report = _profiled(256)[0]
    from gpuprof.traces.export import export_chrome_trace

    path = tmp_path / "t.json.gz"

    export_chrome_trace(report.trace, path)
    again = gpuprof.analyze(path)
    assert again.data["memory_ops"] == report.data["memory_ops"]
    live, read = report.data["memory_composition"]["-1"], again.data["memory_composition"]["-1"]
    assert read["activations"] == live["activations"] and read["parameters"] == 0
