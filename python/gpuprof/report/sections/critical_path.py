"""The critical path per step (docs/metrics.md, "Critical path"), as lines."""

from __future__ import annotations

from typing import Optional

from ...analysis.spill import SpilledRows
from .tables import printable

# Steps listed in the terminal, Markdown and HTML reports; the JSON keeps every step.
STEPS_SHOWN = 5
TOP_SHOWN = 5

# HTA's cause keys, in its order, as the report says them.
CAUSES = (
    ("cpu_bound", "CPU"),
    ("data_loading", "data loading"),
    ("gpu_compute_bound", "GPU compute"),
    ("gpu_communication_bound", "GPU communication"),
    ("gpu_kernel_kernel_overhead", "kernel-kernel gaps"),
    ("gpu_kernel_launch_overhead", "launch delay"),
)


def critical_path_steps(data: dict) -> list[dict]:
    """The section's steps; [] for a report made before gpuprof computed the critical path."""
    cp = data.get("critical_path")
    steps = cp.get("steps") if isinstance(cp, dict) else None
    if isinstance(steps, SpilledRows):  # a windowed read's, on disk: dicts, as written
        return steps
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


def _causes_text(step: dict) -> str:
    pct = step.get("by_cause_pct") if isinstance(step.get("by_cause_pct"), dict) else {}
    labels = dict(CAUSES)
    shown = [(k, v) for k, v in pct.items() if isinstance(v, (int, float)) and v >= 0.05]
    shown.sort(key=lambda kv: -kv[1])
    # waiting_for_rank_<N> (folders of ranks) reads as it is keyed
    return ", ".join(f"{labels.get(k, printable(str(k).replace('_', ' ')))} {v:.1f}%" for k, v in shown)


def _cut(name: str, chars: Optional[int]) -> str:
    return name if chars is None or len(name) <= chars else name[: chars - 3] + "..."


def _top_lines(step: dict, name_chars: Optional[int]) -> list[str]:
    rows = step.get("top") if isinstance(step.get("top"), list) else []
    out = []
    for r in rows[:TOP_SHOWN]:
        if isinstance(r, dict):
            name = _cut(printable(r.get("name", "?")), name_chars)
            out.append(f"  {r.get('us', 0):,.1f} us ({r.get('pct', 0):.1f}%) {name}")
    return out


def critical_path_lines(data: dict, name_chars: Optional[int] = None) -> list[str]:
    """Per step (the first STEPS_SHOWN): its length and causes, then the names with most time on the
    chain, one a line (cut to ``name_chars``: the terminal's), and the ranks it waited for; a last
    line says how many steps the JSON holds beyond them. [] without the section."""
    steps = critical_path_steps(data)
    lines = []
    for s in steps[:STEPS_SHOWN]:
        lines.append(f"Step {s.get('step')}: {s.get('length_us', 0) / 1000:,.3f} ms: {_causes_text(s)}")
        lines += _top_lines(s, name_chars)
        for h in s.get("held_by") or []:
            if isinstance(h, dict):
                cause = dict(CAUSES).get(h.get("its_cause"), printable(h.get("its_cause") or "?"))
                lines.append(
                    f"  waited {h.get('wait_us', 0) / 1000:,.3f} ms in collectives for rank {h.get('rank')}, "
                    f"whose own path in this step is mostly {cause}"
                )
    if len(steps) > STEPS_SHOWN:
        lines.append(f"... and {len(steps) - STEPS_SHOWN} more steps (the JSON report has every one)")
    return lines
