"""torch.compile rules: recompilations inside the span and graph breaks in the hot loop, from the
``compiled`` section's Dynamo records (a live span's; docs/metrics.md, ``compiled``)."""

from __future__ import annotations

from typing import Optional

from .._facts import Facts
from .base import RECOMPILE_MIN, Recommendation, _ms, recommendation


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
