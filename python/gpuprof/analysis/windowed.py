"""Windowed analysis: the report dict of a trace too large for its memory budget, from the analyses
of its windows (``traces/windows.py``; docs/design.md, "Memory").

Each window is imported alone and analysed by ``report_dict``; the results are merged as they come,
so that memory holds one window's trace and the merged rows (in proportion to the distinct names,
not to the events; the rows that grow with the steps on disk, ``spill.py``, a few bytes a step in
memory):

- the steps a window owns are its rows, in order (the critical path's and collective calls too),
  written to the per-step rows' file as they come; the averages are recomputed from them;
- the name-keyed tables (kernels, kernels by operator, operators, operators by shape, copies,
  collectives, ranges, syncs) are summed row by row: calls, totals, minima and maxima exactly (to
  the rounding of each window's microseconds, 0.001 us), means recomputed from the sums, and the
  per-row shares weighted by the time they are shares of;
- the GPU summary, the module tree, the per-step memory rows and FLOPs (with the roofline) are
  merged by ``window_sections.py`` from each window's own steps and sums;
- HTA's six tables (idle time, launch statistics, queue length, copy bandwidth, operator launch
  delay, kernel sequences) from each window's parts, joined across the windows' edges
  (``windowed_hta.py``);
- the GPU timeline, the GPU samples and energy per step, torch.compile's regions and the HTML's step
  views by ``window_views.py`` (the step timelines from the window(s) holding the drawn steps, read
  again);
- the memory curve from each window's own allocator samples, the level carried across the windows'
  edges, and the per-operator memory statistics summed by operator (``window_memory.py``);
- the memory peak, its composition and the growth from each window's highest level, its step ends'
  levels and the blocks live then, those still live at a window's start carried from the windows
  before it (``window_peak.py``);
- what needs the whole trace at once, or counts the windows' context, is cut: left as a trace with
  no events has it, and named in ``source.windowed.cut`` and in a warning that says which setting
  avoids it (``--max-memory``).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Optional

from .._native import _core
from ..traces.read import import_settings
from .spill import RowFile, SpilledRows
from .window_memory import MAX_NAME_ROWS, CurveMerge, OpsMerge
from .window_peak import PeakMerge
from .window_sections import SectionMerge
from .window_views import LaunchRows, StepViewMerge, TimelineMerge, add_whole_views
from .windowed_hta import HtaMerge

#: The sections a windowed report leaves out (as a trace without events has them):
#: each needs every event at once (the memory view) or would count a window's context events in its
#: rows. The memory curve and the per-operator memory statistics are merged (``window_memory.py``),
#: the memory peak, its composition and growth too (``window_peak.py``), and cut only where they
#: cannot be exact (``source.windowed``'s ``memory_curve``, ``memory_ops``, ``memory_peak`` and
#: ``memory_growth`` say why).
CUT_SECTIONS = ()


def _weighted(rows: list, value: str, weight: str) -> Optional[float]:
    """The mean of ``value`` over rows weighted by ``weight``; None when no row knows it."""
    num = den = 0.0
    for r in rows:
        v, w = r.get(value), r.get(weight) or 0.0
        if v is not None and w > 0:
            num += v * w
            den += w
    return num / den if den > 0 else None


def _sum_known(rows: list, key: str):
    """The sum of a field over rows; None when every row's is None."""
    known = [r[key] for r in rows if r.get(key) is not None]
    return sum(known) if known else None


def _timed(rows: list, count: str) -> dict:
    """calls (or count), total, min, max and mean of rows of one key."""
    out = {count: sum(r[count] for r in rows), "total_us": round(sum(r["total_us"] for r in rows), 3)}
    if "min_us" in rows[0]:
        out["min_us"] = min(r["min_us"] for r in rows)
        out["max_us"] = max(r["max_us"] for r in rows)
    if "mean_us" in rows[0]:
        out["mean_us"] = out["total_us"] / out[count] if out[count] else 0.0
    return out


