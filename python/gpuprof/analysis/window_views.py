"""The views of a windowed report (``windowed.py``) that span the whole trace: the GPU timeline, the
NVML samples with the energy per step, torch.compile's regions and the HTML's step views, each the
whole trace's (docs/design.md, "Memory").

- GPU timeline: its buckets' width depends on the whole trace's span, known only after the last
  window. Each window gives, over the time it owns, each device's busy time and SM-share time in
  the buckets of every width the span may still come to (a power of ten microseconds: at most three
  are in play at once, 101 buckets each) and in one bucket over everything (for a width the span
  reaches later: what came before it is all in its first bucket); the windows' owned times tile
  the trace, so their sums are the whole trace's numerators, each kernel clipped to the buckets as
  the whole analysis clips it.
- GPU samples: every window and the scan keep the file's NVML samples (a section of their own, not
  events), so the rows and the energy of the merged steps are drawn from the scan's, as a whole
  trace draws them (one row per sample, as in a whole report).
- torch.compile's regions are built from the merged operator and kernel rows, which are the whole
  trace's, and the windows' distinct launch-arg rows.
- Step views: each window's owned steps' top kernels and operators (a few rows a step); the slowest
  and the median step are chosen from the merged steps as a whole trace chooses them, and the
  window(s) owning them read again (one more pass over the file each) to draw their timelines.
"""

from __future__ import annotations

import json
from array import array
from typing import Optional

from .._native import _core

_ALL = 2**63 - 1  # a width past any span: one bucket over everything
_MAX_BUCKETS = 100  # kMaxTimelineBuckets: the plugin's bucket count
_WIDTHS = [1000 * 10**k for k in range(16)]  # 1 us to 10^15 us


