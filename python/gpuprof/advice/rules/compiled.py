"""torch.compile rules: recompilations inside the span and graph breaks in the hot loop, from the
``compiled`` section's Dynamo records (a live span's); operators Inductor left to eager kernels
(its provenance: ``compiled_kernels=True``); and a compiled model whose generated kernels are
launched one by one while the GPU waits for them (docs/metrics.md, ``compiled``)."""

from __future__ import annotations

from typing import Optional

from .._facts import Facts
from .base import (
    FALLBACK_MIN_PCT,
    RECOMPILE_MIN,
    Recommendation,
    _launch_thresholds,
    _ms,
    recommendation,
)


def _compiled(f: Facts) -> dict:
    section = f.data.get("compiled")
    return section if isinstance(section, dict) else {}


def _span_us(f: Facts) -> float:
    return f.step_us * f.num_steps


def recompilations(f: Facts) -> Optional[Recommendation]:
    rows = [r for r in _compiled(f).get("recompilations") or [] if isinstance(r, dict)]
    if not rows or f.num_steps == 0:
        return None
    top = max(rows, key=lambda r: r.get("count") or 0)
    if (top.get("count") or 0) < RECOMPILE_MIN:
        return None
    count = int(top["count"])
    compile_us = float(sum(r.get("compile_us") or 0.0 for r in rows))
    span_us = _span_us(f)
    dim = top.get("dimension")
    values = ", ".join(str(v) for v in top.get("values") or [])
    what = (
        f"{dim} changed every time (new values: {values})"
        if dim
        else f"the guard that failed: {top.get('guard')}"
    )
    if dim:
        tensor = dim.split(".")[0]
        index = dim.rsplit("(", 1)[-1].rstrip(")")
        named = tensor if tensor.isidentifier() else "x"
        called = "" if tensor.isidentifier() else f", x being the input Dynamo calls {tensor}"
        fix = (
            f"mark the changing dimension dynamic before the first call: torch._dynamo.mark_dynamic({named}, "
            f"{index}) in {top.get('function')}'s caller{called}, or torch.compile(model, dynamic=True); "
            "or pad the inputs to a few fixed sizes"
        )
    else:
        fix = (
            "keep what the guard checks constant between steps (it is named in the evidence), or "
            "torch.compile(model, dynamic=True) where it is a size"
        )
    return recommendation(
        "recompilations",
        f"torch.compile recompiled {top.get('function')} {count} times in the span",
        summary=f"{count} recompilations of {top.get('function')} ({top.get('source')}): {what}; "
        f"compiling took {_ms(compile_us)} of the span",
        numbers={
            "recompilations": count,
            "function": top.get("function"),
            "source": top.get("source"),
            "dimension": dim,
            "guard": top.get("guard"),
            "compile_us": compile_us,
        },
        bound_pct=100.0 * compile_us / span_us if span_us > 0 else 0.0,
        confidence="high",
        confidence_reason="Dynamo's own records name the failed guard and time each compile",
        fix=fix,
    )


def graph_break(f: Facts) -> Optional[Recommendation]:
    section = _compiled(f)
    steps = f.num_steps
    hot = [
        b
        for b in section.get("graph_breaks") or []
        if isinstance(b, dict) and isinstance(b.get("count"), int) and steps and b["count"] >= steps
    ]
    if not hot:
        return None
    top = max(hot, key=lambda b: b["count"])
    span_us = _span_us(f)
    region_us = float(section.get("region_host_total_us") or 0.0)
    where = top.get("source") or f"in {top.get('function')}"
    why = top.get("explanation") or top.get("reason")
    return recommendation(
        "graph_break",
        f"A graph break at {where} splits the compiled model every step",
        summary=f"torch.compile stops its graph at {where} ({top.get('reason')}) and runs that code "
        f"eagerly, {top['count'] / steps:.0f} times per step; {len(hot)} break(s) run every step",
        numbers={
            "source": top.get("source"),
            "reason": top.get("reason"),
            "explanation": top.get("explanation"),
            "runs_per_step": top["count"] / steps,
            "breaks_every_step": len(hot),
        },
        bound_pct=min(100.0, 100.0 * region_us / span_us) if span_us > 0 else 0.0,
        confidence="medium",
        confidence_reason="the break is Dynamo's record; what one graph gains over two (fusion across "
        "the break, fewer guards) depends on the code around it",
        fix=f"remove or move out of forward what breaks the graph at {where}: {why} (a print or a "
        "tensor.item() inside forward: log outside the compiled model, or keep the value a tensor)",
    )