def _kernels(rows):
    out = _timed(rows, "calls")
    out["mean_blocks_per_sm"] = _weighted(rows, "mean_blocks_per_sm", "total_us")
    out["mean_occupancy_pct"] = _weighted(rows, "mean_occupancy_pct", "total_us")
    return out


def _kernel_ops(rows):
    out = _timed(rows, "calls")
    out["blocks_per_sm"] = _weighted(rows, "blocks_per_sm", "total_us")
    out["occupancy_pct"] = _weighted(rows, "occupancy_pct", "total_us")
    return out


def _operators(rows):
    out = {"calls": sum(r["calls"] for r in rows)}
    for k in ("host_self_us", "host_total_us", "device_self_us", "device_total_us"):
        out[k] = round(sum(r[k] for r in rows), 3)
    out["tc_self_pct"] = _weighted(rows, "tc_self_pct", "device_self_us")
    out["tc_total_pct"] = _weighted(rows, "tc_total_pct", "device_total_us")
    out["flops"] = _sum_known(rows, "flops")
    return out


def _copies(rows):
    out = _timed(rows, "count")
    out["bytes"] = sum(r["bytes"] for r in rows)
    out["gb_per_s"] = out["bytes"] / (out["total_us"] * 1e3) if out["total_us"] > 0 else 0.0
    return out


def _collectives(rows):
    out = _timed(rows, "calls")
    out["bytes"] = _sum_known(rows, "bytes")
    out["transfer_us"] = _sum_known(rows, "transfer_us")
    out["wait_us"] = _sum_known(rows, "wait_us")
    size = rows[0].get("group_size")
    if out["bytes"] is not None:
        out["algbw_gbps"], out["busbw_gbps"] = _core.collective_bandwidths(
            rows[0]["name"], out["bytes"], round(out["total_us"] * 1000), size if size is not None else -1
        )
    return out


def _ranges(rows):
    return {
        "calls": sum(r["calls"] for r in rows),
        "host_total_us": round(sum(r["host_total_us"] for r in rows), 3),
        "closure_us": round(sum(r["closure_us"] for r in rows), 3),
    }


def _syncs(rows):
    return _timed(rows, "count")


def _key(*fields):
    return lambda r: json.dumps([r.get(f) for f in fields])


# (section, the row's key, how rows of one key merge, the sort: largest first by this field, ties
# by these, as the native tables order them; collectives' ties keep their first call's order)
TABLES = (
    ("kernels", ("name",), _kernels, "total_us"),
    (
        "kernel_ops",
        ("kernel", "operator", "grid", "block", "registers_per_thread", "shared_memory_bytes"),
        _kernel_ops,
        "total_us",
    ),
    ("operators", ("name", "input_shapes"), _operators, "host_total_us"),
    ("operators_by_shape", ("name", "input_shapes"), _operators, "host_total_us"),
    ("copies", ("kind", "host_memory"), _copies, "total_us"),
    (
        "collectives",
        ("name", "process_group", "pg_desc", "group_size", "group_ranks", "timed_by"),
        _collectives,
        "total_us",
    ),
    ("ranges", ("name",), _ranges, "host_total_us"),
    ("syncs", ("name", "op"), _syncs, "total_us"),
)


def _key(row: dict, fields: tuple) -> str:
    return json.dumps([row.get(f) for f in fields])


def _order(row: dict, sort: str, fields: tuple, ties: bool) -> tuple:
    """A row's place: largest ``sort`` first, then its key fields (absent ones first)."""
    tie = tuple((row.get(f) is not None, row.get(f) if row.get(f) is not None else 0) for f in fields)
    return (-(row.get(sort) or 0), tie if ties else ())


