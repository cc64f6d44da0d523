"""One self-contained HTML report: inline CSS, server-side SVG charts, a few lines of inline JS to
sort tables. No CDN, no network, no server: it opens from a shared filesystem and in a notebook.

Every string from a trace or a model goes through Jinja2's autoescaping; the charts are geometry
computed here and drawn by the template, so no name is ever pasted into markup by hand.
"""

from __future__ import annotations

import json
import math
import os
from typing import Optional

from . import input_pipeline_view as pv
from . import sections as sec
from .series_chart import SERIES_COLORS  # noqa: F401 (the report's palette, named here too)
from .series_chart import time_series_charts as _time_series_charts
from .step_chart import CHART_H, CHART_W, PAD_B, PAD_L, PAD_R, PAD_T, step_chart  # noqa: F401 (the geometry too)

CATEGORY_COLORS = {
    "kernel": "#2e9e44",
    "memcpy": "#17a2b8",
    "memset": "#0b3d91",
    "communication": "#a55eea",
    "runtime": "#f7b731",
    "dataloader": "#eb3b5a",
    "cpu_exec": "#4b7bec",
    "other": "#a5b1c2",
}
# The critical path's causes (sections.PATH_CAUSES), for its band over the timeline.
PATH_CAUSE_COLORS = {
    "cpu_bound": "#4b7bec",
    "data_loading": "#eb3b5a",
    "gpu_compute_bound": "#2e9e44",
    "gpu_communication_bound": "#a55eea",
    "gpu_kernel_kernel_overhead": "#fa8231",
    "gpu_kernel_launch_overhead": "#f7b731",
}

MAX_MARKED_STEPS = 50  # step boundaries drawn on the memory curve up to this many steps

_env = None


def _environment():
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(
            loader=jinja2.PackageLoader("gpuprof.report", "templates"),
            autoescape=True,  # every name from a trace is data, never markup
            trim_blocks=True,
            lstrip_blocks=True,
        )
        _env.filters["fmt"] = lambda v, col: sec.fmt(col, v)
        _env.filters["sortval"] = sec.sort_value
        _env.filters["header"] = sec.header
        _env.filters["shown"] = sec.shown
        # A metadata value that is an object (distributedInfo) as the compact JSON a trace holds.
        _env.filters["meta"] = lambda v: json.dumps(v, separators=(",", ":")) if isinstance(v, dict) else v
    return _env


# FLOPs: the roofline chart
ROOF_W, ROOF_H = 760, 320
ROOF_COLORS = {"matmul": "#3867d6", "other": "#fa8231"}
ROOFLINE_POINTS = 20


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten from below ``lo`` to above ``hi``."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [10.0**k for k in range(a, max(b, a + 1) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-3 <= v < 1e5 else f"1e{int(round(math.log10(v)))}"


