"""A span's end: its trace drained, its report built (collect -> build) and handed on."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Optional

from .._host import cpu_budget_facts, cpus_available, cuda_host_facts
from .._native import _core
from ..collect import exchange as _distributed
from ..collect import hooks as _hooks_loader
from ..collect.dataloader import add_pipeline_events
from ..collect.inductor import generated_code_rows
from ..report.build import build_report, unbuilt_report
from ..report.model import Report

log = logging.getLogger("gpuprof")


class SpanReports:
    """The span-report part of ``gpuprof.profile``."""

    def _finish_span(
        self, partial: bool, failed: bool = False, peer_failure: bool = False, failure: Optional[dict] = None
    ) -> bool:
        """Build the span's report and hand it on; False when it could not be built (then the
        report says why, and an out-of-memory failure needs a report of its own)."""
        source = {
            "kind": "live",
            "partial_span": partial,
            "span": self._spans_completed,
            "created_unix": time.time(),
        }
        # The span's report is gpuprof's work on the training thread: a failure in it (memory, a
        # bug) is one warning, never an exception in prof.step() or the with block's exit. The
        # span's events stay in a report that says why it has no numbers (report_failed).
        built: list = []  # the Trace once drained
        started = time.perf_counter()
        try:
            report = self._build_span_report(source, partial, failed, peer_failure, failure, built)
            made = True
        except Exception as e:
            report = self._unbuilt_span_report(source, built[0] if built else None, e)
            made = False
        # gpuprof's own time between two steps (in neither: the next step starts when control goes
        # back to the loop), said in the report: building it, then on_trace_ready writing it.
        report.record_span_end(build_s=time.perf_counter() - started)
        if not partial:
            self._last_complete = {k: report.source.get(k) for k in ("span", "first_step", "last_step")}
        # reports() keeps the latest keep_reports spans (a deque drops the oldest), and only the two
        # latest keep their native trace, so a long run with repeat=0 holds a bounded amount.
        self._reports.append(report)
        if len(self._reports) > 2:
            self._reports[-3].release_trace()
        self._report = report
        self._spans_completed += 1
        if self.on_trace_ready is not None:
            written = time.perf_counter()
            try:
                self.on_trace_ready(self)
            except Exception:
                if not failed:
                    raise
                # The block already failed: report ours without masking the user's exception.
                log.exception("gpuprof: on_trace_ready raised while the profiled block was failing")
            finally:
                report.record_span_end(write_s=time.perf_counter() - written)
                self._discard_journal()
        else:
            self._discard_journal()
        return made

    def _discard_journal(self) -> None:
        # The span closed: its report stands for the steps the journal kept.
        if self._journal is not None:
            self._journal.discard()

    def _build_span_report(
        self,
        source: dict,
        partial: bool,
        failed: bool,
        peer_failure: bool,
        failure: Optional[dict],
        built: list,
    ):
        _wait_for_open_collectives()
        self._gpu.flush()  # every GPU record of the span, before the host side stops
        self._record_tensors()  # the storages the span's models and optimizers hold at its end
        _core.collector_stop()
        trace = _core.collector_drain()
        built.append(trace)
        trace.metadata = {
            "source": "gpuprof live session",
            "pid": str(os.getpid()),
            "hostname": socket.gethostname(),  # its clock: ranks on one host share it
            "torch": _hooks_loader.installed_torch_version() or "",
        }
        if self._memory_note:
            trace.metadata = {**trace.metadata, "device_memory": self._memory_note}
        if self._hooks_note:
            trace.metadata = {**trace.metadata, "host_ops": f"off: {self._hooks_note}"}
        modules_note = self._module_view_note()
        if modules_note:
            trace.metadata = {**trace.metadata, "module_view": modules_note}
        job = _distributed.distributed_info()
        if job is not None:  # as torch.profiler writes it: the rank and the job's process groups
            trace.metadata = {**trace.metadata, "distributedInfo": json.dumps(job, default=str)}
        self._gpu.drain_into(trace)
        dataloaders = self._capture.records()
        pipeline = self._capture.pipeline_records()
        add_pipeline_events(trace, pipeline)
        rank = _distributed.rank_info(self.batch_size or _loader_batch_size(dataloaders))
        return build_report(
            trace,
            source=source,
            dataloaders=dataloaders,
            pipeline=pipeline,
            host={
                "cpus_available": cpus_available(),
                "cpu_count": os.cpu_count(),
                **cpu_budget_facts(),
                **cuda_host_facts(),
            },
            span_source=lambda steps: self._span_source(steps, partial),
            rank=rank,
            gather=self._gather(failed and not peer_failure),
            peak_tflops=self.peak_tflops,
            failure=failure,
            dynamo=self._dynamo.records(),
            compiled_kernels=self._compiled_kernels(),
        )

    def _compiled_kernels(self) -> Optional[list]:
        """Inductor's provenance (the opt-in's), then what its output code names (always)."""
        rows = self._inductor.rows()
        named = generated_code_rows()
        if rows is None and not named:
            return None
        return (rows or []) + named

    def _unbuilt_span_report(self, source: dict, trace, error: Exception) -> Report:
        """The span's report when building it failed: no numbers, the reason, and the span's events
        (when they were drained) for ``export_chrome_trace``, ``on_trace_ready`` and a later
        ``gpuprof analyze``."""
        reason = f"{type(error).__name__}: {error}"
        span = source["span"]
        if trace is not None:
            keep = (
                "its events are kept: prof.report().trace holds them, prof.export_chrome_trace(PATH) "
                "writes them (gpuprof.save and gpuprof run write them beside the report) and "
                "`gpuprof analyze PATH` reads them back"
            )
        else:
            keep = "its events could not be kept"
        log.warning(
            "gpuprof: the report of span %d could not be built (%s); training goes on and %s",
            span,
            reason,
            keep,
        )
        try:
            self._gpu.stop()
        except Exception:
            pass
        return unbuilt_report(trace, source=source, reason=reason, kept=keep)

    def _module_view_note(self) -> str:
        """What the report says of its module view when it has none, or an incomplete one."""
        if not self.with_modules:
            return "off: gpuprof.profile(with_modules=True) records it"
        if self._modules_note:
            return f"off: {self._modules_note}"
        if self._modules.note:
            return f"incomplete: {self._modules.note}"
        return ""

    def _span_source(self, steps: list, partial: bool) -> dict:
        """Which steps the span covers, and, for a span cut short by the end of the block, the
        complete span before it (torch.profiler's semantics: the last span is the one reported)."""
        source: dict = {}
        numbers = [s["step"] for s in steps]
        if numbers:
            source["first_step"], source["last_step"] = numbers[0], numbers[-1]
        last = self._last_complete
        if partial and last is not None:
            # The partial span is the session's last: the complete one is the span just before it,
            # hence reports()[-2] once this one is appended (unless keep_reports=1).
            source["complete_span"] = last["span"]
            kept = self.keep_reports is None or self.keep_reports >= 2
            after = (
                len(self._reports) + 1
                if self.keep_reports is None
                else min(len(self._reports) + 1, self.keep_reports)
            )
            where = f"prof.reports()[{after - 2}]"
            source["note"] = (
                f"partial span ({_steps_text(source)}), cut short when the profiled block ended; "
                f"span {last['span']} is complete ({_steps_text(last)})"
                + (
                    f": {where} gives it"
                    if kept
                    else " (not kept: keep_reports=1; on_trace_ready received it)"
                )
            )
        return source

    def _gather(self, failed: bool):
        """How this span's rank summary reaches the other ranks: every rank's summary in rank 0's
        report, exchanged over the job's own process group (collect/exchange.py)."""
        if self._exchange is None:
            # At the first span end, not at session start: under `gpuprof run` the session starts
            # before the script calls init_process_group.
            self._exchange = _distributed.Exchange(self.rank_timeout_s, session=self.exchange_session)
        # A rank whose block raised its own error does not exchange (the others would wait for it in
        # their collectives until it exits): it is named missing in rank 0's report. Ranks whose
        # collectives failed because a peer left (peer_failure) still exchange.
        if not self._exchange.active or failed:
            return None
        span = self._spans_completed

        def gather(own: dict):
            try:
                return self._exchange.gather(own, span)
            except Exception as e:  # the training run and this rank's report come first
                log.warning("gpuprof: cross-rank exchange failed: %s", e)
                return None

        return gather


# A backend closes a collective's range on its own thread after handing the result over (gloo marks
# the future done, then ends the range), so the step that waited for it can end first: the span
# waits this long at most for such ranges to close, so that its last collective is recorded whole.
# Nothing of it counts in a step (the span's report is built after the step ended).
OPEN_COLLECTIVES_WAIT_S = 0.25


def _wait_for_open_collectives() -> None:
    deadline = time.monotonic() + OPEN_COLLECTIVES_WAIT_S
    while _core.collector_open_collectives() > 0 and time.monotonic() < deadline:
        time.sleep(0.001)


def _steps_text(source: dict) -> str:
    first, last = source.get("first_step"), source.get("last_step")
    if first is None:
        return "none"
    return f"steps {first}..{last}" if last != first else f"step {first}"


def _loader_batch_size(dataloaders: list) -> Optional[int]:
    sizes = [d.get("batch_size") for d in dataloaders or [] if isinstance(d.get("batch_size"), int)]
    return sizes[0] if sizes else None
