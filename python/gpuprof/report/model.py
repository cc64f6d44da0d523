"""The Report: everything one span (or one imported trace) showed, in one documented schema.

A Report is read-only: ``gpuprof.report.build.build_report`` makes it whole (analysis, cross-rank
section, advice, step views) and nothing edits it afterwards. Renderers read it through ``data``
and the accessors below and never compute a metric. docs/schema.md documents ``to_dict()``; later
versions add keys, never remove or rename one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from .._build_info import GPUPROF_VERSION
from ..analysis import CATEGORIES, SCHEMA_VERSION, fields, section  # noqa: F401  (re-exported)


class Report:
    """Per-step breakdown, averages, tables, advice and settings of one profiled span or trace."""

    def __init__(self, data: dict, trace: Optional[Any] = None) -> None:
        """Reports are made by ``gpuprof.report.build.build_report`` (or read back with ``from_dict``
        and ``load``): ``data`` is a whole report (docs/schema.md), owned by this Report from now on."""
        self._data = data
        self._trace = trace  # the native Trace the numbers came from (None when loaded from JSON)
        self._trace_path: Optional[str] = None  # where this report's Chrome trace was written
        # Writes the Chrome trace to a path when the native Trace is not held (a trace read in
        # windows: analysis/windowed_export.py)
        self._trace_writer: Optional[Any] = None
        self._span_end: dict = {}  # report_build_s, report_write_s (record_span_end)
        self._view: Optional[Mapping] = None

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> Report:
        """A saved report (``to_dict()`` or its JSON). One written before advice existed, or a
        hand-built dict without ``advice``, is advised here, once."""
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(
                f"report schema_version {version!r} is not one this gpuprof ({GPUPROF_VERSION}) "
                f"reads (it reads up to {SCHEMA_VERSION}); upgrade gpuprof to read it"
            )
        if "advice" in data:
            return cls(data)
        from ..advice import advise

        return cls({**data, "advice": advise(data)})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Report:
        from ..traces.read import read_json

        return cls.from_dict(read_json(path))

    # ---- access ---------------------------------------------------------------------------------
    @property
    def data(self) -> Mapping[str, Any]:
        """The whole report, read-only at its top level (``to_dict()`` gives a copy to change)."""
        if self._view is None:
            data = self._data
            if self._trace_path is not None or self._span_end:
                source = {**data.get("source", {}), **self._span_end}
                if self._trace_path is not None:
                    source["trace_path"] = self._trace_path
                data = {**data, "source": source}
            self._view = MappingProxyType(data)
        return self._view

    @property
    def trace(self):
        """The native Trace the numbers came from; None for a report loaded from JSON, or one a
        session has let go of (``release_trace``)."""
        return self._trace

    @property
    def writes_trace(self) -> bool:
        """Whether saving this report can write its Chrome trace: it holds its native trace, or it
        was read in windows and its trace file can be read again, window by window."""
        return self._trace is not None or self._trace_writer is not None

    def _set_trace_writer(self, write) -> None:
        """``write(path)`` writes this report's Chrome trace, for a report that holds no native trace."""
        self._trace_writer = write

    def release_trace(self) -> None:
        """Let the native Trace go (a long session keeps only its latest spans' traces)."""
        self._trace = None

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
    def metadata(self) -> dict:
        return self._data.get("metadata", {})

    @property
    def source(self) -> dict:
        """Where the report came from: ``kind`` ("live" or "trace"), and for a trace its ``path``."""
        return self.data.get("source", {})

    @property
    def advice(self) -> list[dict]:
        """The ranked recommendations (docs/advice.md), computed when the report was built."""
        return self._data.get("advice", [])

    def advise(self, rules=None) -> list[dict]:
        """Run the advice rules on this report again and return what fires (``rules`` limits the
        run to those rule ids); the report's own ``advice`` does not change."""
        from ..advice import advise

        return advise(self._data, rules=rules)

    def record_span_end(self, *, build_s: Optional[float] = None, write_s: Optional[float] = None) -> None:
        """What gpuprof's own work at a live span's end took, between two training steps and counted
        in neither (docs/schema.md, ``source.report_build_s`` and ``report_write_s``): recorded by
        the session once the report is built, and once ``on_trace_ready`` has written it. Besides
        where its Chrome trace was written, the only things a Report records after it is built."""
        if build_s is not None:
            self._span_end["report_build_s"] = round(float(build_s), 3)
        if write_s is not None:
            self._span_end["report_write_s"] = round(float(write_s), 3)
        self._view = None

    # ---- the trace beside the report ------------------------------------------------------------
    @property
    def trace_path(self) -> Optional[str]:
        """Where this report's Chrome trace was written (open it in https://ui.perfetto.dev with
        "Open trace file", or in chrome://tracing); None when it was not written."""
        return self.data.get("source", {}).get("trace_path")

    def _written_trace(self, path: str | os.PathLike, trace) -> None:
        """Write the Chrome trace for a report file at ``path``, once: ``trace=True`` puts it beside
        the file (``<stem>.trace.json.gz``), a path puts it there, False writes none. A report
        loaded from JSON has no trace to write."""
        if trace is False or trace is None or not self.writes_trace or self.trace_path:
            return
        from ..traces.export import export_chrome_trace

        if trace is True:
            stem = os.path.basename(os.fspath(path))
            for ext in (".json", ".html", ".md", ".markdown"):
                if stem.endswith(ext):
                    stem = stem[: -len(ext)]
                    break
            trace = os.path.join(os.path.dirname(os.path.abspath(path)), f"{stem}.trace.json.gz")
        if self._trace is not None:
            export_chrome_trace(self._trace, trace)
        else:
            self._trace_writer(trace)
        self._trace_path = os.fspath(trace)
        self._view = None

    def to_dict(self) -> dict:
        import json

        from ..analysis.spill import json_default

        # A deep copy the caller may change (a windowed read's per-step rows read from disk).
        return json.loads(json.dumps(dict(self.data), default=json_default))

    def to_json(self, path: str | os.PathLike | None = None, *, indent: int = 2, trace=True) -> str:
        """The report as JSON; written to ``path`` if given, with the Chrome trace beside it
        (``<stem>.trace.json.gz``; ``trace=PATH`` writes it there) unless ``trace=False`` or the
        report has no trace."""
        from .renderers import JSON

        return self._write(JSON, path, trace, indent=indent)

    # ---- rendering ------------------------------------------------------------------------------
    def to_text(self, *, color: Optional[bool] = None, width: Optional[int] = None) -> str:
        from .renderers import TEXT

        return TEXT.render(self, color=color, width=width)

    def to_markdown(self, path: str | os.PathLike | None = None, *, trace=True) -> str:
        """The summary as Markdown (CI comments, job summaries); written to ``path`` if given, with
        the Chrome trace beside it unless ``trace=False``."""
        from .renderers import MARKDOWN

        return self._write(MARKDOWN, path, trace)

    def to_html(self, path: str | os.PathLike | None = None, *, trace=True) -> str:
        """The one-file HTML report (no network needed to view it); written to ``path`` if given,
        with the Chrome trace beside it unless ``trace=False``."""
        from .renderers import HTML

        return self._write(HTML, path, trace, written_to=path)

    def _write(self, renderer, path, trace, **options) -> str:
        if path is not None:
            self._written_trace(path, trace)
        text = renderer.render(self, **options)
        if path is not None:
            from ..traces.atomic import write_text

            write_text(path, text, renderer.file_end)  # whole or not at all: never a truncated file
        return text

    def _save_html(self, path: str | os.PathLike, *, trace=True) -> None:
        """``to_html(path, trace=trace)`` without the text in memory: the page is written to the
        file a piece at a time (a windowed read's per-step rows read from their file as it goes),
        and nothing is returned."""
        from .renderers import HTML

        self._written_trace(path, trace)
        HTML.write_file(self, path)

    def _repr_html_(self) -> str:
        from .renderers import HTML

        return HTML.render(self, full=False)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (
            f"<gpuprof.Report {len(self.steps)} steps, mean step "
            f"{fmt_duration_us(self.average.get('total_us', 0))}, {self.counts['events']:,} events>"
        )


def _table_accessor(key: str, doc: str) -> property:
    def rows(self: Report) -> list[dict]:
        return section(self._data, key)

    rows.__doc__ = doc
    return property(rows)


# The analysis tables (analysis/fields.py declares them; docs/metrics.md defines every column):
# ``report.<key>``, lists of row dicts, [] when the report has no such section (a CPU-only run has
# no kernels, copies or devices).
for _t in fields.TABLES:
    setattr(Report, _t.key, _table_accessor(_t.key, _t.doc or f"{_t.title}: the ``{_t.key}`` rows."))


def fmt_duration_us(us: float) -> str:
    """A duration in the unit a person reads: ``850 us``, ``43.0 ms``, ``200.2 s``."""
    us = float(us or 0)
    if us >= 1e6:
        return f"{us / 1e6:.1f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"