class TimelineMerge:
    """``add`` each window's trace with the time it owns; ``result`` is ``_core.gpu_timeline`` of
    the whole trace. Memory: at most a few widths x 101 buckets x the devices."""

    def __init__(self) -> None:
        self.lo: Optional[int] = None
        self.hi: Optional[int] = None
        self.total: dict = {}  # device -> [busy_ns, sm_weighted_ns] over all the owned time so far
        self.cells: dict = {}  # width -> device -> bucket -> [busy_ns, sm_weighted_ns]

    def add(self, trace, own_from: int, own_to: int) -> None:
        extent = _core.event_extent(trace)
        if extent is None:
            return
        if self.lo is None:  # the first window keeps every event that starts before its end
            self.lo = extent[0]
        self.hi = extent[1] if self.hi is None else max(self.hi, extent[1])
        span = self.hi - self.lo
        for width in _WIDTHS:
            if span // width > _MAX_BUCKETS:
                self.cells.pop(width, None)  # too narrow for the span: never the whole trace's
            elif width <= span and width not in self.cells:
                # The windows before ended within the span before, shorter than this width.
                self.cells[width] = {dev: {0: list(v)} for dev, v in self.total.items()}
        widths = [*self.cells, _ALL]
        for dev, by_width in _core.gpu_timeline_parts(trace, self.lo, widths, own_from, own_to).items():
            for width, rows in zip(widths, by_width):
                if width == _ALL:
                    cells = {0: self.total.setdefault(dev, [0, 0.0])}
                else:
                    cells = self.cells[width].setdefault(dev, {})
                for bucket, busy, sm in rows:
                    cell = cells.setdefault(bucket, [0, 0.0])
                    cell[0] += busy
                    cell[1] += sm

    def result(self) -> dict:
        if self.lo is None or self.hi <= self.lo or not self.total:
            return {}
        span = self.hi - self.lo
        width = next(w for w in _WIDTHS if span // w <= _MAX_BUCKETS)
        n = max(1, span // width)
        out = {}
        for dev in sorted(self.total):
            raw = self.cells[width].get(dev, {}) if width in self.cells else {0: self.total[dev]}
            sums = [[0, 0.0] for _ in range(n)]
            for bucket, (busy, sm) in sorted(raw.items()):
                cell = sums[min(bucket, n - 1)]  # the last bucket runs to the trace's end
                cell[0] += busy
                cell[1] += sm
            rows = []
            for b, (busy, sm) in enumerate(sums):
                start = self.lo + b * width
                dur = (start + width if b + 1 < n else self.hi) - start
                rows.append(
                    {
                        "start_us": start / 1000.0,
                        "dur_us": dur / 1000.0,
                        "utilization_pct": 100.0 * busy / dur if dur > 0 else 0.0,
                        "sm_efficiency_pct": 100.0 * sm / dur if dur > 0 else 0.0,
                    }
                )
            out[str(dev)] = rows
        return out


class LaunchRows:
    """``Trace.compiled_launches`` of the whole trace from its windows': one row per distinct kernel
    and launch args, in the order the windows first saw them (launches counted where the windows
    overlap too: the report does not show them)."""

    def __init__(self) -> None:
        self.rows: dict = {}

    def add(self, trace) -> None:
        for row in getattr(trace, "compiled_launches", None) or []:
            key = json.dumps([row.get(k) for k in ("name", "backend", "kernel_file", "kernel_hash", "grid")])
            acc = self.rows.setdefault(key, {**row, "launches": 0})
            acc["launches"] += row.get("launches") or 0

    def result(self) -> list:
        return list(self.rows.values())


def _insert(data: dict, key: str, value, after: tuple) -> dict:
    """``data`` with ``key`` set, placed after the last of ``after`` it holds when new."""
    if key in data:
        data[key] = value
        return data
    out: dict = {}
    at = max((i for i, k in enumerate(data) if k in after), default=len(data) - 1)
    for i, (k, v) in enumerate(data.items()):
        out[k] = v
        if i == at:
            out[key] = value
    if key not in out:
        out[key] = value
    return out


def add_whole_views(data: dict, *, timeline: TimelineMerge, samples_trace, launches: LaunchRows) -> dict:
    """The GPU timeline, the GPU samples with each step's energy, and torch.compile's regions into
    the merged report dict (its steps, operators and kernels done); returns it."""
    from . import _add_compiled_kernel_facts, _add_energy, _compiled_regions, _gpu_sample_row

    data["gpu_timeline"] = timeline.result()
    data["gpu_samples"] = [_gpu_sample_row(row) for row in _core.gpu_samples(samples_trace)]
    data.pop("energy", None)
    from .spill import each_row

    def drop_energy(s: dict) -> None:  # drawn again from the whole trace's samples below
        for k in ("energy_j", "mean_power_w", "energy_per_sample_j", "device_energy_j"):
            s.pop(k, None)

    each_row(data["steps"], drop_energy)
    if data["gpu_samples"]:
        _add_energy(data, samples_trace, None)
        energy = data.pop("energy")
        data = _insert(data, "energy", energy, ("gpu_samples",))
    rows = launches.result()
    from ..traces.inductor_code import output_code_provenance
    from .compiled_flops import kernel_facts

    provenance = output_code_provenance(rows) if rows else None
    compiled = _compiled_regions(
        data.get("operators") or [],
        None,
        data.get("kernels") or [],
        provenance,
        rows if (data.get("source") or {}).get("kind") == "trace" else None,
    )
    if compiled.get("compiled_kernels"):
        # A trace's provenance names operators, not FLOPs (those come from a live span's Inductor):
        # each row's module, source and FLOPs stay null, as in the whole trace's report.
        _add_compiled_kernel_facts(compiled, kernel_facts(provenance), data)
    data.pop("compiled", None)
    if compiled:
        data = _insert(data, "compiled", compiled, ("collectives", "collective_calls"))
    return data


class StepViewMerge:
    """The HTML's step views of a windowed read: ``add`` each window's trace, its ``native`` pieces
    and owned steps (its per-step top kernels and operators); ``result`` draws the slowest and the
    median step of the merged steps from the window(s) owning them, read again by ``reread(i)``."""

    def __init__(self, file=None) -> None:
        from .spill import RowFile, SpilledMapping

        self.tops = SpilledMapping(file or RowFile())  # the owned steps' tops, on disk
        self.owners: list = []  # per window: (its index, its owned steps' numbers), 8 bytes a step

    def add(self, index: int, trace, native: dict, steps: list) -> None:
        from . import TOP_PER_STEP, step_tops

        self.owners.append((index, [s["step"] for s in steps]))
        try:
            self.owners[-1] = (index, array("q", self.owners[-1][1]))
        except (TypeError, OverflowError):
            pass  # (step numbers that are not 64-bit integers: kept as a list)
        tables = _core.step_event_tables(
            trace,
            [(s["start_ns"], s["end_ns"]) for s in steps],
            TOP_PER_STEP,
            native.get("repeated_op_calls"),
        )
        self.tops.extend(step_tops(steps, tables).items())

    def _owner(self, step) -> int:
        """The window owning ``step`` (the last one, as a step number seen twice was)."""
        return next(i for i, numbers in reversed(self.owners) if step in numbers)

    def result(self, steps: list, modules: list, reread) -> dict:
        """``reread(i)``: window i's (trace, report dict, native pieces) again."""
        from . import TIMELINE_EVENT_CAP, drawn_steps, outlier_steps, step_timeline_view

        if not steps:
            return {"timelines": [], "per_step": {}, "outliers": [], "event_cap": TIMELINE_EVENT_CAP}
        merged_row = {m["path"]: i for i, m in enumerate(modules or [])}
        timelines = []
        for label, step in drawn_steps(steps):
            trace, window_data, native = reread(self._owner(step["step"]))
            view = step_timeline_view(
                trace,
                label,
                step,
                module_of_event=native.get("module_of_event"),
                breakdown_steps=native.get("breakdown_steps"),
                critical_path_kept=native.get("critical_path_kept"),
            )
            if "module_of" in view:  # the window's module rows -> the merged tree's rows, by path
                own = [merged_row.get(m["path"], -1) for m in window_data.get("modules") or []]
                view["module_of"] = [own[r] if 0 <= r < len(own) else -1 for r in view["module_of"]]
            timelines.append(view)
        per_step = self.tops
        return {
            "timelines": timelines,
            "per_step": per_step,
            "outliers": outlier_steps(steps),
            "event_cap": TIMELINE_EVENT_CAP,
        }