def eager_fallback(f: Facts) -> Optional[Recommendation]:
    rows = [r for r in _compiled(f).get("fallbacks") or [] if isinstance(r, dict)]
    span_us = _span_us(f)
    if not rows or span_us <= 0:
        return None
    on_device = any(r.get("device_total_us") for r in rows)
    key = "device_total_us" if on_device else "host_total_us"
    total_us = float(sum(r.get(key) or 0.0 for r in rows))
    pct = 100.0 * total_us / span_us
    if pct < FALLBACK_MIN_PCT:
        return None
    top = max(rows, key=lambda r: r.get(key) or 0.0)
    where = ", ".join((top.get("sources") or [])[:2]) or "the compiled model"
    names = ", ".join(r["op"] for r in rows[:4])
    return recommendation(
        "eager_fallback",
        f"torch.compile runs {top['op']} as an eager kernel inside its graph",
        summary=f"{len(rows)} operator(s) Inductor does not generate code for ({names}) take "
        f"{_ms(total_us)} ({pct:.0f}% of the span's {'device' if on_device else 'host'} time); the "
        f"largest, {top['op']}, comes from {where}",
        numbers={
            "fallback_ops": [r["op"] for r in rows],
            "top_op": top["op"],
            "sources": top.get("sources") or [],
            "fallback_us": total_us,
            "fallback_pct": pct,
        },
        bound_pct=min(100.0, pct),
        confidence="medium",
        confidence_reason="Inductor's provenance names the fallbacks; their time counts every call of "
        "the operator in the span, inside the compiled graphs or not",
        fix=f"at {where}: express {top['op']} with operators Inductor generates code for, or register "
        "a decomposition for it (torch._inductor.decomposition.register_decomposition); each fallback "
        "also splits the fusion around it. Linear algebra (linalg_*) stays a library call: move it "
        "out of the hot loop or batch it",
    )


def cuda_graphs(f: Facts) -> Optional[Recommendation]:
    rows = [
        r
        for r in _compiled(f).get("compiled_kernels") or []
        if isinstance(r, dict) and r.get("time_on") == "device"
    ]
    calls = float(sum(r.get("calls") or 0 for r in rows))
    if not rows or calls <= 0 or f.num_steps == 0:
        return None
    names = {r["kernel"] for r in rows}
    launched = float(
        sum(
            r.get("launches") or 0
            for r in f.data.get("launch_stats") or []
            if isinstance(r, dict) and r.get("name") in names
        )
    )
    if launched < 0.5 * calls:
        return None  # most of them are replayed from a CUDA graph already (no launch call each)
    per_step = f.per_step(launched)
    mean_us = float(sum(r.get("total_us") or 0.0 for r in rows)) / calls
    met = _launch_thresholds(f, mean_us, per_step)
    if met is None:
        return None
    host_pct, idle = met
    return recommendation(
        "cuda_graphs",
        "The compiled model launches its kernels one by one while the GPU waits",
        summary=f"torch.compile's kernels: {per_step:.0f} launches per step averaging {mean_us:.1f} us "
        f"each, none replayed from a CUDA graph; the GPU idles {idle:.0f}% of the step",
        numbers={
            "generated_launches_per_step": per_step,
            "mean_kernel_us": mean_us,
            "host_pct": host_pct,
            "gpu_idle_not_dataloader_pct": idle,
        },
        bound_pct=idle,
        confidence="medium",
        confidence_reason="launches and idle time are measured; a CUDA graph removes launch gaps, "
        "not the kernels' own time",
        fix='torch.compile(model, mode="reduce-overhead") records the compiled graphs as CUDA graphs '
        "and replays them with one launch (keep input shapes static, no CPU sync such as .item() "
        "inside the model, and call torch.compiler.cudagraph_mark_step_begin() before each step when "
        "outputs are kept across steps)",
    )
