"""The ``compiled`` section's lists as flat rows for the table renderers: the kernels Inductor
generated (their operators joined), their time by module, the recompilations and the graph
breaks. Each row keeps the analysis' numbers; only lists become text."""

from __future__ import annotations

# Shown at most this many operators per kernel in a cell; the JSON has them all.
OPS_SHOWN = 8


def _ops(row: dict) -> str:
    ops = row.get("ops")
    if ops == []:  # provenance read: the kernel only copies the graph's inputs (a layout change)
        return "(the graph's inputs only)"
    if not ops:
        return f"({row['fused']}, from its name)" if row.get("fused") else ""
    shown = ", ".join(str(o) for o in ops[:OPS_SHOWN])
    return shown + (f", ... (+{len(ops) - OPS_SHOWN})" if len(ops) > OPS_SHOWN else "")


# At most this many modules are named in the module section's line about the compiled regions.
MODULES_NAMED = 5


def compiled_modules_line(data: dict) -> str:
    """What the module section says of the compiled regions, whose modules its rows cannot show
    (module hooks do not fire inside compiled code): inductor's kernels' time by the module each
    came from, heaviest first; "" without ``compiled.modules``."""
    compiled = data.get("compiled")
    modules = compiled.get("modules") if isinstance(compiled, dict) else None
    rows = [m for m in modules or [] if isinstance(m, dict)]
    if not rows:
        return ""
    named = ", ".join(
        f"{m.get('path') or '(the compiled root)'} {float(m.get('total_us') or 0.0) / 1000:.3f} ms"
        for m in rows[:MODULES_NAMED]
    )
    more = f" and {len(rows) - MODULES_NAMED} more" if len(rows) > MODULES_NAMED else ""
    return (
        "Inside torch.compile's regions module hooks do not fire, so the compiled model is one row "
        f"here; the kernels inductor generated there ran, by the module each came from: {named}{more} "
        "(compiled.modules; a kernel fusing two modules' operators counts in their common parent)"
    )


def compiled_tables(data: dict) -> list[tuple[str, str, list[dict]]]:
    """(key, title, rows) of each non-empty list in the report's ``compiled`` section."""
    compiled = data.get("compiled")
    if not isinstance(compiled, dict):
        return []
    out = []
    kernels = [r for r in compiled.get("compiled_kernels") or [] if isinstance(r, dict)]
    if kernels:
        rows = [
            {
                "name": r.get("kernel"),
                "backend": r.get("backend"),
                "calls": r.get("calls"),
                "total_us": r.get("total_us"),
                "time_on": r.get("time_on"),
                "ops": _ops(r),
                "source": r.get("source") or (r.get("sources") or [""])[0],
            }
            for r in kernels
        ]
        if any(r.get("module") is not None or r.get("flops") is not None for r in kernels):
            for row, r in zip(rows, kernels):  # what the provenance read of the graph gives
                row["module"] = r.get("module")
                row["flops"] = r.get("flops")
        out.append(("compiled_kernels", "Kernels torch.compile generated", rows))
    modules = [r for r in compiled.get("modules") or [] if isinstance(r, dict)]
    if modules:
        rows = [
            {
                "module": r.get("path") or "(the compiled root)",
                "kernels": r.get("kernels"),
                "calls": r.get("calls"),
                "total_us": r.get("total_us"),
                "flops": r.get("flops"),
            }
            for r in modules
        ]
        title = "Modules inside torch.compile's regions (the time of inductor's kernels by module)"
        out.append(("compiled_modules", title, rows))
    recompiles = [r for r in compiled.get("recompilations") or [] if isinstance(r, dict)]
    if recompiles:
        rows = [
            {
                "function": r.get("function"),
                "count": r.get("count"),
                "changed": r.get("dimension") or r.get("guard"),
                "values": ", ".join(str(v) for v in r.get("values") or []),
                "compile_us": r.get("compile_us"),
                "source": r.get("source"),
            }
            for r in recompiles
        ]
        out.append(("compiled_recompilations", "torch.compile recompilations", rows))
    breaks = [r for r in compiled.get("graph_breaks") or [] if isinstance(r, dict)]
    if breaks:
        rows = [
            {
                "source": r.get("source") or r.get("function"),
                "reason": r.get("reason"),
                "count": r.get("count"),
                "compiles": r.get("compiles"),
            }
            for r in breaks
        ]
        out.append(("compiled_graph_breaks", "torch.compile graph breaks", rows))
    return out
