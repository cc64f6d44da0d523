"""Terminal rendering: ``print(report)``. Colour only when writing to a terminal.

Imports the report model and the standard library only (``term``: no rich, no torch), so
``gpuprof analyze`` and ``gpuprof report`` start fast.
"""

from __future__ import annotations

import sys
from typing import Optional

from . import input_pipeline_view as pv
from . import sections as sec
from .sections import CATEGORIES
from .term import Console, Table

_COLORS = {
    "kernel": "green",
    "memcpy": "cyan",
    "memset": "blue",
    "communication": "magenta",
    "runtime": "yellow",
    "dataloader": "red",
    "cpu_exec": "bright_blue",
    "other": "white",
}

# Rows shown per table in the terminal; the HTML report has them all.
TOP_ROWS = 5
TOP_MODULES = 10  # the heaviest modules, drawn as a tree
TOP_ADVICE = 3
MAX_STEP_ROWS = 20


def _bar(avg: dict, width: int) -> list:
    bar = []
    for key, _ in CATEGORIES:
        n = int(round(avg.get(f"{key}_pct", 0.0) / 100.0 * width))
        if n:
            bar.append(("█" * n, _COLORS[key]))
    return bar


# Columns that matter most in a terminal table, first kept when the line is short.
_PRIORITY = [
    "name",
    "calls",
    "count",
    "host_total_us",
    "device_total_us",
    "total_us",
    "host_self_us",
    "device_self_us",
    "self_us",
    "mean_us",
    "total_bytes",
    "bytes",
    "kind",
    "device",
    "stream",
]
_MIN_NAME = 24


def fit_columns(cols: list[str], headers: dict[str, str], rows: list[dict], width: int) -> list[str]:
    """The columns that fit in ``width``: the name (at least _MIN_NAME wide, elided beyond) and the
    numbers that matter most (_PRIORITY order); the rest give their room away. Order is kept."""

    def need(c: str) -> int:
        return max([len(headers[c])] + [len(sec.fmt(c, r.get(c))) for r in rows]) + 2

    ranked = sorted(cols, key=lambda c: _PRIORITY.index(c) if c in _PRIORITY else len(_PRIORITY))
    kept: list[str] = []
    used = 0
    for c in ranked:
        w = _MIN_NAME + 2 if c == "name" else need(c)
        if used + w - 2 <= width or not kept:
            kept.append(c)
            used += w
    return [c for c in cols if c in kept]


def _table(console: Console, title: str, rows: list[dict], limit: int) -> None:
    if not rows:
        return
    rows = sec.sorted_rows(rows)
    shown = rows[:limit]
    # Columns with nothing to say in the shown rows (no shapes recorded, say) give their room away.
    cols = [c for c in sec.columns(rows) if any(r.get(c) not in (None, "", [], ()) for r in shown)]
    headers = {c: sec.header(c) for c in cols}
    cols = fit_columns(cols, headers, shown, console.width)
    t = Table(f"{title} (top {min(limit, len(rows))} of {len(rows)})")
    # Numbers and their headers are never cut; the name gets what is left and is elided.
    # Columns are two spaces apart.
    numbers_width = sum(
        max([len(headers[c])] + [len(sec.fmt(c, r.get(c))) for r in shown]) + 2 for c in cols if c != "name"
    )
    name_width = max(_MIN_NAME, console.width - numbers_width)
    for c in cols:
        text_col = c in sec.TEXT_COLUMNS
        t.add_column(
            headers[c], justify="left" if text_col else "right", max_width=name_width if c == "name" else None
        )
    for r in shown:
        t.add_row(*(sec.fmt(c, r.get(c)) for c in cols))
    console.table(t)


def _gpu_summary(console: Console, devices: list[dict]) -> None:
    """One row per metric, one column per GPU: narrow enough for a terminal with 8 GPUs."""
    if not devices:
        return
    t = Table("GPU summary")
    t.add_column("")
    for d in devices:
        t.add_column(
            sec.printable(f"GPU {d.get('id', '?')} {d.get('name') or ''}".strip()),
            justify="right",
            max_width=28,
        )
    for key, name in sec.DEVICE_FIELDS:
        if any(d.get(key) is not None for d in devices):
            t.add_row(
                name,
                *(
                    sec.fmt(key, d.get(key))
                    + ("%" if key.endswith("_pct") and d.get(key) is not None else "")
                    for d in devices
                ),
            )
    console.table(t)