class WindowMerge:
    """The merged report dict, window by window: ``add`` each window's report dict with the step
    numbers it owns (in order), then ``result``. The per-step rows (steps, critical paths,
    collective calls, per-step memory and FLOPs) are written to ``file`` as they come and the
    result reads them from there (``spill.SpilledRows``): 8 bytes a row in memory. ``close``
    removes the file (so does letting go of every sequence over it)."""

    def __init__(self) -> None:
        self.file = RowFile()
        self.keys: list = []  # the report's keys, in the first window's order
        self.first: dict = {}  # the first window's sections that are neither per step nor cut
        self.last: dict = {}
        self.spilled: dict = {
            k: SpilledRows(self.file) for k in ("steps", "critical_path", "collective_calls")
        }
        self.calls: Optional[int] = 0  # collective calls so far; None once a window had too many
        self.rows: dict = {name: {} for name, *_ in TABLES}
        self.call_rows: dict = {}  # a collective row's key -> its number in the calls
        self.events = 0
        self.skewed = 0
        self.warnings: dict = {}
        self.sections = SectionMerge(self.file)  # the GPU summary, modules, per-step memory and FLOPs

    def add(self, data: dict, owned_steps: set, context_events: int, native: Optional[dict] = None) -> None:
        if not self.keys:
            self.keys = list(data)
            skip = {"steps", "collective_calls", *CUT_SECTIONS}
            self.first = {k: v for k, v in data.items() if k not in skip}
            self.first["critical_path"] = {
                k: v for k, v in data.get("critical_path", {}).items() if k != "steps"
            }
        self.last = {"step_rules": data["step_rules"], "counts": data["counts"]}
        self.spilled["steps"].extend(s for s in data["steps"] if s["step"] in owned_steps)
        path = (data.get("critical_path") or {}).get("steps", [])
        self.spilled["critical_path"].extend(s for s in path if s["step"] in owned_steps)
        self.events += data["counts"]["events"] - context_events
        self.sections.add(data, native or {}, owned_steps)
        self.skewed += data["step_rules"].get("skewed_device_events", 0)
        for w in data.get("warnings", []):
            self.warnings.setdefault(w["kind"], w)
        moved = []  # this window's collective row -> the merged row's number
        for name, fields, _merge, _sort in TABLES:
            for row in data.get(name) or []:
                k = _key(row, fields)
                self.rows[name].setdefault(k, []).append(row)
                if name == "collectives":
                    moved.append(self.call_rows.setdefault(k, len(self.call_rows)))
        calls = data.get("collective_calls")
        if calls is None or self.calls is None:
            self.calls = None  # a window past MAX_COLLECTIVE_CALLS: none, as in a whole trace
        else:
            # The window's own calls only (its context's are not rows): a call it owns may fall in
            # the step before its first, as in the whole trace, when that step's kernels ran late.
            self.calls += len(calls)
            self.spilled["collective_calls"].extend([moved[c[0]], *c[1:]] for c in calls)
        # Each key's rows folded into one as they come: memory in proportion to the names.
        for name, _fields, merge, _sort in TABLES:
            for rows in self.rows[name].values():
                if len(rows) > 1:
                    rows[:] = [{**rows[0], **merge(rows)}]

    def close(self) -> None:
        """Removes the per-step rows' file (a read that failed or was interrupted)."""
        self.file.close()

    def result(
        self,
        *,
        scan_breakdown: dict,
        note: dict,
        average,
        max_calls: int,
        peak_tflops: Optional[float] = None,
    ) -> dict:
        """The merged dict: the first window's other keys, the steps and tables merged, the cut
        sections empty (as ``empty`` has them), the step rules from the scan of the markers (and the
        last window's trailing-step rules), and the windowed note in ``source`` and ``warnings``."""
        data = dict(self.first)
        data["steps"] = self.spilled["steps"]
        data["average"] = average(data["steps"])
        if "critical_path" in self.keys:
            data["critical_path"] = {**data["critical_path"], "steps": self.spilled["critical_path"]}
        rules = dict(data.get("step_rules", {}))
        for k in (
            "had_step_markers",
            "duplicate_step_markers",
            "nested_step_markers",
            "malformed_step_markers",
        ):
            rules[k] = scan_breakdown[k]
        for k in ("dropped_trailing_steps", "dropped_incomplete_last"):
            rules[k] = self.last["step_rules"][k]
        rules["skewed_device_events"] = self.skewed
        data["step_rules"] = rules
        data["counts"] = {
            **self.last["counts"],
            "events": self.events,
            "skipped": note["skipped"],
            "steps": len(data["steps"]),
        }
        for name, fields, _merge, sort in TABLES:
            if name not in self.keys:
                continue
            rows = [r[0] for r in self.rows[name].values()]
            rows.sort(key=lambda r: _order(r, sort, fields, name != "collectives"))
            data[name] = rows
        if "collective_calls" in self.keys:
            fields = next(f for name, f, *_ in TABLES if name == "collectives")
            merged = {_key(r, fields): i for i, r in enumerate(data.get("collectives", []))}
            final = {n: merged[k] for k, n in self.call_rows.items()}  # a call's row, renumbered
            calls = self.spilled["collective_calls"].mapped(lambda c: [final[c[0]], *c[1:]])  # renumbered
            too_many = self.calls is None or self.calls > max_calls
            data["collective_calls"] = None if too_many else calls
        for name in CUT_SECTIONS:
            if name in note["empty"]:
                data[name] = note["empty"][name]
        data["metadata"] = note["metadata"]
        data["source"] = {**note["source"], "windowed": note["windowed"]}
        data["warnings"] = [*self.warnings.values(), note["warning"]]
        self.sections.result(data, self.keys, peak_tflops=peak_tflops)
        return {k: data[k] for k in self.keys if k in data}


