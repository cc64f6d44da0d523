"""The HTML report's time-series charts (memory, GPU timeline, NVML): polylines against time, made
in passes over the rows that hold none of them but the points drawn, so that a windowed read's
per-step memory rows on disk (``analysis.spill``) are read from their file a chunk at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

from . import sections as sec
from .step_chart import CHART_H, CHART_W, PAD_B, PAD_L, PAD_R, nice_ticks, y_of

SERIES_COLORS = ["#3867d6", "#eb3b5a", "#2e9e44", "#f7b731", "#a55eea", "#17a2b8", "#fa8231", "#778ca3"]
#: Points of a line drawn as they are; more are thinned to the lowest and highest per pixel.
MAX_POINTS = 2 * (CHART_W - PAD_L - PAD_R)


class DeviceRows:
    """One device's rows of a sequence (``device`` or ``device_id``), read from it on each pass."""

    def __init__(self, rows, device, count: int) -> None:
        self._rows, self._device, self._count = rows, device, count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict]:
        device = self._device
        return (r for r in self._rows if r.get("device", r.get("device_id")) == device)


def by_device(rows) -> list:
    """``sections.by_device``: the rows grouped by device, in order; over a windowed read's rows on
    disk each group a ``DeviceRows`` (the rows read again), not a list of them."""
    from ..analysis.spill import SpilledRows

    if not isinstance(rows, SpilledRows):
        return sec.by_device(rows)
    counts: dict = {}
    for r in rows:
        device = r.get("device", r.get("device_id"))
        counts[device] = counts.get(device, 0) + 1
    return [(device, DeviceRows(rows, device, n)) for device, n in counts.items()]


def _ascending(rows, tkey: str) -> bool:
    last = None
    for r in rows:
        if last is not None and r[tkey] < last:
            return False
        last = r[tkey]
    return True


def line_chart(rows, ykeys: list[str], title: str, marks: Optional[list] = None) -> Optional[dict]:
    """Polylines of ``ykeys`` against the rows' time column (seconds from the first sample).
    ``marks``: ``{"t": time in the rows' unit, "y": a value (a dot) or None (a vertical line),
    "label"}`` drawn over them where they fall inside the chart. ``rows``: a list, or a
    ``DeviceRows`` (read in passes; sorted in memory only when their times do not ascend)."""
    tkey = sec.time_key(rows)
    if tkey is None or len(rows) < 1 or not ykeys:
        return None
    if not _ascending(rows, tkey):
        rows = sorted(rows, key=lambda r: r[tkey])
    t0 = sec.seconds(tkey, next(iter(rows))[tkey])
    tmax = max(sec.seconds(tkey, r[tkey]) - t0 for r in rows) or 1.0
    is_bytes = all(k.endswith("_bytes") for k in ykeys)
    scale = 1.0
    unit = ykeys[0].rsplit("_", 1)[-1] if "_" in ykeys[0] else ""
    vmax = max((r.get(k) for r in rows for k in ykeys if isinstance(r.get(k), (int, float))), default=0.0)
    if is_bytes:
        scale, unit = (2**30, "GiB") if vmax >= 2**30 else (2**20, "MiB")
    elif unit == "pct":
        unit, vmax = "%", max(vmax, 100.0)
    vmax = vmax / scale or 1.0
    ticks = nice_ticks(vmax)
    vmax = max(vmax, ticks[-1])
    plot_w = CHART_W - PAD_L - PAD_R
    lines = []
    for i, k in enumerate(ykeys):
        pts = thin(
            (PAD_L + plot_w * (sec.seconds(tkey, r[tkey]) - t0) / tmax, y_of(r[k] / scale, vmax))
            for r in rows
            if isinstance(r.get(k), (int, float))
        )
        if len(pts) == 1:  # one sample: a short flat segment, so that it shows
            pts.append((pts[0][0] + 4, pts[0][1]))
        lines.append(
            {
                "name": sec.series_name(k),
                "color": SERIES_COLORS[i % len(SERIES_COLORS)],
                "points": " ".join(f"{x:.1f},{y:.1f}" for x, y in pts),
            }
        )
    xticks = [
        {"x": round(PAD_L + plot_w * f, 1), "label": f"{tmax * f:.3g} s"} for f in (0, 0.25, 0.5, 0.75, 1)
    ]
    drawn_marks = []
    for m in marks or []:
        t = sec.seconds(tkey, m["t"]) - t0
        if not 0 <= t <= tmax:
            continue
        x = round(PAD_L + plot_w * t / tmax, 1)
        y = m.get("y")
        drawn_marks.append(
            {"x": x, "y": None if y is None else round(y_of(y / scale, vmax), 1), "label": m.get("label", "")}
        )
    return {
        "w": CHART_W,
        "h": CHART_H,
        "title": title,
        "lines": lines,
        "marks": drawn_marks,
        "xticks": xticks,
        "yticks": [{"y": round(y_of(t, vmax), 2), "label": f"{t:g}"} for t in ticks],
        "x0": PAD_L,
        "x1": CHART_W - PAD_R,
        "ybase": CHART_H - PAD_B,
        "ylabel": unit,
    }


def thin(pts) -> list[tuple[float, float]]:
    """The points (an iterable, in order), or, when there are more than ``MAX_POINTS``, at most the
    lowest and highest point per horizontal pixel, in order (the first of equals): the drawn line
    looks the same (peaks included) while a 200k-sample series stays a few kilobytes. Holds at most
    ``MAX_POINTS`` points and one pixel's lowest and highest."""
    it = iter(pts)
    kept: list[tuple[float, float]] = []
    for p in it:
        kept.append(p)
        if len(kept) > MAX_POINTS:
            break
    else:
        return kept
    out: list[tuple[float, float]] = []
    column = None  # the pixel's int(x), its lowest and highest points and where they came
    lo = hi = (0.0, 0.0)
    lo_at = hi_at = at = 0
    for p in _chain(kept, it):
        if column is None or int(p[0]) != column:
            if column is not None:
                out.extend([lo, hi] if lo_at <= hi_at else [hi, lo])
            column, lo, hi, lo_at, hi_at, at = int(p[0]), p, p, 0, 0, 0
        else:
            if p[1] < lo[1]:
                lo, lo_at = p, at
            if p[1] > hi[1]:
                hi, hi_at = p, at
        at += 1
    out.extend([lo, hi] if lo_at <= hi_at else [hi, lo])
    return out


def _chain(first: list, rest: Iterator) -> Iterator:
    yield from first
    yield from rest


def time_series_charts(
    rows, groups: list[tuple[str, tuple[str, ...]]], what: str, marks: Optional[dict] = None
) -> list[dict]:
    charts = []
    for device, dev_rows in by_device(rows):
        for label, suffixes in groups:
            keys = sec.series_keys(dev_rows, suffixes)
            where = "host" if device == -1 else f"GPU {device}"  # device -1: the host's rows
            if what == "Memory":  # one chart per place: "Host memory", "GPU 0 memory"
                title = f"{where[0].upper()}{where[1:]} memory" if device is not None else "Memory"
            else:
                title = f"{what}, {where}: {label}" if device is not None else f"{what}: {label}"
            chart = line_chart(dev_rows, keys, title, (marks or {}).get(device))
            if chart:
                charts.append(chart)
    return charts