def _advice(console: Console, data: dict, limit: int) -> None:
    items = sec.ranked_advice(data)
    if not items:
        return
    console.print((f"Top recommendations ({min(limit, len(items))} of {len(items)})", "bold"))
    for i, a in enumerate(items[:limit], 1):
        bound = a.get("saving_bound_pct")
        head = [f"{i}. ", (sec.printable(a.get("title") or a.get("rule") or "recommendation"), "bold")]
        if isinstance(bound, (int, float)):
            head.append((f"  (up to {bound:.0f}% of the step", "dim"))
            head.append(
                (f", confidence {sec.printable(a['confidence'])})" if a.get("confidence") else ")", "dim")
            )
        console.print(*head, indent=3)
        # Long lines wrap under their text: "   evidence: " and "   fix: " stay in the margin.
        for line in sec.evidence_lines(a.get("evidence")):
            console.print("   evidence: " + sec.printable(line), indent=13)
        if a.get("fix"):
            console.print("   fix: " + sec.printable(a["fix"]), indent=8)
        if a.get("docs"):
            console.print(
                f"   why: {sec.printable(a['docs'])} (explained inside the HTML report too)",
                style="dim",
                indent=8,
            )


def _title(console: Console, report) -> None:
    data, avg, src = report.data, report.average, report.source
    title = [("gpuprof step breakdown", "bold")]
    if src.get("path"):
        title.append(f": {sec.printable(src['path'])}")  # outside strings: escaped
    console.print(*title)
    console.print(f"{len(report.steps)} steps, mean step time {avg['total_us'] / 1000.0:.3f} ms")
    if isinstance(src.get("note"), str):  # a partial span: which steps, and the complete one
        console.print(sec.printable(src["note"]), style="yellow")
    for warning in sec.warning_lines(data):
        console.print("warning: " + sec.printable(warning), style="yellow", indent=9)
    compiled = data.get("compiled")
    if isinstance(compiled, dict) and isinstance(compiled.get("note"), str):
        console.print(sec.printable(compiled["note"]))
    note = sec.trace_note(data)
    if note:
        console.print(sec.printable(note))
    span_end = sec.span_end_note(data)
    if span_end:
        console.print(span_end, style="dim")


def _collection_notes(console: Console, report) -> None:
    """Why the GPU records or the operators may be missing or incomplete."""
    meta = report.metadata
    gpu_note = meta.get("gpu_collection", "")
    if gpu_note.startswith("off:"):
        console.print(f"GPU collection {sec.printable(gpu_note)}", style="yellow")
    for key in ("gpu_collection_error", "gpu_collection_warning"):
        if meta.get(key):
            console.print(f"GPU collection: {sec.printable(meta[key])}", style="yellow")
    host_note = meta.get("host_ops", "")
    if host_note.startswith("off:"):
        console.print(f"Operators {sec.printable(host_note)}", style="yellow")
    module_note = meta.get("module_view", "")
    if module_note.startswith("incomplete:"):  # asked for, and cut short
        console.print(f"Module view {sec.printable(module_note)}", style="yellow")


def _breakdown_bar(console: Console, report) -> None:
    if not report.steps:
        return
    avg = report.average
    console.print(*_bar(avg, max(10, console.width - 20)))
    legend = []
    for key, name in CATEGORIES:
        if avg.get(f"{key}_pct", 0) > 0:
            legend += [("■ ", _COLORS[key]), f"{name} {avg[f'{key}_pct']:.1f}%  "]
    console.print(*legend)


