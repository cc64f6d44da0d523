"""The HTML report's chart geometry and its per-step stacked bars. The bars are made as the template
draws them, a step at a time (``Bars``): a windowed read's steps on disk (``analysis.spill``) are
read in order and no bar outlives its step, so the chart costs the same memory for a million steps
as for ten."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Optional

from . import sections as sec

CHART_W, CHART_H = 760, 240
PAD_L, PAD_R, PAD_T, PAD_B = 64, 30, 12, 36


def nice_ticks(vmax: float, n: int = 4) -> list[float]:
    """Round axis ticks from 0 to at least ``vmax`` (steps of 1, 2, 2.5 or 5 x 10^k)."""
    if vmax <= 0:
        return [0.0, 1.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    count = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def y_of(v: float, vmax: float) -> float:
    return PAD_T + (CHART_H - PAD_T - PAD_B) * (1.0 - (v / vmax if vmax > 0 else 0.0))


class Bars:
    """The step chart's bars, one dict a step, made while iterated (each pass reads the steps
    again): ``rects`` (a category's part of the step each), ``label``, ``lx``, ``step``, ``outlier``
    and ``top``."""

    def __init__(self, steps, shown: list, colors: dict, outliers: set, vmax_ms: float) -> None:
        self._steps, self._shown, self._colors = steps, shown, colors
        self._outliers, self._vmax_ms = outliers, vmax_ms

    def __len__(self) -> int:
        return len(self._steps)

    def __iter__(self) -> Iterator[dict]:
        steps, vmax_ms = self._steps, self._vmax_ms
        slot = (CHART_W - PAD_L - PAD_R) / len(steps)
        bar_w = max(1.0, slot * 0.7)
        label_every = max(1, len(steps) // 20)
        for i, s in enumerate(steps):
            x = PAD_L + i * slot + (slot - bar_w) / 2
            base_ms = 0.0
            rects = []
            for key, name in self._shown:
                ms = s.get(f"{key}_us", 0.0) / 1000.0
                if ms <= 0:
                    continue
                y_top = y_of(base_ms + ms, vmax_ms)
                y_bot = y_of(base_ms, vmax_ms)
                rects.append(
                    {
                        "x": round(x, 2),
                        "y": round(y_top, 2),
                        "w": round(bar_w, 2),
                        "h": round(max(y_bot - y_top, 0.5), 2),
                        "color": self._colors[key],
                        "tip": f"step {s['step']}: {name} {ms:.3f} ms",
                    }
                )
                base_ms += ms
            yield {
                "rects": rects,
                "label": str(s["step"]) if i % label_every == 0 else "",
                "lx": round(x + bar_w / 2, 2),
                "step": s["step"],
                "outlier": s["step"] in self._outliers,
                "top": min([r["y"] for r in rects] or [y_of(0, vmax_ms)]),
            }


def step_chart(report, colors: dict) -> Optional[dict]:
    """Per-step stacked bars in milliseconds, categories in priority order from the bottom; the
    bars a list, or a ``Bars`` (made as drawn) for a windowed read's steps on disk."""
    from ..analysis.spill import SpilledRows

    steps = report.steps
    if not steps:
        return None
    shown = sec.shown_categories(report)
    outliers = set(sec.step_views(report.data).get("outliers", []))
    vmax_ms = max(s["total_us"] for s in steps) / 1000.0 or 1.0
    ticks = nice_ticks(vmax_ms)
    vmax_ms = max(vmax_ms, ticks[-1])
    bars = Bars(steps, shown, colors, outliers, vmax_ms)
    return {
        "w": CHART_W,
        "h": CHART_H,
        "bars": bars if isinstance(steps, SpilledRows) else list(bars),
        "yticks": [{"y": round(y_of(t, vmax_ms), 2), "label": f"{t:g}"} for t in ticks],
        "x0": PAD_L,
        "x1": CHART_W - PAD_R,
        "ybase": CHART_H - PAD_B,
        "ylabel": "ms",
        "legend": [{"name": n, "color": colors[k]} for k, n in shown],
    }