@contextlib.contextmanager
def spilled(path, scan, windows, progress=None):
    """The windows' spill files (``_core.spill_windows``: one pass over the trace routes each event's
    text to the windows it overlaps), in a temporary folder removed afterwards; an empty list when
    the folder's disk has no room for the trace's JSON text (each window then reads the trace)."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="gpuprof-windows-")
    try:
        if shutil.disk_usage(tmp).free < scan.stats["json_bytes"] * 1.2:
            yield []
            return
        files = [os.path.join(tmp, f"window{i}.json") for i in range(len(windows))]
        unit_ns = 1 if scan.stats["time_unit"] == "ns" else 1000
        _core.spill_windows(
            os.fsencode(path),
            unit_ns,
            [(w.keep_from, w.keep_to, os.fsencode(f)) for w, f in zip(windows, files)],
            max_token_bytes=import_settings()["max_token_bytes"],
            progress=_pass(progress, f"copying it into {len(windows)} windows", _file_size(path)),
        )
        yield files
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _file_size(path) -> Optional[int]:
    """The size of the file at ``path`` in bytes (what a pass over it reads), None when unknown."""
    try:
        return os.path.getsize(path) or None
    except OSError:
        return None


def _pass(progress, what: str, total: Optional[int]):
    """A fresh ``_core.ImportProgress`` for the next pass over the trace, announced to ``progress``
    (``progress(what, total_bytes, counter)``, a progress line's ``phase``); None without one."""
    if progress is None:
        return None
    counter = _core.ImportProgress()
    progress(what, total, counter)
    return counter


def _trim() -> None:
    """Hands the memory a window's analysis freed back to the system (glibc keeps freed heap pages
    for reuse, and the next window's allocations do not fit them all: without it the resident size
    grew by 200 MB a window of 2 million events). Nothing where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def windowed_report_dict(path, **options) -> dict:
    """The report dict (no advice) of the trace at ``path``, read in windows (``_windowed``, which
    takes the same ``options``); its per-step rows on disk (``spill.py``), their file closed (and so
    removed) when the read fails or is interrupted."""
    merge = WindowMerge()
    try:
        return _windowed(path, merge=merge, **options)
    except BaseException:
        merge.close()
        raise


def _windowed(
    path,
    *,
    merge: WindowMerge,
    cap: int,
    reason: str,
    drop_incomplete_last_step: bool = True,
    peak_tflops: Optional[float] = None,
    import_cpus: int = 0,
    progress=None,
    with_step_views: bool = False,
) -> dict:
    """The report dict (no advice) of the trace at ``path``, which has more than ``cap`` events
    (the cap its memory budget sets: ``reason`` names the setting), read in windows of steps of at
    most half the cap each (where a step allows); with ``with_step_views``, its ``step_views`` too
    (the window(s) holding the drawn steps read again). Raises TraceImportError when the trace has
    no step markers to cut, or a window cannot be read (the message names the trace and the
    window's steps)."""
    from ..traces.read import TraceImportError, trace_source
    from ..traces.windows import no_steps_message, plan_windows, read_numbered_window, scan_steps
    from . import MAX_COLLECTIVE_CALLS, MEMORY_CURVE_POINTS, _growth, average, report_dict, report_metadata

    size = _file_size(path)
    scan = scan_steps(path, import_cpus, progress=_pass(progress, "finding its steps", size))
    if not scan.steps:
        raise TraceImportError(no_steps_message(path, cap, reason))
    # A window's import and analysis peak at about 330 bytes an event (measured on 2 million events of
    # the synthetic trace), more than the 256 the cap counts for a whole report: windows of half the cap.
    windows = plan_windows(scan, max(1, cap // 2))
    hta = HtaMerge(_core.last_step_start(scan.trace))  # HTA's scope: the whole trace's last step
    timeline, launches, views = TimelineMerge(), LaunchRows(), StepViewMerge(merge.file)
    curve, memory_ops = CurveMerge(MEMORY_CURVE_POINTS), OpsMerge(MAX_NAME_ROWS)
    peak = PeakMerge()
    with spilled(path, scan, windows, progress) as files:
        for i, w in enumerate(windows):
            source = files[i] if files else path
            counter = _pass(progress, f"window {i + 1} of {len(windows)}", _file_size(source))
            trace, stats = read_numbered_window(
                path, source, windows, i, 2 * max(cap, w.events), import_cpus, progress=counter
            )
            native: dict = {}
            data = report_dict(
                trace,
                drop_incomplete_last_step=drop_incomplete_last_step and i == len(windows) - 1,
                peak_tflops=peak_tflops,
                native=native,
            )
            hta.add(trace, w.own_from, w.own_to)
            timeline.add(trace, w.own_from, w.own_to)
            launches.add(trace)
            owned = {scan.steps[j]["step"] for j in range(w.first, w.last + 1)}
            if with_step_views:
                views.add(i, trace, native, [s for s in data["steps"] if s["step"] in owned])
            curve.add(trace, w.own_from, w.own_to, data)
            memory_ops.add(trace, data)
            peak.add(trace, w.own_from, w.own_to, data, native, owned)
            del trace
            if files:
                os.unlink(files[i])  # its disk space back at once
            merge.add(data, owned, stats["context_events"], native)
            del data, native
            _trim()
    views_out = None
    if with_step_views:  # drawn before the merged report is built: one window's analysis at a time
        steps = merge.spilled["steps"]
        modules = merge.sections._modules() if "modules" in merge.keys else []
        views_out = _step_views(
            path, windows, views, steps, modules, cap, import_cpus, progress, drop_incomplete_last_step
        )
        del steps, modules
    empty = report_dict(_core.Trace(), source={})  # each section as a trace without events has it
    memory = {"memory_curve": curve.result(), "memory_ops": memory_ops.result()}
    peaks = peak.result()
    memory["memory_peak"], memory["memory_composition"], growth = peaks if peaks is not None else (None,) * 3
    memory["memory_growth"] = None if growth is None else {k: _growth(g) for k, g in growth.items()}
    cut = [k for k, v in memory.items() if v is None] + [
        k for k in CUT_SECTIONS if k in empty or k in merge.keys
    ]
    most = max(w.events for w in windows)
    named = {
        "memory_curve": "the memory curve",
        "memory_ops": "the per-operator memory statistics",
        "memory_peak": "the memory peak",
        "memory_composition": "its composition",
        "memory_growth": "the memory growth",
    }
    kept = [named[k] for k, v in memory.items() if v is not None]
    left = [named[k] for k, v in memory.items() if v is None]
    message = (
        f"this trace has more than {cap:,} events, {reason}: it was analysed in {len(windows)} windows "
        f"of consecutive steps (at most about {most:,} events each), its steps, GPU summary, kernels, "
        "operators, copies, collectives, ranges, syncs, modules, per-step memory, FLOPs, roofline, critical "
        "path and HTA's tables (idle time, launch statistics, queue length, copy bandwidth, operator launch "
        "delay, kernel sequences), GPU timeline and samples, energy, torch.compile regions"
        f"{''.join(f', {what}' for what in kept)} merged from them"
        + (f"; left out, as they need every event at once: {', '.join(left)}" if left else "")
        + " (gpuprof analyze --max-memory SIZE with more memory reads it whole)"
    )
    note = {
        "source": trace_source(path, scan.stats),
        "skipped": int(scan.trace.skipped_events),
        "metadata": report_metadata(scan.trace.metadata),  # the whole file's, as the scan read it
        "windowed": {
            "windows": len(windows),
            "max_events": cap,
            "spilled": bool(files),
            "steps_per_window": [w.last - w.first + 1 for w in windows],
            "cut": cut,
            "approximate": hta.approximate(),
            **_whys(
                memory_curve=curve.why,
                memory_ops=memory_ops.why,
                memory_peak=peak.why,
                memory_growth=peak.growth_why,
            ),
        },
        "warning": {"kind": "windowed", "count": len(windows), "message": message},
        # FLOPs: left out whole (a report without the section), not a trace's numbers of no FLOPs.
        "empty": {k: empty[k] for k in cut if k != "flops" and k in empty},
    }
    data = merge.result(
        scan_breakdown=scan.breakdown,
        note=note,
        average=average,
        max_calls=MAX_COLLECTIVE_CALLS,
        peak_tflops=peak_tflops,
    )
    for key, merged in memory.items():
        if key in data:
            data[key] = merged if merged is not None else empty[key]
    long_names = dict(data.get("long_names") or {})
    for name, rows in hta.result(long_names).items():
        if name in data:
            data[name] = rows
    if "long_names" in data:
        data["long_names"] = long_names
    data = add_whole_views(data, timeline=timeline, samples_trace=scan.trace, launches=launches)
    if views_out is not None:
        data["step_views"] = views_out
    return data


def _whys(**whys) -> dict:
    """``source.windowed``'s reasons a merged section was left out: those given."""
    return {k: why for k, why in whys.items() if why}


def _step_views(
    path, windows, views, steps, modules, cap, import_cpus, progress, drop_incomplete_last_step
) -> dict:
    """The merged report's ``step_views`` (``steps``: the merged steps; ``modules``: the merged
    module rows): the drawn steps' timelines from the window(s) owning them, each read again from
    ``path`` (one more pass over the file a window)."""
    from ..traces.windows import read_numbered_window
    from . import report_dict

    held: dict = {}  # the last window read again: both drawn steps are often in one

    def reread(i: int):
        if i not in held:
            held.clear()
            _trim()  # the window read before handed back before the next is read
            w = windows[i]
            counter = _pass(
                progress, f"window {i + 1} of {len(windows)} again, for the step timelines", _file_size(path)
            )
            trace, _stats = read_numbered_window(
                path, path, windows, i, 2 * max(cap, w.events), import_cpus, progress=counter
            )
            native: dict = {}
            window_data = report_dict(
                trace,
                drop_incomplete_last_step=drop_incomplete_last_step and i == len(windows) - 1,
                native=native,
            )
            held[i] = (trace, window_data, native)
        return held[i]

    out = views.result(steps, modules, reread)
    held.clear()
    _trim()
    return out