def _roofline_chart(data: dict) -> Optional[dict]:
    """The top operators' achieved FLOP/s against their arithmetic intensity, on log-log axes, under
    the memory roof (bandwidth x intensity) and the compute roof (the peak), which meet at the ridge."""
    f = sec.flops(data)
    rows = [
        r
        for r in sec.roofline(data)[:ROOFLINE_POINTS]
        if isinstance(r.get("intensity_flop_per_byte"), (int, float))
        and r["intensity_flop_per_byte"] > 0
        and isinstance(r.get("achieved_tflops"), (int, float))
        and r["achieved_tflops"] > 0
    ]
    if not rows:
        return None
    peak = f.get("peak_tflops") if isinstance(f.get("peak_tflops"), (int, float)) else None
    bw = f.get("memory_bandwidth_gbps") if isinstance(f.get("memory_bandwidth_gbps"), (int, float)) else None
    ridge = peak * 1e3 / bw if peak and bw else None  # TFLOP/s over GB/s, in FLOP/byte
    xs = [r["intensity_flop_per_byte"] for r in rows] + ([ridge] if ridge else [])
    ys = [r["achieved_tflops"] for r in rows] + ([peak] if peak else [])
    xticks = _log_ticks(min(xs) / 2, max(xs) * 2)
    yticks = _log_ticks(min(ys) / 2, max(ys) * 2)
    x_lo, x_hi, y_lo, y_hi = xticks[0], xticks[-1], yticks[0], yticks[-1]
    plot_w, plot_h = ROOF_W - PAD_L - PAD_R, ROOF_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + plot_w * (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))

    def py(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return PAD_T + plot_h * (
            1 - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        )

    roof = ""
    if peak and bw:
        # The memory roof rises with intensity (bw x I, in TFLOP/s: I x GB/s / 1e3) up to the ridge.
        x_start = max(x_lo, y_lo * 1e3 / bw)
        roof = " ".join(
            f"{px(x):.1f},{py(y):.1f}"
            for x, y in ((x_start, x_start * bw / 1e3), (ridge, peak), (x_hi, peak))
        )
    points = []
    for r in rows:
        bound = f", {r['bound']}-bound" if r.get("bound") else ""
        points.append(
            {
                "x": round(px(r["intensity_flop_per_byte"]), 1),
                "y": round(py(r["achieved_tflops"]), 1),
                "r": 5 if r.get("flop_class") == "matmul" else 4,
                "color": ROOF_COLORS.get(r.get("flop_class"), ROOF_COLORS["other"]),
                "tip": f"{r['name']} {r.get('input_shapes') or ''}: {r['achieved_tflops']:.4g} TFLOP/s at "
                f"{r['intensity_flop_per_byte']:.3g} FLOP/byte ({r['calls']} calls, "
                f"{r['time_us'] / 1000:.3f} ms{bound})",
            }
        )
    return {
        "w": ROOF_W,
        "h": ROOF_H,
        "x0": PAD_L,
        "x1": ROOF_W - PAD_R,
        "ybase": ROOF_H - PAD_B,
        "ytop": PAD_T,
        "xticks": [{"x": round(px(t), 1), "label": _tick_label(t)} for t in xticks],
        "yticks": [{"y": round(py(t), 1), "label": _tick_label(t)} for t in yticks],
        "roof": roof,
        "ridge": {"x": round(px(ridge), 1), "label": f"ridge {ridge:.3g} FLOP/byte"} if ridge else None,
        "points": points,
        "legend": [
            {"name": "matrix-class operator", "color": ROOF_COLORS["matmul"]},
            {"name": "other operator", "color": ROOF_COLORS["other"]},
        ],
    }


def _flops(report) -> dict:
    data = report.data
    rows = sec.roofline(data)
    return {
        "flops_lines": sec.flops_lines(data),
        "roof_chart": _roofline_chart(data),
        "roofline_rows": rows,
        "roofline_cols": sec.columns(rows) if rows else [],
    }


# Shown with the operator table, behind its "group by input shape" toggle, not as a table of its own.
_SHAPE_TABLE = "operators_by_shape"


def _shapes_note(data: dict) -> str:
    """Why the operator table has no grouping by input shape, and how to get it."""
    how = "gpuprof.profile(record_shapes=True), or torch.profiler.profile(record_shapes=True) for a trace"
    if any(r.get("input_shapes") for r in sec.roofline(data)):
        # A live run without record_shapes records the shapes of the operators with a FLOP rule only.
        return (
            "Only the operators whose FLOPs are counted had their input shapes recorded (the roofline "
            f"table lists them), so there is no grouping by input shape: {how}, records every operator's."
        )
    return f"Input shapes were not recorded, so there is no grouping by input shape: {how}, records them."


def _tables(data: dict) -> list[dict]:
    out = []
    for key, title in sec.TABLES:
        rows = sec.sorted_rows(sec.section(data, key))
        if key == _SHAPE_TABLE or not rows:
            continue
        table = {"key": key, "title": title, "cols": sec.columns(rows), "rows": rows}
        if key == "operators":
            shaped = sec.sorted_rows(sec.section(data, _SHAPE_TABLE))
            if shaped:
                table["by_shape"] = {"key": _SHAPE_TABLE, "cols": sec.columns(shaped), "rows": shaped}
            elif _SHAPE_TABLE in data:  # a report that could have had them: say how to get them
                table["shapes_note"] = _shapes_note(data)
        out.append(table)
    for key, title, rows in sec.compiled_tables(data):
        out.append({"key": key, "title": title, "cols": sec.columns(rows), "rows": sec.sorted_rows(rows)})
    return out


def _file_href(path: Optional[str]) -> str:
    """A link to the trace: its bare file name when it sits beside the report (the usual case),
    else a file: URL. Jinja escapes it; a URL-quote keeps odd characters out of the scheme."""
    if not path:
        return ""
    from urllib.parse import quote

    return quote(os.path.basename(path))


def _json_for_script(value) -> str:
    """JSON safe inside <script>: no "<", ">" or "&" as such (a name holding "</script>" stays data)."""
    from .renderers import dumps_compact

    return _script_safe(dumps_compact(value))


def _script_safe(text: str) -> str:
    """``_json_for_script``'s escapes of JSON text (each character's own: a piece at a time is the same)."""
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _spilled(views: dict) -> bool:
    """Whether the views hold a windowed read's per-step rows on disk."""
    from ..analysis.spill import SpilledMapping, SpilledRows

    return any(isinstance(v, (SpilledRows, SpilledMapping)) for v in views.values())


def _views(report, shown) -> dict:
    """What the drill-down and the timeline script read (#gp-views)."""
    views = sec.step_views(report.data)
    return {
        "steps": report.steps,
        "outliers": views.get("outliers", []),
        "per_step": views.get("per_step", {}),
        "timelines": views.get("timelines", []),
        "memory": sec.section(report.data, "memory"),
        "categories": [{"key": k, "name": n, "color": CATEGORY_COLORS[k]} for k, n in shown],
        "categories_all": [{"key": k, "name": n, "color": CATEGORY_COLORS[k]} for k, n in sec.CATEGORIES],
        "path_causes": [{"key": k, "name": n, "color": PATH_CAUSE_COLORS[k]} for k, n in sec.PATH_CAUSES],
        # The module rows' paths and subtrees, for the tree's "show in the timeline" (bounded: a
        # model of more modules links none of them).
        "modules": sec.module_subtrees(report.data)
        if len(sec.modules(report.data)) <= MODULE_LINK_ROWS
        else [],
    }


def _overview(report) -> dict:
    data = report.data
    avg = report.average
    shown = sec.shown_categories(report) if report.steps else []
    views = _views(report, shown)
    return {
        # A windowed read's steps on disk: written from their file where the page holds them.
        "views_json": None if _spilled(views) else _json_for_script(views),
        "views_streamed": views,
        "timelines": views["timelines"],
        "outliers": frozenset(views["outliers"]),  # (the steps table asks each step: a set, not a list)
        "categories_all": views["categories_all"],
        "path_causes": views["path_causes"]
        if any(t.get("critical_path") for t in views["timelines"])
        else [],
        "event_cap": sec.step_views(data).get("event_cap", 0),
        "title": "gpuprof report"
        + (f": {data['source']['path']}" if data.get("source", {}).get("path") else ""),
        "data": data,
        "steps": report.steps,
        "avg": avg,
        "categories": [
            {
                "key": k,
                "name": n,
                "color": CATEGORY_COLORS[k],
                "us": avg.get(f"{k}_us", 0.0),
                "pct": avg.get(f"{k}_pct", 0.0),
            }
            for k, n in shown
        ],
        "step_chart": step_chart(report, CATEGORY_COLORS),
        "warnings": sec.warning_lines(data),
    }


def _devices(report) -> dict:
    devices = sec.devices(report.data)
    samples = sec.gpu_samples(report.data)
    timeline = [
        {
            "device": int(device),
            "t_us": b["start_us"],
            "utilization_pct": b["utilization_pct"],
            "sm_efficiency_pct": b["sm_efficiency_pct"],
        }
        for device, buckets in (report.data.get("gpu_timeline") or {}).items()
        for b in buckets
    ]
    curve = [
        {"device": int(device), "t_us": t, "allocated_bytes": allocated, "reserved_bytes": reserved}
        for device, points in (report.data.get("memory_curve") or {}).items()
        for t, allocated, reserved in points
    ]
    # On each device's curve: its peak (a dot) and the steps' boundaries (lines).
    edges: dict = {}
    if len(report.steps) <= MAX_MARKED_STEPS:
        for st in report.steps:
            for t, what in ((st.get("start_ns"), "starts"), (st.get("end_ns"), "ends")):
                if isinstance(t, (int, float)):
                    edges.setdefault(t, f"step {st['step']} {what}")
    boundaries = [{"t": t / 1000.0, "y": None, "label": label} for t, label in sorted(edges.items())]
    marks = {
        int(device): boundaries
        + [{"t": p["t_us"], "y": p["bytes"], "label": f"peak {sec.fmt_bytes(p['bytes'])}"}]
        for device, p in (report.data.get("memory_peak") or {}).items()
    }
    return {
        "devices": devices,
        "memory_curve_charts": _time_series_charts(
            curve, [("allocator", ("_bytes",))], "Memory curve", marks
        ),
        "gpu_timeline_charts": _time_series_charts(
            timeline, [("utilization and Est. SM efficiency", ("_pct",))], "GPU timeline"
        ),
        "device_fields": [(k, n) for k, n in sec.DEVICE_FIELDS if any(d.get(k) is not None for d in devices)],
        "nvml_charts": _time_series_charts(
            samples,
            [
                ("utilization", ("_pct",)),
                ("memory", ("_bytes",)),
                ("power", ("_w", "_watts")),
                ("temperature", ("_c",)),
                ("clocks", ("_mhz",)),
            ],
            "NVML",
        ),
    }


# energy per step (docs/metrics.md, "Energy"), drawn under the GPU summary
def _energy(report) -> dict:
    return {"energy_lines": sec.energy_lines(report.data)}


# the chain that set each step's length (docs/metrics.md, "Critical path"), under the energy
def _critical_path(report) -> dict:
    return {"critical_path_lines": sec.critical_path_lines(report.data)}


def _memory(report) -> dict:
    memory = sec.section(report.data, "memory")
    memory_charts = _time_series_charts(memory, [("memory", ("_bytes",))], "Memory")
    return {
        "memory_charts": memory_charts,
        # Memory rows that are not a time series (e.g. per-device peaks) show as a table.
        "memory_rows": memory if memory and not memory_charts else [],
        "memory_cols": sec.columns(memory) if memory and not memory_charts else [],
    }


COMPOSITION_COLORS = {
    "parameters": "#2e9e44",
    "gradients": "#3867d6",
    "optimizer_state": "#f7b731",
    "activations": "#eb3b5a",
    "temporary": "#a55eea",
    "unknown": "#a5b1c2",
}


def _memory_view(report) -> dict:
    """Each device's peak: its composition as a bar, and the allocations live then by operator and
    module; memory that grows; the out-of-memory section."""
    data = report.data
    composition = data.get("memory_composition") or {}
    views = []
    for device, peak in sorted((data.get("memory_peak") or {}).items(), key=lambda kv: int(kv[0]) < 0):
        parts = sec.composition_parts(composition.get(device) or {})
        views.append(
            {
                "title": f"{sec.device_name(device)[0].upper()}{sec.device_name(device)[1:]} at its peak: "
                + sec.fmt_bytes(peak.get("bytes") or 0)
                + (f" in step {peak['step']}" if peak.get("step") is not None else ""),
                "segments": [
                    {
                        "label": label,
                        "text": f"{label} {sec.fmt_bytes(b)} ({pct:.0f}%)",
                        "pct": round(pct, 3),
                        "color": COMPOSITION_COLORS[k],
                    }
                    for k, label, b, pct in parts
                ],
                "top_ops": peak.get("top_ops") or [],
                "top_modules": [
                    {**r, "name": sec.module_owner_name(r.get("name"))} for r in peak.get("top_modules") or []
                ],
                "modules_note": "" if peak.get("top_modules") else (sec.module_owners_note(data) or ""),
            }
        )
    growth = [line for line in sec.memory_view_lines(data) if line.startswith("Memory grows")]
    oom = data.get("out_of_memory") if isinstance(data.get("out_of_memory"), dict) else None
    return {
        "memory_views": views,
        "memory_growth_lines": growth,
        "oom_lines": sec.out_of_memory_lines(data),
        "oom_segments": [
            {
                "text": f"{label} {sec.fmt_bytes(b)} ({pct:.0f}%)",
                "pct": round(pct, 3),
                "color": COMPOSITION_COLORS[k],
            }
            for k, label, b, pct in sec.composition_parts((oom or {}).get("composition") or {})
        ],
    }


def _tables_and_advice(report) -> dict:
    return {
        "tables": _tables(report.data),
        "advice": sec.ranked_advice(report.data),
        "evidence_lines": sec.evidence_lines,
        "explain": sec.advice_explanation_html,
    }


# The module tree shows at most this many modules (the heaviest, with their ancestors); the JSON has
# them all. Levels above this depth start open.
MODULE_TREE_ROWS = 200
MODULE_TREE_OPEN_DEPTH = 2
MODULE_LINK_ROWS = 20000


def _module_nodes(rows: list[dict]) -> list[dict]:
    """The depth-first rows as nested nodes, each with what its line draws: the indent, the bar of
    its share of the step (its self part darker), its numbers and its index for the timeline link."""
    roots: list[dict] = []
    stack: list[dict] = []
    for i, r in enumerate(rows):
        share = r.get("share_pct")
        total = r.get("host_total_us") or 0.0
        self_part = (r.get("host_self_us") or 0.0) / total if total > 0 else 0.0
        node = {
            **r,
            "index": r.get("row", i),
            "indent_px": 4 + 18 * int(r.get("depth") or 0),
            "bar_pct": round(min(max(share or 0.0, 0.0), 100.0), 2),
            "self_bar_pct": round(100.0 * self_part, 2),
            "share_text": "" if share is None else f"{share:.1f}%",
            "flops_text": sec.fmt("flops", r.get("flops")) if r.get("flops") is not None else "",
            "open": int(r.get("depth") or 0) < MODULE_TREE_OPEN_DEPTH,
            "children": [],
        }
        while stack and stack[-1].get("path") != r.get("parent"):
            stack.pop()
        (stack[-1]["children"] if stack and r.get("parent") is not None else roots).append(node)
        stack.append(node)
    return roots


def _modules(report) -> dict:
    rows, left_out = sec.module_tree(report.data, MODULE_TREE_ROWS)
    note = str(report.metadata.get("module_view") or "")
    if not rows:
        if "modules" not in report.data:  # a report from before the module view: nothing to say
            note, why = "", ""
        elif note or report.data.get("source", {}).get("kind") == "live":
            why = note or "no module was called inside the recorded steps"
        else:
            why = (
                "this trace has no module calls: torch.profiler writes them with "
                "torch.profiler.profile(with_stack=True); gpuprof.profile(with_modules=True) records "
                "them live"
            )
        return {
            "module_tree": [],
            "module_linked": False,
            "module_tree_count": 0,
            "module_note": why,
            "module_left_out": 0,
            "module_device": False,
            "module_flops": False,
        }
    timelines = sec.step_views(report.data).get("timelines") or []
    compiled = sec.compiled_modules_line(report.data)
    note = f"{note}. {compiled}" if note and compiled else (note or compiled)
    return {
        "module_tree": _module_nodes(rows),
        "module_linked": any("module_of" in t for t in timelines)
        and len(sec.modules(report.data)) <= MODULE_LINK_ROWS,
        "module_tree_count": len(rows),
        "module_note": note,
        "module_left_out": left_out,
        "module_device": any(r.get("device_total_us") for r in rows),
        "module_flops": any(r.get("flops") for r in rows),  # FLOPs: where any module has them
    }


def _ranks(report) -> dict:
    data = report.data
    shown = sec.ranks_shown(data)
    return {
        "ranks_shown": shown,
        "ranks_headers": sec.RANK_HEADERS,
        "ranks_rows": sec.rank_rows(data),
        "ranks_summary": sec.rank_summary_lines(data) if shown else [],
        "merged": sec.merged_timeline(data),
    }


def _merged_href(merged: Optional[dict], written_to) -> str:
    """The merged timeline's place relative to the HTML file being written (the job's report at the
    top of the folder, or rank 0's copy in rank0/); "" when either is not known."""
    if not merged or not merged.get("path") or written_to is None:
        return ""
    from urllib.parse import quote

    here = os.path.dirname(os.path.abspath(os.fspath(written_to)))
    return quote(os.path.relpath(os.path.abspath(merged["path"]), here).replace(os.sep, "/"))


def _about(report) -> dict:
    data = report.data
    return {
        "dataloaders": report.dataloaders,
        "host": report.host,
        "counts": report.counts,
        "trace_path": data.get("source", {}).get("trace_path"),
        "trace_href": _file_href(data.get("source", {}).get("trace_path")),
        "about_label": sec.about_label,
        "about_value": sec.about_value,
        "gpuprof_version": data.get("gpuprof_version", ""),
        "schema_version": data.get("schema_version"),
    }


# ---- the input pipeline (report/input_pipeline_view.py; drawn by pipeline.html.j2) ------------------------
def _input_pipeline(report) -> dict:
    ip = pv.pipeline_of(report.data)
    if ip is None:
        return {"pipeline": None}
    return {
        "pipeline": {
            "headline": pv.headline(ip),
            "stages": pv.stages(ip),
            "stage_line": pv.stage_line(ip),
            "lines": pv.detail_lines(ip),
            "workers": [w for w in ip.get("workers") or [] if isinstance(w, dict)][: pv.MAX_WORKERS_SHOWN],
            "recommended": ip.get("recommended_num_workers"),
            "prefetch": ip.get("recommended_prefetch_factor"),
            "ms": pv.ms,
        }
    }


class HtmlRenderer:
    """One self-contained HTML file, or a fragment for a notebook cell (``full=False``)."""

    name = "html"
    file_end = ""
    # Each section gives the template what its block draws; report.html.j2 lays the blocks out in
    # this order (overview and steps, timelines, modules, ranks, input pipeline, GPU and its energy,
    # FLOPs and the roofline, memory, tables and advice, about).
    sections = (
        _overview,
        _modules,
        _devices,
        _energy,
        _critical_path,
        _flops,
        _memory,
        _memory_view,
        _tables_and_advice,
        _ranks,
        _input_pipeline,
        _about,
    )

    def render(self, report, *, full: bool = True, written_to=None) -> str:
        pieces: list = []
        self.write(report, pieces.append, full=full, written_to=written_to)
        return "".join(pieces)

    def write(self, report, write, *, full: bool = True, written_to=None) -> None:
        """``render``'s text through ``write(text)`` a piece at a time (Jinja's ``generate``), a
        windowed read's per-step rows read from their file as the page reaches them: the embedded
        views' JSON a row at a time (``renderers.write_compact``), the step chart and the steps
        table a step at a time."""
        ctx: dict = {"full": full}
        for section in self.sections:
            ctx.update(section(report))
        ctx["merged_href"] = _merged_href(ctx.get("merged"), written_to)
        views, mark = ctx.pop("views_streamed"), None
        if ctx["views_json"] is None:  # a random mark, which no trace can foresee, stands for them
            import secrets

            mark = ctx["views_json"] = f"\x00gpuprof-views-{secrets.token_hex(16)}\x00"
        for piece in _environment().get_template("report.html.j2").generate(**ctx):
            if mark is not None and mark in piece:
                from .renderers import write_compact

                before, piece = piece.split(mark, 1)
                write(before)
                write_compact(views, lambda text: write(_script_safe(text)))
                mark = None
            write(piece)

    def write_file(self, report, path, *, full: bool = True) -> None:
        """``render(report, written_to=path)`` written to ``path`` (UTF-8, whole or not at all) a
        piece at a time (``write``)."""
        from ..traces.atomic import replace_atomically

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                self.write(report, f.write, full=full, written_to=path)

        replace_atomically(path, write)


HTML = HtmlRenderer()

__all__ = ["HTML"]
