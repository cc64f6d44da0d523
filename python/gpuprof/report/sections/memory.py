"""Memory: per step, and the memory view (what fills memory at the peak, what grows, why a run ran
out of memory)."""

from __future__ import annotations

from typing import Any, Optional

from ...analysis import section
from .modules import modules
from .series import by_device
from .tables import fmt_bytes, printable


def memory_lines(data: dict) -> list[str]:
    """One line per GPU (its highest per-step peak, the step, against capacity) and one for the host
    (resident set size at the first and last step, and its peak): the memory table in a sentence."""
    lines = []
    for device, rows in by_device(section(data, "memory")):
        if device == -1:
            rss = [
                (r.get("step"), r["peak_rss_bytes"])
                for r in rows
                if isinstance(r.get("peak_rss_bytes"), (int, float))
            ]
            if rss:
                (_, first), (_, last) = rss[0], rss[-1]
                step, peak = max(rss, key=lambda x: x[1])
                growth = last - first
                lines.append(
                    f"Host RSS: {fmt_bytes(first)} at step {rss[0][0]}, {fmt_bytes(last)} at step "
                    f"{rss[-1][0]} ({'+' if growth >= 0 else '-'}{fmt_bytes(abs(growth))}), "
                    f"peak {fmt_bytes(peak)} (step {step})"
                )
            continue
        known = [r for r in rows if isinstance(r.get("peak_allocated_bytes"), (int, float))]
        if not known:
            continue
        top = max(known, key=lambda r: r["peak_allocated_bytes"])
        line = f"GPU {device}: peak allocated {fmt_bytes(top['peak_allocated_bytes'])}"
        cap = top.get("capacity_bytes")
        if isinstance(cap, (int, float)) and cap > 0:
            line += f" of {fmt_bytes(cap)} ({100.0 * top['peak_allocated_bytes'] / cap:.0f}%)"
            if top["peak_allocated_bytes"] > cap:
                line += " [above the device's memory: implausible, see the warning]"
        line += f" in step {top.get('step')}"
        if isinstance(top.get("peak_reserved_bytes"), (int, float)):
            line += f", reserved {fmt_bytes(top['peak_reserved_bytes'])}"
        lines.append(line)
    return lines


