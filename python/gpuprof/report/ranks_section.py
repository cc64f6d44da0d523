"""The cross-rank section of the text, Markdown and HTML reports (distributed issue): one row per
rank and the stragglers. Shown when the report holds more than one rank or names missing ranks.
Numbers come from the report (python/gpuprof/analysis/ranks.py computed them); this only formats."""

from __future__ import annotations

HEADERS = ["rank", "host", "device", "steps", "step ms", "outside collectives ms",
           "waiting in collectives ms", "comm/compute overlap %"]


def shown(data: dict) -> bool:
    return len(data.get("ranks") or []) > 1 or bool((data.get("cross_rank") or {}).get("missing_ranks"))


def rows(data: dict) -> list[list[str]]:
    out = []
    for r in data.get("ranks") or []:
        avg = r.get("average") or {}
        overlap = r.get("comm_comp_overlap_pct")
        out.append([str(r.get("rank")), str(r.get("hostname", "")), str(r.get("device", "")),
                    str(r.get("steps", "")), f"{(avg.get('total_us') or 0) / 1000:.2f}",
                    f"{(r.get('busy_us') or 0) / 1000:.2f}", f"{(r.get('collective_wait_us') or 0) / 1000:.2f}",
                    "-" if overlap is None else f"{overlap:.1f}"])
    return out


def straggler_lines(data: dict) -> list[str]:
    lines = []
    for s in data.get("stragglers") or []:
        lines.append(f"rank {s['rank']} is a straggler: {s['excess_us'] / 1000:.2f} ms per step more than the "
                     f"median rank outside collectives ({s['excess_pct']:.1f}% of the step), mostly "
                     f"{str(s['category']).removesuffix('_us')}")
    return lines


def summary_lines(data: dict) -> list[str]:
    cr = data.get("cross_rank") or {}
    lines = [f"{len(data.get('ranks') or [])} of {cr.get('world_size', '?')} ranks, "
             f"{cr.get('matched_steps', 0)} steps matched by number, load imbalance "
             f"{cr.get('imbalance_pct', 0):.1f}% of the step"]
    if cr.get("missing_ranks"):
        lines.append(f"missing ranks: {', '.join(map(str, cr['missing_ranks']))}"
                     + (f" ({cr['note']})" if cr.get("note") else ""))
    lines += straggler_lines(data)
    if not data.get("stragglers"):
        lines.append("no straggler: every rank spends about the same time outside collectives")
    return lines


def render_text(console, data: dict) -> None:
    if not shown(data):
        return
    from .sections import printable
    from .term import Table

    table = Table("Ranks")
    for i, h in enumerate(HEADERS):
        table.add_column(h, justify="left" if i in (1, 2) else "right")
    for row in rows(data):   # host names come from the traces: shown inert
        table.add_row(*map(printable, row))
    console.table(table)
    for line in summary_lines(data):
        console.print(printable(line))


def markdown_lines(data: dict) -> list[str]:
    if not shown(data):
        return []
    from .markdown import md_escape, table

    out = ["### Ranks", ""]
    out += table(HEADERS, [[md_escape(c) for c in row] for row in rows(data)],
                 ["---:", "---", "---", "---:", "---:", "---:", "---:", "---:"])
    out.append("")
    out += [f"- {md_escape(line)}" for line in summary_lines(data)]
    out.append("")
    return out


def html_context(data: dict) -> dict:
    return {"ranks_shown": shown(data), "ranks_headers": HEADERS, "ranks_rows": rows(data),
            "ranks_summary": summary_lines(data) if shown(data) else []}
