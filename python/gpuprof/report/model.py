"""The Report: everything one span (or one imported trace) showed, in one documented schema.

Renderers read it and never compute a metric; the numbers come from the C++ analysis.
docs/schema.md documents ``to_dict()``; later versions add keys, never remove or rename one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from .. import _build_info
from .._native import _core

SCHEMA_VERSION = 2   # 2: ranks, stragglers, cross_rank, distributed (distributed issue)

# (JSON key stem, display name), in the breakdown's priority order.
CATEGORIES: list[tuple[str, str]] = [tuple(c) for c in _core.CATEGORIES]


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


class Report:
    """Per-step breakdown, averages, DataLoader settings and counts of one profiled span."""

    def __init__(self, data: dict, trace: Optional[Any] = None) -> None:
        self._data = data
        self.trace = trace   # the native Trace the numbers came from (None when loaded from JSON)
        if trace is not None and "advice" not in data:
            self.advise()    # advice issue: a report built from a trace (from_trace) comes advised

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_trace(cls, trace, *, dataloaders: Optional[list] = None, host: Optional[dict] = None,
                   source: Optional[dict] = None, drop_incomplete_last_step: bool = True) -> "Report":
        # One native pass: the breakdown, and the GPU summary and tables over the same steps.
        analysed = _core.gpu_tables(trace, drop_incomplete_last_step)
        bd = analysed["breakdown"]
        steps = []
        for s in bd["steps"]:
            row = {"step": s["step"], "total_us": _us(s["total_ns"])}
            for key, _ in CATEGORIES:
                row[f"{key}_us"] = _us(s[f"{key}_ns"])
            row["start_ns"] = s["start_ns"]
            row["end_ns"] = s["end_ns"]
            steps.append(row)
        data = {
            "schema_version": SCHEMA_VERSION,
            "gpuprof_version": _build_info.GPUPROF_VERSION,
            "source": dict(source or {}),
            "steps": steps,
            "average": _average(steps),
            "step_rules": {
                "had_step_markers": bd["had_step_markers"],
                "dropped_trailing_steps": bd["dropped_trailing_steps"],
                "dropped_incomplete_last": bd["dropped_incomplete_last"],
            },
            "dataloaders": list(dataloaders or []),
            "host": dict(host or {}),
            "counts": {"events": trace.num_events, "dropped": int(trace.dropped_events),
                       "skipped": int(trace.skipped_events), "steps": len(steps)},
            "metadata": dict(trace.metadata),
        }
        # ---- GPU metrics (issue 3): per-device summary and the detail tables ----------------------
        # Lists of rows computed in C++ (cpp/src/analysis/gpu_summary.cpp, tables.cpp); unknown
        # numbers are None. docs/metrics.md defines every field.
        for key in ("devices", "kernels", "operators", "copies", "syncs", "memory"):
            data[key] = analysed[key]
        # NVML samples of the span (utilization, memory used, power, SM clock, temperature); -1 is
        # "not reported by this device" and becomes None.
        data["gpu_samples"] = [_gpu_sample_row(row) for row in _core.gpu_samples(trace)]
        # ---- end GPU metrics -----------------------------------------------------------------------
        return cls(data, trace)

    @classmethod
    def from_dict(cls, data: dict) -> "Report":
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(
                f"report schema_version {version!r} is not one this gpuprof ({_build_info.GPUPROF_VERSION}) "
                f"reads (it reads up to {SCHEMA_VERSION}); upgrade gpuprof to read it")
        return cls(data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Report":
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    # ---- access ---------------------------------------------------------------------------------
    @property
    def steps(self) -> list[dict]:
        return self._data["steps"]

    @property
    def average(self) -> dict:
        return self._data["average"]

    @property
    def dataloaders(self) -> list[dict]:
        return self._data["dataloaders"]

    @property
    def counts(self) -> dict:
        return self._data["counts"]

    @property
    def host(self) -> dict:
        return self._data["host"]

    @property
    def source(self) -> dict:
        """Where the report came from: ``kind`` ("live" or "trace"), and for a trace its ``path``."""
        return self._data.get("source", {})

    # ---- advice (advice issue: python/gpuprof/advice/) -----------------------------------------
    @property
    def advice(self) -> list[dict]:
        return self._data.get("advice", [])

    def advise(self, rules=None) -> list[dict]:
        """Run the advice rules on this report and store the ranked result in ``data["advice"]``.

        Reports built by ``from_trace`` are advised already; call it on a report from ``from_dict``
        or ``load`` (an older file, a hand-built dict) to (re)compute the advice. ``rules`` limits
        the run to those rule ids.
        """
        from ..advice import advise

        self._data["advice"] = advise(self._data, rules=rules)
        return self._data["advice"]
    # ---- end of advice ---------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return json.loads(json.dumps(self._data))   # a deep copy the caller may change

    def to_json(self, path: str | os.PathLike | None = None, *, indent: int = 2) -> str:
        text = json.dumps(self._data, indent=indent)
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    # ---- rendering ------------------------------------------------------------------------------
    def to_text(self, *, color: Optional[bool] = None, width: Optional[int] = None) -> str:
        from .text import render_text

        return render_text(self, color=color, width=width)

    # ---- other formats (reports issue: renderers in markdown.py and html.py) ----------------------
    def to_markdown(self, path: str | os.PathLike | None = None) -> str:
        """The summary as Markdown (CI comments, job summaries); written to ``path`` if given."""
        from .markdown import render_markdown

        text = render_markdown(self)
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_html(self, path: str | os.PathLike | None = None) -> str:
        """The one-file HTML report (no network needed to view it); written to ``path`` if given."""
        from .html import render_html

        text = render_html(self, full=True)
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def _repr_html_(self) -> str:
        from .html import render_html

        return render_html(self, full=False)
    # ---- end of other formats --------------------------------------------------------------------

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        avg = self.average
        return (f"<gpuprof.Report {len(self.steps)} steps, mean step {avg.get('total_us', 0):.1f} us, "
                f"{self.counts['events']} events>")


def _gpu_sample_row(raw: dict) -> dict:
    row = {k: (None if v == -1 and k != "device" else v) for k, v in raw.items() if k != "power_mw"}
    power_mw = raw.get("power_mw", -1)
    row["power_w"] = None if power_mw == -1 else power_mw / 1000.0
    return row


def _average(steps: list[dict]) -> dict:
    """Mean of each category over the steps, and its share of the mean step."""
    keys = ["total_us"] + [f"{k}_us" for k, _ in CATEGORIES]
    if not steps:
        out = {k: 0.0 for k in keys}
        out.update({f"{k}_pct": 0.0 for k, _ in CATEGORIES})
        return out
    out = {k: round(sum(s[k] for s in steps) / len(steps), 3) for k in keys}
    total = out["total_us"]
    for k, _ in CATEGORIES:
        out[f"{k}_pct"] = round(100.0 * out[f"{k}_us"] / total, 2) if total > 0 else 0.0
    return out