def _steps(console: Console, report) -> None:
    if not report.steps:
        console.print("No complete step was recorded.")
        return
    avg = report.average
    table = Table()
    table.add_column("step", justify="right")
    table.add_column("total us", justify="right")
    shown = sec.shown_categories(report)
    for _, name in shown:
        table.add_column(f"{name} us", justify="right")
    steps = report.steps
    if len(steps) > MAX_STEP_ROWS:  # long spans: the first and last steps, the mean below
        half = MAX_STEP_ROWS // 2
        steps = steps[:half] + [None] + steps[-half:]
    for s in steps:
        if s is None:
            table.add_row("…", *([""] * (len(shown) + 1)))
            continue
        table.add_row(str(s["step"]), f"{s['total_us']:,.0f}", *(f"{s[f'{k}_us']:,.0f}" for k, _ in shown))
    table.add_row(
        "mean", f"{avg['total_us']:,.0f}", *(f"{avg[f'{k}_us']:,.0f}" for k, _ in shown), style="bold"
    )
    table.add_row("%", "100", *(f"{avg[f'{k}_pct']:.1f}" for k, _ in shown), style="dim")
    console.table(table)


def _ranks(console: Console, report) -> None:
    data = report.data
    if not sec.ranks_shown(data):
        return
    table = Table("Ranks")
    for i, h in enumerate(sec.RANK_HEADERS):
        table.add_column(h, justify="left" if i in (1, 2) else "right")
    for row in sec.rank_rows(data, sec.RANK_ROWS_SHOWN):  # host names come from the traces: inert
        table.add_row(*map(sec.printable, row))
    console.table(table)
    left_out = sec.ranks_left_out_line(data, sec.RANK_ROWS_SHOWN)
    if left_out:
        console.print(left_out)
    for line in sec.rank_summary_lines(data):
        console.print(sec.printable(line))


def _collectives(console: Console, report) -> None:
    _table(console, "Collectives", sec.section(report.data, "collectives"), TOP_ROWS)


def _devices(console: Console, report) -> None:
    _gpu_summary(console, sec.devices(report.data))


# the chain that set each step's length (docs/metrics.md, "Critical path")
def _critical_path(console: Console, report) -> None:
    lines = sec.critical_path_lines(report.data, name_chars=96)
    if lines:
        console.print("Critical path", style="bold")
    for line in lines:
        console.print(line)


def _flops(console: Console, report) -> None:
    for line in sec.flops_lines(report.data):
        console.print(line)


def _out_of_memory(console: Console, report) -> None:
    lines = sec.out_of_memory_lines(report.data)
    if lines:
        console.print(lines[0], style="red")
        for line in lines[1:]:
            console.print(line)


# energy per step (docs/metrics.md, "Energy"), under the GPU summary; nothing on a CPU report
def _energy(console: Console, report) -> None:
    for line in sec.energy_lines(report.data):
        console.print(line)


def _memory(console: Console, report) -> None:
    for line in sec.memory_lines(report.data):
        console.print(line)
    for line in sec.memory_view_lines(report.data):  # operator names come from traces: printable
        console.print(line, style="yellow" if line.startswith("Memory grows") else None)


def out_of_memory_summary(report) -> str:
    """The out-of-memory section as plain lines (what a failing session prints on stderr)."""
    return "\n".join(sec.printable(line) for line in sec.out_of_memory_lines(report.data))


def _top_tables(console: Console, report) -> None:
    for key, name in sec.TERMINAL_TABLES:
        _table(console, name, sec.section(report.data, key), TOP_ROWS)
    for _, name, rows in sec.compiled_tables(report.data):
        _table(console, name, rows, TOP_ROWS)


