"""What an out-of-memory error that ends the profiled block leaves: a report of the failure."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Optional

from .._host import cpus_available, cuda_host_facts
from .._native import _core
from ..collect import hooks as _hooks_loader
from ..collect.oom import failure_facts, is_out_of_memory
from ..report.build import build_report
from ..report.model import Report
from .span_report import _loader_batch_size

log = logging.getLogger("gpuprof")


class OutOfMemoryReports:
    """The out-of-memory part of ``gpuprof.profile``."""

    # ---- out of memory --------------------------------------------------------------------------
    # When torch's out-of-memory error leaves the block, the report of what was recorded carries an
    # out_of_memory section (what filled the device, the batch that fits): the span in progress,
    # or, outside a recorded span, a report of the failure alone (with the last span's figures). It
    # goes where the session's spans go (on_trace_ready), or, without on_trace_ready, to
    # gpuprof-oom-<pid>.json and .html in the working directory ($GPUPROF_OOM_DIR); stderr says
    # what filled memory and where the report is. The error itself is raised again unchanged by
    # __exit__'s caller (docs/memory.md).
    def _out_of_memory_facts(self, exc: Optional[BaseException]) -> Optional[dict]:
        if not is_out_of_memory(exc):
            return None
        try:
            facts = failure_facts(
                exc, self._tensors, self.batch_size or _loader_batch_size(self._capture.records())
            )
            last = self._report
            if last is not None:
                facts["last_span"] = {
                    k: last.data.get(k)
                    for k in ("memory_composition", "memory_peak", "memory", "dataloaders")
                }
            return facts
        except Exception:  # the user's error comes first: no report beats a second exception
            log.exception("gpuprof: could not read the state at the out-of-memory error")
            return None

    def _report_out_of_memory(self, failure: dict, reported: bool) -> None:
        try:
            if not reported:
                self._finish_failure(failure)
            report = self._report
            written = [] if self.on_trace_ready is not None else self._write_failure_report(report)
            from ..report.text import out_of_memory_summary

            where = (
                f"report: {', '.join(written)}"
                if written
                else ("report: passed to on_trace_ready" if self.on_trace_ready is not None else "")
            )
            print(
                out_of_memory_summary(report) + (f"\ngpuprof: {where}" if where else ""),
                file=sys.stderr,
                flush=True,
            )
        except Exception:  # the user's error comes first
            log.exception("gpuprof: could not report the out-of-memory error")

    def _finish_failure(self, failure: dict) -> None:
        """The report of an out-of-memory error outside a recorded span: the failure's own figures,
        with the last span's (if any) for the per-sample activations."""
        last = failure.get("last_span") or {}
        trace = _core.Trace()
        trace.metadata = {
            "source": "gpuprof live session",
            "pid": str(os.getpid()),
            "torch": _hooks_loader.installed_torch_version() or "",
        }
        report = build_report(
            trace,
            source={
                "kind": "out_of_memory",
                "span": self._spans_completed,
                "created_unix": time.time(),
                "note": f"out of memory at step {self.step_num}, outside the recorded steps"
                + (
                    f"; the figures per sample come from span {self._report.source.get('span')}"
                    if self._report
                    else ""
                ),
            },
            dataloaders=last.get("dataloaders") or self._capture.records(),
            host={"cpus_available": cpus_available(), "cpu_count": os.cpu_count(), **cuda_host_facts()},
            failure=failure,
        )
        self._reports.append(report)
        self._report = report
        self._spans_completed += 1
        if self.on_trace_ready is not None:
            try:
                self.on_trace_ready(self)
            except Exception:
                log.exception("gpuprof: on_trace_ready raised while the profiled block was failing")

    def _write_failure_report(self, report: Report) -> list[str]:
        from ..traces.export import save_report_files

        folder = os.environ.get("GPUPROF_OOM_DIR") or os.getcwd()
        stem = os.path.join(folder, f"gpuprof-oom-{os.getpid()}")
        written, failed = save_report_files(
            report, [(stem + ".json", "json"), (stem + ".html", "html")], False
        )
        if failed:
            log.warning("gpuprof: could not write the out-of-memory report: %s", "; ".join(failed))
        return written