# ---- the memory view: what fills memory at the peak, what grows, why a run ran out ------------------
COMPOSITION = (
    ("parameters", "parameters"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("activations", "activations"),
    ("temporary", "temporary"),
    ("unknown", "unknown"),
)
TOP_OWNERS = 3  # operators / modules named per line
MIN_PEAK_SHOWN_BYTES = 1 << 20  # a device peaking lower (a trace's few host bytes) is not worth a line


def device_name(device: Any) -> str:
    return "host" if str(device) == "-1" else f"GPU {device}"


def composition_parts(composition: dict) -> list[tuple[str, str, int, float]]:
    """(key, label, bytes, % of the total) of each part that holds bytes, in COMPOSITION's order."""
    total = sum(int(composition.get(k) or 0) for k, _ in COMPOSITION)
    return [
        (
            k,
            label,
            int(composition.get(k) or 0),
            100.0 * int(composition.get(k) or 0) / total if total else 0.0,
        )
        for k, label in COMPOSITION
        if composition.get(k)
    ]


def composition_text(composition: dict) -> str:
    return ", ".join(
        f"{label} {fmt_bytes(b)} ({pct:.0f}%)" for _, label, b, pct in composition_parts(composition)
    )


def owners_text(rows: list, key: str = "bytes", suffix: str = "", modules: bool = False) -> str:
    """The first TOP_OWNERS owners (``memory_owner`` rows) as "name bytes, ...": operators, or with
    ``modules`` module paths (the model itself "(model)", as the module tables show it)."""

    def name(r: dict) -> str:
        return module_owner_name(r.get("name")) if modules else r.get("name") or "(outside any operator)"

    return ", ".join(
        f"{printable(name(r))} {fmt_bytes(r.get(key) or 0)}{suffix}" for r in (rows or [])[:TOP_OWNERS]
    )


def module_owner_name(path: Any) -> str:
    """A module owner's name as shown: its path in ``modules``, the model's own ("") "(model)"."""
    return str(path) if path else "(model)"


def module_owners_note(data: dict) -> Optional[str]:
    """Why a report with memory owners names no module, and how to get them: the module view is
    off (live), or the trace has no module calls; None when the report has the module view (or is
    from before it)."""
    if modules(data) or "modules" not in data:
        return None
    live = (data.get("source") or {}).get("kind") in ("live", "out_of_memory")
    note = str((data.get("metadata") or {}).get("module_view") or "")
    if live and note.startswith("off: gpuprof.profile(with_modules=True)"):
        return (
            "by module: the module view is off; gpuprof.profile(with_modules=True) "
            "(gpuprof run --modules) names the modules that made this memory"
        )
    if live:
        return f"by module: module view {note}" if note else None
    return (
        "by module: this trace has no module calls; torch.profiler.profile(with_stack=True) "
        "writes them (or profile live with gpuprof.profile(with_modules=True))"
    )


def _steps_span(steps: list) -> str:
    return f"steps {steps[0]}..{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"


def memory_view_lines(data: dict) -> list[str]:
    """Each device's peak with what filled it and who made it, and memory that grows across steps."""
    lines = []
    composition = data.get("memory_composition") or {}
    for device, peak in sorted((data.get("memory_peak") or {}).items(), key=lambda kv: int(kv[0]) < 0):
        if (peak.get("bytes") or 0) < MIN_PEAK_SHOWN_BYTES:
            continue
        where = device_name(device)
        step = peak.get("step")
        head = f"{where[0].upper()}{where[1:]} at its peak ({fmt_bytes(peak.get('bytes') or 0)}" + (
            f" in step {step})" if step is not None else ")"
        )
        parts = composition_text(composition.get(device) or {})
        lines.append(head + (f": {parts}" if parts else ""))
        if peak.get("top_ops"):
            lines.append(f"  live at the peak, by operator: {owners_text(peak['top_ops'])}")
        if peak.get("top_modules"):
            lines.append(f"  live at the peak, by module: {owners_text(peak['top_modules'], modules=True)}")
        elif peak.get("top_ops") and module_owners_note(data):
            lines.append(f"  {module_owners_note(data)}")
    for device, g in sorted((data.get("memory_growth") or {}).items(), key=lambda kv: int(kv[0]) < 0):
        if not g.get("flagged"):
            continue
        steps = g.get("steps") or []
        line = (
            f"Memory grows on the {device_name(device)}: {g['mb_per_step']:+.3g} MB per step over "
            f"{_steps_span(steps)} ({g.get('rising_steps')} of {max(len(steps) - 1, 0)} step ends higher)"
        )
        if g.get("ops"):
            line += f"; left live by {owners_text(g['ops'], 'bytes_per_step', '/step')}"
        if g.get("modules"):
            line += f"; in modules {owners_text(g['modules'], 'bytes_per_step', '/step', modules=True)}"
        lines.append(line)
    return lines


def out_of_memory_lines(data: dict) -> list[str]:
    """The out-of-memory section in lines: the failure, what filled memory, the batch that fits and
    the fixes (the out_of_memory recommendation's)."""
    oom = data.get("out_of_memory")
    if not isinstance(oom, dict):
        return []
    where = device_name(oom.get("device"))
    head = f"gpuprof: out of memory on the {where} ({printable(oom.get('error') or 'error')})"
    facts = []
    if oom.get("requested_bytes") is not None:
        facts.append(f"tried to allocate {fmt_bytes(oom['requested_bytes'])}")
    if oom.get("allocated_bytes") is not None:
        held = f"{fmt_bytes(oom['allocated_bytes'])} allocated"
        if oom.get("capacity_bytes"):
            held += f" of {fmt_bytes(oom['capacity_bytes'])}"
        facts.append(held)
    if oom.get("free_bytes") is not None:
        facts.append(f"{fmt_bytes(oom['free_bytes'])} free")
    if oom.get("reserved_unallocated_bytes"):
        facts.append(f"{fmt_bytes(oom['reserved_unallocated_bytes'])} reserved but unallocated")
    lines = [head + (": " + ", ".join(facts) if facts else "")]
    for note in oom.get("notes") or []:
        lines.append(f"  note: {printable(note)}")
    if oom.get("composition"):
        lines.append(f"  at the failure: {composition_text(oom['composition'])}")
        if oom.get("composition_source"):
            lines.append(f"    (from {printable(oom['composition_source'])})")
    if oom.get("top_ops"):
        lines.append(f"  live allocations by operator: {owners_text(oom['top_ops'])}")
    if oom.get("top_modules"):
        lines.append(f"  live allocations by module: {owners_text(oom['top_modules'], modules=True)}")
    elif oom.get("top_ops") and module_owners_note(data):
        lines.append(f"  {module_owners_note(data)}")
    fits = oom.get("largest_batch_that_fits")
    if fits is not None:
        lines.append(
            f"  largest batch that fits: {fits} (now {oom.get('batch_size')}): "
            f"{fmt_bytes(oom['per_sample_bytes'])} per sample ({printable(oom.get('per_sample_source'))}), "
            f"{fmt_bytes(oom['fixed_bytes'])} that does not grow with the batch, "
            f"{fmt_bytes(oom['budget_bytes'])} the allocator could have had"
        )
    rec = next((a for a in data.get("advice") or [] if a.get("rule") == "out_of_memory"), None)
    if rec and rec.get("fix"):
        lines.append(f"  fixes: {printable(rec['fix'])}")
    return lines
