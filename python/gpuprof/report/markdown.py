"""Markdown rendering: the terminal summary for CI comments and GitHub job summaries."""

from __future__ import annotations

import re

from . import input_pipeline_view as pv
from . import sections as sec

TOP_ROWS = 10
MAX_STEP_ROWS = 40
TOP_MODULES = 15  # the heaviest modules, as an indented tree


def md_escape(text: object) -> str:
    """Text safe inside a Markdown table cell: no column breaks, no HTML, no stray emphasis."""
    # Line breaks become spaces; other control characters (ESC), C1 and bidi overrides show as escapes.
    s = (
        sec.printable(str(text).replace("\n", " ").replace("\r", " "))
        .replace("\\", "\\\\")
        .replace("|", "\\|")
    )
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "*_`[]":
        s = s.replace(ch, "\\" + ch)
    return s


def md_code(text: object) -> str:
    """Any string from outside (a path, a data set's name) as one inline code span that nothing in
    it can leave: control characters (a newline would let the rest start a heading or raw HTML)
    are shown escaped, and the fence is longer than any run of backticks inside."""
    s = sec.printable(text)  # control characters, C1 and bidi overrides as their escapes
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or longest else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def table(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _rows_table(rows: list[dict], limit: int) -> list[str]:
    rows = sec.sorted_rows(rows)
    cols = sec.columns(rows, limit=7)
    return table(
        [sec.header(c) for c in cols],
        [[md_escape(sec.fmt(c, r.get(c))) for c in cols] for r in rows[:limit]],
        [":--" if c in sec.TEXT_COLUMNS else "--:" for c in cols],
    )


def _title(report, title: str, top: int) -> list[str]:
    out = [f"## {md_escape(title)}", ""]
    src = report.source
    if src.get("path"):
        out += [f"Source: {md_code(src['path'])}", ""]
    if src.get("trace_path"):
        out += [
            f"Trace: {md_code(src['trace_path'])}, open it in [Perfetto]({sec.PERFETTO_URL}) "
            '("Open trace file") or in `chrome://tracing`',
            "",
        ]
    out.append(f"**{len(report.steps)} steps, mean step time {report.average['total_us'] / 1000.0:.3f} ms**")
    out.append("")
    for warning in sec.warning_lines(report.data):
        out += [f"> **warning:** {md_escape(warning)}", ""]
    span_end = sec.span_end_note(report.data)
    if span_end:
        out += [md_escape(span_end), ""]
    compiled = report.data.get("compiled")
    if isinstance(compiled, dict):  # a live span's recompilations and graph breaks, one line each
        from ..analysis.compiled import dynamo_lines

        for line in dynamo_lines(compiled):
            out += [f"> **torch.compile:** {md_escape(line)}", ""]
    return out


def _steps(report, title: str, top: int) -> list[str]:
    if not report.steps:
        return ["No complete step was recorded.", ""]
    avg = report.average
    shown = sec.shown_categories(report)
    out = table(
        ["category", "mean (us)", "% of step"],
        [[name, f"{avg[f'{k}_us']:,.1f}", f"{avg[f'{k}_pct']:.1f}"] for k, name in shown],
        [":--", "--:", "--:"],
    )
    out.append("")
    steps = report.steps
    if len(steps) > MAX_STEP_ROWS:  # job summaries have a size limit: first and last steps
        half = MAX_STEP_ROWS // 2
        steps = steps[:half] + [None] + steps[-half:]
    out += ["<details><summary>Per step</summary>", ""]
    out += table(
        ["step", "total (us)"] + [f"{n} (us)" for _, n in shown],
        [
            [str(s["step"]), f"{s['total_us']:,.0f}"] + [f"{s[f'{k}_us']:,.0f}" for k, _ in shown]
            if s is not None
            else ["…"] * (len(shown) + 2)
            for s in steps
        ],
        ["--:"] * (len(shown) + 2),
    )
    out += ["", "</details>", ""]
    return out


def _devices(report, title: str, top: int) -> list[str]:
    devices = sec.devices(report.data)
    if not devices:
        return []
    fields = [(k, n) for k, n in sec.DEVICE_FIELDS if any(d.get(k) is not None for d in devices)]
    out = ["### GPU summary", ""]
    out += table(
        ["GPU"] + [n for _, n in fields],
        [
            [md_escape(f"{d.get('id', '?')} {d.get('name') or ''}".strip())]
            + [
                sec.fmt(k, d.get(k)) + ("%" if k.endswith("_pct") and d.get(k) is not None else "")
                for k, _ in fields
            ]
            for d in devices
        ],
        [":--"] + ["--:"] * len(fields),
    )
    out.append("")
    return out


def _flops(report, title: str, top: int) -> list[str]:
    lines = sec.flops_lines(report.data)
    if not lines:
        return []
    out = ["### FLOPs", ""] + [f"- {md_escape(line)}" for line in lines] + [""]
    rows = sec.roofline(report.data)[:top]
    if rows:
        out += table(
            ["operator", "input shapes", "class", "FLOPs", "time ms", "TFLOP/s", "FLOP/byte", "bound"],
            [
                [
                    md_code(r.get("name")),
                    md_code(r.get("input_shapes")) if r.get("input_shapes") else "",
                    md_escape(r.get("flop_class") or ""),
                    sec.fmt("flops", r.get("flops")),
                    f"{(r.get('time_us') or 0) / 1000:.3f}",
                    f"{r.get('achieved_tflops') or 0:.4g}",
                    "" if r.get("intensity_flop_per_byte") is None else f"{r['intensity_flop_per_byte']:.3g}",
                    md_escape(r.get("bound") or ""),
                ]
                for r in rows
            ],
            [":--", ":--", ":--", "--:", "--:", "--:", "--:", ":--"],
        )
        out.append("")
    return out


def _out_of_memory(report, title: str, top: int) -> list[str]:
    lines = sec.out_of_memory_lines(report.data)
    if not lines:
        return []
    return ["### Out of memory", ""] + [f"- {md_escape(line.strip())}" for line in lines] + [""]


# energy per step (docs/metrics.md, "Energy"), under the GPU summary; nothing on a CPU report
def _energy(report, title: str, top: int) -> list[str]:
    lines = sec.energy_lines(report.data)
    return ["### Energy", ""] + [f"- {md_escape(line)}" for line in lines] + [""] if lines else []


# the chain that set each step's length (docs/metrics.md, "Critical path")
def _critical_path(report, title: str, top: int) -> list[str]:
    lines = sec.critical_path_lines(report.data)
    return (
        ["### Critical path", ""] + [f"- {md_escape(line.strip())}" for line in lines] + [""] if lines else []
    )


def _memory(report, title: str, top: int) -> list[str]:
    mem = sec.memory_lines(report.data) + [line.strip() for line in sec.memory_view_lines(report.data)]
    return ["### Memory", ""] + [f"- {md_escape(line)}" for line in mem] + [""] if mem else []


# ---- the input pipeline (report/input_pipeline_view.py) -------------------------------------------------
def _input_pipeline(report, title: str, top: int) -> list[str]:
    ip = pv.pipeline_of(report.data)
    if ip is None:
        return []
    out = ["### Input pipeline", "", md_escape(pv.headline(ip)), ""]
    rows = pv.stages(ip)
    if rows:
        # One batch's stages as a bar of 40 cells, then the times.
        bar = "".join(
            {"fetch": "L", "transform": "T", "collate": "C", "pin": "P", "transfer": "X"}[r["key"]]
            * max(1, int(round(r["pct"] / 100.0 * 40)))
            for r in rows
        )
        out += [f"`{bar}`", ""]
        out += table(
            ["stage", "runs in", "mean per batch", "share"],
            [[r["label"], r["where"], pv.ms(r["us"]), f"{r['pct']:.0f}%"] for r in rows],
            [":--", ":--", "--:", "--:"],
        )
        out.append("")
    out += [f"- {md_escape(line)}" for line in [pv.stage_line(ip)] + pv.detail_lines(ip)]
    out.append("")
    return out


def _recommendations(report, title: str, top: int) -> list[str]:
    items = sec.ranked_advice(report.data)
    if not items:
        return []
    out = ["### Recommendations", ""]
    for i, a in enumerate(items, 1):
        bound = a.get("saving_bound_pct")
        head = f"{i}. **{md_escape(a.get('title') or a.get('rule') or 'recommendation')}**"
        extras = []
        if a.get("rule"):
            extras.append(md_code(a["rule"]))
        if isinstance(bound, (int, float)):
            extras.append(f"up to {bound:.0f}% of the step")
        if a.get("confidence"):
            extras.append(f"confidence {md_escape(a['confidence'])}")
        out.append(head + (" (" + ", ".join(extras) + ")" if extras else ""))
        for line in sec.evidence_lines(a.get("evidence")):
            out.append(f"   - Evidence: {md_escape(line)}")
        if a.get("fix"):
            out.append(f"   - Fix: {md_escape(a['fix'])}")
        if a.get("docs"):
            out.append(f"   - Docs: {md_escape(a['docs'])}")
    out.append("")
    return out


def _ranks(report, title: str, top: int) -> list[str]:
    data = report.data
    if not sec.ranks_shown(data):
        return []
    out = ["### Ranks", ""]
    out += table(
        sec.RANK_HEADERS,
        [[md_escape(c) for c in row] for row in sec.rank_rows(data, sec.RANK_ROWS_SHOWN)],
        ["---:", "---", "---", "---:", "---:", "---:", "---:", "---:"],
    )
    out.append("")
    left_out = sec.ranks_left_out_line(data, sec.RANK_ROWS_SHOWN)
    if left_out:
        out += [left_out, ""]
    out += [f"- {md_escape(line)}" for line in sec.rank_summary_lines(data)]
    out.append("")
    return out


def _tables(report, title: str, top: int) -> list[str]:
    out: list[str] = []
    for key, name in sec.TABLES:
        rows = sec.section(report.data, key)
        if rows:
            out += [f"### {name} (top {min(top, len(rows))} of {len(rows)})", ""]
            out += _rows_table(rows, top)
            out.append("")
    for _, name, rows in sec.compiled_tables(report.data):
        out += [f"### {name} (top {min(top, len(rows))} of {len(rows)})", ""]
        out += _rows_table(rows, top)
        out.append("")
    return out


def _modules(report, title: str, top: int) -> list[str]:
    rows, left_out = sec.module_tree(report.data, TOP_MODULES)
    if not rows:
        return []
    device = any(r.get("device_total_us") for r in rows)
    heading = (
        f"### Modules (the {len(rows)} heaviest of {len(rows) + left_out})" if left_out else "### Modules"
    )
    headers = ["module", "type", "calls", "host total (us)", "host self (us)"]
    headers += ["device total (us)"] if device else []
    flops = any(r.get("flops") for r in rows)  # FLOPs: where the report counted any in a module
    headers += ["FLOPs"] if flops else []
    headers += ["% of step"]
    body = []
    for r in rows:
        # Indented with non-breaking spaces: a tree in a table cell, whatever the Markdown viewer.
        cells = [
            "\u00a0\u00a0" * int(r.get("depth") or 0) + md_escape(r.get("path") or "(model)"),
            md_escape(r.get("type") or ""),
            sec.fmt("calls", r.get("calls")),
            sec.fmt("host_total_us", r.get("host_total_us")),
            sec.fmt("host_self_us", r.get("host_self_us")),
        ]
        cells += [sec.fmt("device_total_us", r.get("device_total_us"))] if device else []
        cells += [sec.fmt("flops", r.get("flops"))] if flops else []
        cells.append("" if r["share_pct"] is None else f"{r['share_pct']:.1f}")
        body.append(cells)
    out = [heading, "", "Forward and backward: a backward op counts in the module whose forward made it.", ""]
    out += table(headers, body, [":--", ":--"] + ["--:"] * (len(headers) - 2))
    out.append("")
    compiled = sec.compiled_modules_line(report.data)
    if compiled:
        out += [md_escape(compiled), ""]
    return out


def _settings(report, title: str, top: int) -> list[str]:
    out: list[str] = []
    for dl in report.dataloaders:
        out.append(
            f"DataLoader {md_code(dl.get('dataset') or '?')}: "
            f"batch_size={dl.get('batch_size')}, num_workers={dl.get('num_workers')}, "
            f"pin_memory={dl.get('pin_memory')}, persistent_workers={dl.get('persistent_workers')}"
        )
        out.append("")
    return out


def _footer(report, title: str, top: int) -> list[str]:
    data, c = report.data, report.counts
    note = f"{c.get('events', 0):,} events"
    if c.get("dropped"):
        note += f", {c['dropped']:,} dropped"
    return [
        f"<sub>{note}; gpuprof {md_escape(data.get('gpuprof_version', ''))}, "
        f"schema {data.get('schema_version')}</sub>"
    ]


class MarkdownRenderer:
    """The summary as Markdown, for CI comments and GitHub job summaries."""

    name = "markdown"
    file_end = ""
    # The sections, in the order they are written: each returns its lines, or none.
    sections = (
        _title,
        _out_of_memory,
        _steps,
        _input_pipeline,
        _devices,
        _energy,
        _critical_path,
        _flops,
        _memory,
        _recommendations,
        _ranks,
        _tables,
        _modules,
        _settings,
        _footer,
    )

    def render(self, report, *, title: str = "gpuprof report", top: int = TOP_ROWS) -> str:
        out: list[str] = []
        for section in self.sections:
            out += section(report, title, top)
        return "\n".join(out) + "\n"


MARKDOWN = MarkdownRenderer()


__all__ = ["MARKDOWN", "md_escape", "md_code", "table"]