def _modules(console: Console, report) -> None:
    """The heaviest modules as an indented tree: calls, host and device time, share of the step."""
    rows, left_out = sec.module_tree(report.data, TOP_MODULES)
    if not rows:
        return
    device = any(r.get("device_total_us") for r in rows)
    flops = any(r.get("flops") for r in rows)  # FLOPs: where the report counted any in a module
    t = Table(
        f"Modules (the {len(rows)} heaviest of {len(rows) + left_out}, forward and backward)"
        if left_out
        else "Modules (forward and backward)"
    )
    t.add_column("module", max_width=max(24, console.width - 70))
    for header in (
        ["calls", "host total us", "host self us"]
        + (["device total us"] if device else [])
        + (["FLOPs"] if flops else [])
        + ["% of step"]
    ):
        t.add_column(header, justify="right")
    for r in rows:
        cells = [
            "  " * int(r.get("depth") or 0) + sec.printable(r["label"]),
            sec.fmt("calls", r.get("calls")),
            sec.fmt("host_total_us", r.get("host_total_us")),
            sec.fmt("host_self_us", r.get("host_self_us")),
        ]
        if device:
            cells.append(sec.fmt("device_total_us", r.get("device_total_us")))
        if flops:
            cells.append(sec.fmt("flops", r.get("flops")))
        cells.append("" if r["share_pct"] is None else f"{r['share_pct']:.1f}")
        t.add_row(*cells)
    console.table(t)
    compiled = sec.compiled_modules_line(report.data)
    if compiled:
        console.print(sec.printable(compiled))


def _recommendations(console: Console, report) -> None:
    _advice(console, report.data, TOP_ADVICE)


def _settings(console: Console, report) -> None:
    for dl in report.dataloaders:
        console.print(
            f"DataLoader ({sec.printable(dl.get('dataset') or '?')}, "
            f"{dl.get('dataset_length') or '?'} samples): "
            f"batch_size={dl.get('batch_size')}, num_workers={dl.get('num_workers')}, "
            f"pin_memory={dl.get('pin_memory')}, prefetch_factor={dl.get('prefetch_factor')}, "
            f"persistent_workers={dl.get('persistent_workers')}"
        )
    host = report.host
    if host.get("cpus_available"):
        console.print(f"CPUs available to the process: {host['cpus_available']} (of {host.get('cpu_count')})")


def _counts(console: Console, report) -> None:
    c = report.counts
    line = f"events: {c['events']:,}"
    if c.get("dropped"):
        line += f", dropped: {c['dropped']:,} (raise max_events to keep them)"
    if c.get("skipped"):
        line += f", skipped: {c['skipped']:,}"
    console.print(line, style="dim")


# ---- the input pipeline (report/input_pipeline_view.py) -------------------------------------------------
def _input_pipeline(console: Console, report) -> None:
    ip = pv.pipeline_of(report.data)
    if ip is None:
        return
    console.print(("Input pipeline", "bold"), ": " + sec.printable(pv.headline(ip)))
    rows = pv.stages(ip)
    if rows:
        width = max(10, console.width - 20)
        bar = [("█" * max(1, int(round(r["pct"] / 100.0 * width))), pv.TERM_COLORS[r["key"]]) for r in rows]
        console.print(*bar)
        # The bar's legend is the batch's stages, said once.
        legend = ["one batch: "]
        for i, r in enumerate(rows):
            legend += [" + " if i else "", ("■ ", pv.TERM_COLORS[r["key"]]), f"{r['label']} {pv.ms(r['us'])}"]
        console.print(*legend, pv.slowest(ip), indent=2)
    else:
        console.print(sec.printable(pv.stage_line(ip)), indent=2)
    for line in pv.detail_lines(ip):  # exception messages and class names: shown inert
        console.print("  " + sec.printable(line), indent=4)


class TextRenderer:
    """The terminal report (``print(report)``); colour only when writing to a terminal."""

    name = "text"
    file_end = ""
    # The sections, in the order they are printed: each writes its lines, or nothing.
    sections = (
        _title,
        _out_of_memory,
        _collection_notes,
        _breakdown_bar,
        _steps,
        _input_pipeline,
        _ranks,
        _collectives,
        _devices,
        _energy,
        _critical_path,
        _flops,
        _memory,
        _top_tables,
        _modules,
        _recommendations,
        _settings,
        _counts,
    )

    def render(self, report, *, color: Optional[bool] = None, width: Optional[int] = None) -> str:
        if color is None:
            color = sys.stdout.isatty()
        if width is None:
            # The terminal's width when there is one; 120 columns in files and CI logs.
            width = 120
            if sys.stdout.isatty():
                import shutil

                width = shutil.get_terminal_size((120, 24)).columns
            width = max(80, min(width, 200))
        console = Console(width=width, color=color)
        for section in self.sections:
            section(console, report)
        return console.text()


TEXT = TextRenderer()
