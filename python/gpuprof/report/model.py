"""The Report: everything one span (or one imported trace) showed, in one documented schema.

Renderers read it and never compute a metric; the numbers come from the C++ analysis.
docs/schema.md documents ``to_dict()``; later versions add keys, never remove or rename one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from .. import _build_info
from ..analysis import CATEGORIES, SCHEMA_VERSION, analyse, section  # noqa: F401


class Report:
    """Per-step breakdown, averages, DataLoader settings and counts of one profiled span."""

    def __init__(self, data: dict, trace: Optional[Any] = None) -> None:
        self._data = data
        self.trace = trace   # the native Trace the numbers came from (None when loaded from JSON)
        self._native: dict = {}   # from_trace: what the analysis hands on to the step views

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_trace(cls, trace, *, dataloaders: Optional[list] = None, host: Optional[dict] = None,
                   source: Optional[dict] = None, drop_incomplete_last_step: bool = True) -> "Report":
        """analyse -> advise -> Report: the numbers of ``trace`` (gpuprof.analysis), then the advice."""
        native: dict = {}
        data = analyse(trace, dataloaders=dataloaders, host=host, source=source,
                       drop_incomplete_last_step=drop_incomplete_last_step, native=native)
        report = cls(data, trace)
        report._native = native   # reused by the step views (not part of the report)
        report.advise()
        return report

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

    # The analysis tables (docs/metrics.md defines every column): lists of row dicts, [] when the
    # report has no such section (a CPU-only run has no kernels, copies or devices).
    @property
    def kernels(self) -> list[dict]:
        """GPU kernels, one row per kernel name and device (device times)."""
        return section(self._data, "kernels")

    @property
    def operators(self) -> list[dict]:
        """Operators (aten:: and user-visible ops), one row per name: calls, host and device times."""
        return section(self._data, "operators")

    @property
    def copies(self) -> list[dict]:
        """Memory copies and sets, one row per kind and device."""
        return section(self._data, "copies")

    @property
    def syncs(self) -> list[dict]:
        """Host-device synchronisations, one row per kind."""
        return section(self._data, "syncs")

    @property
    def memory(self) -> list[dict]:
        """Memory per step: GPU allocated/reserved (device >= 0) and host RSS (device -1)."""
        return section(self._data, "memory")

    @property
    def ranges(self) -> list[dict]:
        """User ranges (record_function, NVTX), one row per name: calls, host time, closure."""
        return section(self._data, "ranges")

    @property
    def devices(self) -> list[dict]:
        """The GPU summary, one row per device."""
        return section(self._data, "devices")

    @property
    def gpu_samples(self) -> list[dict]:
        """NVML samples over the span."""
        return section(self._data, "gpu_samples")

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

    # ---- the trace beside the report ------------------------------------------------------------
    @property
    def trace_path(self) -> Optional[str]:
        """Where this report's Chrome trace was written (open it in https://ui.perfetto.dev with
        "Open trace file", or in chrome://tracing); None when it was not written."""
        return self._data.get("source", {}).get("trace_path")

    def set_trace_path(self, path: str | os.PathLike) -> None:
        self._data.setdefault("source", {})["trace_path"] = os.fspath(path)

    def _write_trace_beside(self, path: str | os.PathLike, trace: bool) -> None:
        """A live (or imported) report written to ``path`` gets ``<stem>.trace.json.gz`` beside it,
        written once, so that every report file says where its trace is. ``trace=False`` skips it;
        a report loaded from JSON has no trace to write."""
        if not trace or self.trace is None or self.trace_path:
            return
        from ..export import export_chrome_trace

        stem = os.path.basename(os.fspath(path))
        for ext in (".json", ".html", ".md", ".markdown"):
            if stem.endswith(ext):
                stem = stem[: -len(ext)]
                break
        target = os.path.join(os.path.dirname(os.path.abspath(path)), f"{stem}.trace.json.gz")
        export_chrome_trace(self.trace, target)
        self.set_trace_path(target)

    def _ensure_step_views(self) -> None:
        """Add ``step_views`` (the HTML's timeline and drill-down data) once, from the trace."""
        if "step_views" not in self._data and self.trace is not None:
            from ..analysis import step_views

            self._data["step_views"] = step_views(self.trace, self.steps,
                                                  repeated_op_calls=self._native.get("repeated_op_calls"))

    def to_dict(self) -> dict:
        self._ensure_step_views()
        return json.loads(json.dumps(self._data))   # a deep copy the caller may change

    def to_json(self, path: str | os.PathLike | None = None, *, indent: int = 2, trace: bool = True) -> str:
        """The report as JSON; written to ``path`` if given, with the Chrome trace beside it
        (``<stem>.trace.json.gz``) unless ``trace=False`` or the report has no trace."""
        if path is not None:
            self._write_trace_beside(path, trace)
        self._ensure_step_views()
        text = dumps_report(self._data, indent=indent)
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
    def to_markdown(self, path: str | os.PathLike | None = None, *, trace: bool = True) -> str:
        """The summary as Markdown (CI comments, job summaries); written to ``path`` if given, with
        the Chrome trace beside it unless ``trace=False``."""
        from .markdown import render_markdown

        if path is not None:
            self._write_trace_beside(path, trace)
        text = render_markdown(self)
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_html(self, path: str | os.PathLike | None = None, *, trace: bool = True) -> str:
        """The one-file HTML report (no network needed to view it); written to ``path`` if given,
        with the Chrome trace beside it unless ``trace=False``."""
        from .html import render_html

        if path is not None:
            self._write_trace_beside(path, trace)
        self._ensure_step_views()
        text = render_html(self, full=True)
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def _repr_html_(self) -> str:
        from .html import render_html

        self._ensure_step_views()
        return render_html(self, full=False)
    # ---- end of other formats --------------------------------------------------------------------

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (f"<gpuprof.Report {len(self.steps)} steps, mean step "
                f"{fmt_duration_us(self.average.get('total_us', 0))}, {self.counts['events']:,} events>")


def fmt_duration_us(us: float) -> str:
    """A duration in the unit a person reads: ``850 us``, ``43.0 ms``, ``200.2 s``."""
    us = float(us or 0)
    if us >= 1e6:
        return f"{us / 1e6:.1f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def dumps_report(data: dict, *, indent: Optional[int] = 2) -> str:
    """A report dict as JSON text: indented for people, except ``step_views`` (the HTML's timeline
    events, nine tenths of the file), which is written compact on one line, last. Indenting it made
    the file 3x larger and was the slowest part of ``gpuprof analyze --json`` after the import."""
    if indent is None or "step_views" not in data:
        return json.dumps(data, indent=indent)
    rest = {k: v for k, v in data.items() if k != "step_views"}
    views = json.dumps(data["step_views"], separators=(",", ":"))
    if not rest:
        return '{"step_views": ' + views + "}"
    text = json.dumps(rest, indent=indent)
    return text[:-2] + ",\n" + " " * indent + '"step_views": ' + views + "\n}"
