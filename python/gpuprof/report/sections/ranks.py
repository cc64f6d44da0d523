"""The cross-rank section: one row per rank, the stragglers, each rank's summary line, the merged
timeline."""

from __future__ import annotations

import re
from typing import Optional

from ...analysis import CATEGORIES

RANK_HEADERS = [
    "rank",
    "host",
    "device",
    "steps",
    "step ms",
    "outside collectives ms",
    "waiting in collectives ms",
    "comm/compute overlap %",
]


def ranks_shown(data: dict) -> bool:
    """The cross-rank section is shown when the report holds more than one rank, names missing
    ranks or skipped files, or is one rank of a job. Its numbers come from analysis/ranks.py; this
    only formats them."""
    cr = data.get("cross_rank") or {}
    return (
        len(data.get("ranks") or []) > 1
        or bool(cr.get("missing_ranks") or cr.get("skipped_files"))
        or (cr.get("world_size") or 1) > 1
    )


#: The most rank rows the terminal and Markdown show; a larger job shows rank 0, the stragglers and
#: the ranks longest outside collectives (the JSON and HTML carry every rank).
RANK_ROWS_SHOWN = 32


def ranks_picked(data: dict, limit: int = 0) -> list[dict]:
    """The ``ranks`` rows to show: all of them, or, past ``limit``, rank 0's, the stragglers' and the
    ranks longest outside collectives, ``limit`` in all, in rank order."""
    ranks = [r for r in data.get("ranks") or [] if isinstance(r, dict)]
    if not limit or len(ranks) <= limit:
        return ranks
    named = {s.get("rank") for s in data.get("stragglers") or [] if isinstance(s, dict)}
    first = [i for i, r in enumerate(ranks) if r.get("rank") == 0 or r.get("rank") in named][: limit // 2]
    rest = sorted(
        (i for i in range(len(ranks)) if i not in set(first)),
        key=lambda i: -(ranks[i].get("busy_us") or 0),
    )
    return [ranks[i] for i in sorted(first + rest[: limit - len(first)])]


def ranks_left_out_line(data: dict, limit: int) -> str:
    """What the picked rows leave out, or ""."""
    left = len(data.get("ranks") or []) - len(ranks_picked(data, limit))
    if left <= 0:
        return ""
    return (
        f"... and {left:,} more ranks: shown are rank 0, the stragglers and the ranks longest outside "
        "collectives; the JSON and HTML reports have every rank"
    )


def rank_rows(data: dict, limit: int = 0) -> list[list[str]]:
    out = []
    for r in ranks_picked(data, limit):
        avg = r.get("average") or {}
        overlap = r.get("comm_comp_overlap_pct")
        out.append(
            [
                str(r.get("rank")),
                str(r.get("hostname", "")),
                str(r.get("device", "")),
                str(r.get("steps", "")),
                f"{(avg.get('total_us') or 0) / 1000:.2f}",
                f"{(r.get('busy_us') or 0) / 1000:.2f}",
                f"{(r.get('collective_wait_us') or 0) / 1000:.2f}",
                "-" if overlap is None else f"{overlap:.1f}",
            ]
        )
    return out


def _held(s: dict) -> str:
    """ "slower in 3 of 10 steps by more than 1.20 ms" (the straggler rule's evidence), or ""."""
    held, steps = s.get("steps_held"), s.get("matched_steps")
    if not isinstance(held, list) or not steps:
        return ""
    threshold_ms = float(s.get("threshold_us") or 0) / 1000
    return f"slower in {len(held)} of {steps} steps by more than {threshold_ms:.2f} ms"


def straggler_lines(data: dict) -> list[str]:
    lines = []
    for s in data.get("stragglers") or []:
        held, noise = _held(s), s.get("noise_us")
        lines.append(
            f"rank {s['rank']} is a straggler: {s['excess_us'] / 1000:.2f} ms per step more than the "
            f"other ranks outside collectives ({s['excess_pct']:.1f}% of the step), mostly "
            f"{str(s['category']).removesuffix('_us')}"
            + (f"; {held}" if held else "")
            + (f" (the others' noise: {noise / 1000:.2f} ms)" if isinstance(noise, (int, float)) else "")
        )
    return lines


def rank_summary_lines(data: dict) -> list[str]:
    cr = data.get("cross_rank") or {}
    if len(data.get("ranks") or []) == 1 and not cr.get("missing_ranks") and (cr.get("world_size") or 1) > 1:
        return [str(cr.get("note") or "this is one rank of a job: rank 0's report holds every rank")]
    lines = [
        f"{len(data.get('ranks') or [])} of {cr.get('world_size', '?')} ranks, "
        f"{cr.get('matched_steps', 0)} steps matched by number, load imbalance "
        f"{cr.get('imbalance_pct', 0):.1f}% of the step"
    ]
    if cr.get("missing_ranks") or cr.get("skipped_files"):
        missing = ", ".join(map(str, cr.get("missing_ranks") or [])) or "none known"
        lines.append(f"missing ranks: {missing}" + (f" ({cr['note']})" if cr.get("note") else ""))
    lines += straggler_lines(data)
    if not data.get("stragglers"):
        slow = cr.get("slowest_unnamed")
        if isinstance(slow, dict) and slow.get("excess_us", 0) > 0 and slow.get("steps_held"):
            # Slower, but not in a clear majority of steps by more than the noise: said as it is.
            lines.append(
                f"no straggler named: rank {slow['rank']} is {slow['excess_us'] / 1000:.2f} ms per step "
                f"above the others outside collectives, but {_held(slow)} only (a straggler is "
                "slower in at least 2 of 3 steps)"
            )
        else:
            lines.append("no straggler: no rank spends longer outside collectives than the others' noise")
    return lines


def summary_line(report) -> str:
    """One line of a report: its steps, the mean step and the three largest shares of it (what each
    rank of a job prints under a launcher, where every rank's output lands in one terminal)."""
    numbers = [s["step"] for s in report.steps]
    if not numbers:
        return "no complete step recorded"
    avg = report.average
    shares = sorted(
        ((avg.get(f"{k}_pct") or 0.0, name) for k, name in CATEGORIES if avg.get(f"{k}_pct")), reverse=True
    )
    top = ", ".join(f"{name} {pct:.1f}%" for pct, name in shares[:3])
    return f"steps {numbers[0]}..{numbers[-1]}, mean step {avg.get('total_us', 0.0) / 1000.0:.2f} ms" + (
        f" ({top})" if top else ""
    )


def merged_timeline(data: dict) -> Optional[dict]:
    """For a report of several ranks: how to get every rank on one timeline (``gpuprof export``) and,
    when the report's trace sits in a job folder's ``rank<N>/`` (gpuprof run, gpuprof.save), where
    that writes it: {"command", "path" or None}."""
    if len(data.get("ranks") or []) < 2:
        return None
    import os
    import shlex
    from pathlib import PurePath

    from ...traces.export import MERGED_TIMELINE_NAME

    trace = (data.get("source") or {}).get("trace_path")
    parent = PurePath(trace).parent if trace else None
    job = str(parent.parent) if parent is not None and re.fullmatch(r"rank\d+", parent.name) else None
    return {
        "command": f"gpuprof export {shlex.quote(job) if job else 'DIR'} --merged",
        "path": os.path.join(job, MERGED_TIMELINE_NAME) if job else None,
    }
