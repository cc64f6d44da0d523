"""``gpuprof.profile``: a profiling session over a training loop, driven by ``prof.step()``."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from typing import Callable, Optional

from .._native import _core
from ..report.build import build_report, unbuilt_report
from ..report.model import Report
from . import exchange as _distributed
from . import hooks as _hooks_loader
from .dataloader import DataLoaderCapture, add_pipeline_events, cpu_budget, cpus_available
from .gpu import AllocatorSampler, GpuCollection
from .modules import ModuleHooks
from .oom import failure_facts, is_out_of_memory
from .schedule import ProfilerAction, always_record
from .tensors import KnownTensors

log = logging.getLogger("gpuprof")

_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
_HOOKED = (ProfilerAction.WARMUP,) + _RECORDING

_active_session: Optional[profile] = None

DEFAULT_KEEP_REPORTS = 8  # reports() keeps this many of the latest spans (profile(keep_reports=...))

# Signals that end a training run from outside (scancel, a batch system's time limit, Ctrl-C): while
# a session is active, a span they cut short is saved before they take effect (_on_signal).
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ProfilerError(RuntimeError):
    pass


class profile:
    """Profile a training loop: per-step breakdown from LibTorch RecordFunction hooks.

    Use as a context manager, calling ``prof.step()`` once per training step::

        with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=3)) as prof:
            for batch in loader:
                train_step(batch)
                prof.step()
        print(prof.report())

    or as a decorator on a function that runs one or more steps (``profile.step()`` is then called
    by your code through ``gpuprof.current()``, or the whole call is one step).

    Args:
        schedule: step -> ProfilerAction (see ``gpuprof.schedule``); None records every step.
        on_trace_ready: called with this profiler each time a span of active steps completes (and
            once more with the failure's report when an out-of-memory error ends the block outside
            a recorded span; without it, that report is written to gpuprof-oom-<pid>.json/.html in
            the working directory or $GPUPROF_OOM_DIR: docs/memory.md).
        record_shapes: also record operator input shapes (costs a little per op).
        with_modules: also record each ``nn.Module`` call, for the module view (``modules`` in the
            report: time per module of the model's hierarchy, forward and backward), through
            torch's global module hooks while a span is hooked; the model is not changed. Off by
            default: it costs a few microseconds per module call, about 30 times what recording
            an op costs (docs/performance.md).
        max_events: event budget per span over all threads; past it, events are counted as dropped.
        gpu: also collect CUDA kernels, copies, runtime calls (CUPTI) and device samples (NVML) when
            a GPU is usable; otherwise the span is host-only and the report says why.
        profile_memory: record every allocation and free of torch's CUDA caching allocator (with
            its level) and of its CPU allocator, with the block's address: exact per-step peaks and
            the memory view (what filled memory at the peak, per-operator statistics, growth;
            docs/memory.md; the cost per allocation is in docs/performance.md). While it is on,
            torch.profiler cannot start on the same thread (torch refuses: "Profiler is already
            enabled on this thread"). Without it, device memory is read from the allocator's
            statistics at every step boundary. The process's resident set size is sampled at every
            step boundary either way.
        batch_size: samples per step on this rank, for samples/s, ``gpuprof scaling`` and the batch
            that fits after an out-of-memory error (the DataLoader's batch_size is used when not
            given).
        rank_timeout_s: in a torch.distributed job, how long rank 0 waits at the end of a span for
            the other ranks' summaries (default 60 s, or $GPUPROF_RANK_TIMEOUT_S) before naming the
            missing ones in its report.
        keep_reports: how many of the latest spans' reports ``reports()`` keeps (default 8), so
            that a run of many spans (``repeat=0`` over days) holds a bounded number of them; None
            keeps every span (memory then grows with each span). ``on_trace_ready`` sees every span.
        peak_tflops: the device's dense peak in TFLOPS that MFU and HFU divide by, for a device
            gpuprof's peak table has no row for (the report says when), or to replace the table's
            figure or the CPU estimate (docs/metrics.md, "MFU and HFU").
    """

    def __init__(
        self,
        *,
        schedule: Optional[Callable[[int], ProfilerAction]] = None,
        on_trace_ready: Optional[Callable[[profile], None]] = None,
        record_shapes: bool = False,
        with_modules: bool = False,
        max_events: int = 4_000_000,
        gpu: bool = True,
        profile_memory: bool = False,
        batch_size: Optional[int] = None,
        rank_timeout_s: Optional[float] = None,
        keep_reports: Optional[int] = DEFAULT_KEEP_REPORTS,
        peak_tflops: Optional[float] = None,
    ) -> None:
        if max_events < 1:
            raise ValueError(f"gpuprof.profile: max_events must be positive, got {max_events}")
        if keep_reports is not None and (
            isinstance(keep_reports, bool) or not isinstance(keep_reports, int) or keep_reports < 1
        ):
            raise ValueError(
                "gpuprof.profile: keep_reports must be a positive integer (how many of the "
                f"latest spans reports() keeps) or None (every span), got {keep_reports!r}"
            )
        if peak_tflops is not None and (
            isinstance(peak_tflops, bool) or not isinstance(peak_tflops, (int, float)) or not peak_tflops > 0
        ):
            raise ValueError(
                "gpuprof.profile: peak_tflops must be a positive number of TFLOPS (the device's dense "
                f"peak for the dtype of its matrix work), got {peak_tflops!r}"
            )
        self.peak_tflops = None if peak_tflops is None else float(peak_tflops)
        self.keep_reports = keep_reports
        self.schedule = schedule or always_record
        self.on_trace_ready = on_trace_ready
        self.record_shapes = bool(record_shapes)
        self.with_modules = bool(with_modules)
        self._modules = ModuleHooks()
        self._modules_note = ""  # why the module hooks could not be installed
        self.max_events = int(max_events)
        self.profile_memory = bool(profile_memory)
        self.batch_size = batch_size
        self.rank_timeout_s = float(
            rank_timeout_s
            if rank_timeout_s is not None
            else os.environ.get("GPUPROF_RANK_TIMEOUT_S", _distributed.DEFAULT_TIMEOUT_S)
        )
        self._exchange: Optional[_distributed.Exchange] = None
        self._memory_note = ""
        self._hooks_note = ""  # why the operator hooks could not be had (then steps only)
        self._allocator = AllocatorSampler()
        self._tensors = KnownTensors()  # parameters, gradients, optimizer state (collect/tensors.py)
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self._report: Optional[Report] = None
        self._reports: deque = deque(maxlen=self.keep_reports)
        self._last_complete: Optional[dict] = None  # source of the latest complete span
        self._spans_completed = 0
        self._step_start_ticks = 0
        self._hooked = False
        self._steps_in_span = 0
        self._capture = DataLoaderCapture()
        self._entered_at = ""
        self._gpu = GpuCollection(bool(gpu), self.max_events)
        self._nvtx_step_open = False
        self._signal_previous: dict = {}  # signal -> the handler ours replaced (chained to)
        self._signals_held = 0  # > 0 while gpuprof's own step/stop code runs (signals wait)
        self._signals_pending: list = []
        self._span_cut = False  # a signal saved the span in progress; nothing recorded since

    # ---- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(_failed=exc_type is not None, _exc=exc)

    def __call__(self, fn):
        """Decorator form: the decorated call runs inside this session."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapper

    def start(self) -> None:
        global _active_session
        if _active_session is not None:
            raise ProfilerError(
                "gpuprof.profile is already active (entered at "
                f"{_active_session._entered_at}); nested sessions are not supported. Profile the "
                "outer loop only, or mark the inner part with gpuprof.range(name) instead."
            )
        frame = traceback.extract_stack(limit=4)[0]
        self._entered_at = f"{frame.filename}:{frame.lineno}"
        _active_session = self
        self.step_num = 0
        self._report = None
        self._reports = deque(maxlen=self.keep_reports)
        self._last_complete = None
        self._spans_completed = 0
        self._span_cut = False
        self._signals_pending = []
        try:
            self._exchange = None  # made at the first span end (see _gather)
            self._capture.open()  # DataLoader iterators made from now on carry the workers' hook
            first = self.schedule(0)
            # The operator hooks load (or compile) on a background thread from now on, while the
            # schedule's wait and warmup steps run; before a recorded step it is waited for.
            self._await_hooks(first)
            self._step_start_ticks = _core.collector_ticks()
            self._transition(ProfilerAction.NONE, first)
            self._nvtx_step()
            self._install_signal_handlers()
        except BaseException:
            self._teardown()
            raise

    def stop(self, _failed: bool = False, _exc: Optional[BaseException] = None) -> None:
        """End the session. What the current span recorded so far becomes ``report()``."""
        global _active_session
        if _active_session is not self:
            return
        with self._signals_held_back():
            try:
                self._stop(_failed, _exc)
            finally:
                self._teardown()

    def _stop(self, _failed: bool, _exc: Optional[BaseException]) -> None:
        # An out-of-memory error: what the run held at the failure, read before anything is freed.
        failure = self._out_of_memory_facts(_exc)
        reported = False
        # A span a signal cut short was saved then; nothing was recorded after it.
        if self.current_action in _RECORDING and not self._span_cut:
            # The step in progress was never ended by prof.step(): it is a whole training step
            # only when the block failed inside it (keep what ran before the error) or when
            # nothing else was recorded (a block without prof.step() calls is one step).
            if _failed or (self._steps_in_span == 0 and self._report is None):
                self._close_step(_core.collector_ticks())
            if self._steps_in_span > 0:
                reported = self._finish_span(
                    partial=True,
                    failed=_failed,
                    peer_failure=_distributed.is_peer_failure(_exc),
                    failure=failure,
                )
        if failure is not None:
            self._report_out_of_memory(failure, reported)

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
            host={"cpus_available": cpus_available(), "cpu_count": os.cpu_count(), **_cuda_host_facts()},
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

    def _teardown(self) -> None:
        global _active_session
        self._restore_signal_handlers()
        self._unhook()
        self._tensors.remove()
        try:
            self._capture.close()  # the DataLoader workers put torch's code back, gpuprof's pipes close
        except Exception as e:  # never an exception in the with block's exit
            log.warning("gpuprof: could not end the DataLoader capture cleanly: %s", e)
        _core.collector_stop()
        self._gpu.release()
        if self._nvtx_step_open:
            _core.nvtx_pop()
            self._nvtx_step_open = False
        self.current_action = ProfilerAction.NONE
        _active_session = None

    # ---- steps ----------------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of one training step and the start of the next."""
        if _active_session is not self:
            raise ProfilerError("prof.step() called outside its `with gpuprof.profile(...)` block")
        with self._signals_held_back():
            now = _core.collector_ticks()
            prev = self.current_action
            if self._span_cut:
                # The program went on after a signal cut the span short (its handler returned): the
                # span was saved then, so this step is not recorded, and the schedule goes on as
                # after a span's end (a new span if the next step records).
                self._span_cut = False
                prev = ProfilerAction.NONE
            elif prev in _RECORDING:
                self._close_step(now)
            self.step_num += 1
            new = self.schedule(self.step_num)
            if self._await_hooks(new):
                now = _core.collector_ticks()  # the hooks' compile is in no step
            self._step_start_ticks = now
            self._transition(prev, new)
            self._nvtx_step()

    # ---- signals --------------------------------------------------------------------------------
    # SIGTERM (scancel, a batch system's time limit, `kill`) would end the process without a word
    # from Python; SIGINT (Ctrl-C) raises KeyboardInterrupt wherever the program is. While a session
    # is active its handler saves the span in progress (the steps so far, and the step the signal
    # came in, as for an exception) through on_trace_ready, then does what the signal would have
    # done: the previous handler is called, or, when that was the default action, the default is
    # restored and the signal raised again, so the process ends with the same status (143 for
    # SIGTERM). Installed from the main thread only (Python runs signal handlers there), over any
    # handler but "ignore", and the previous handler is back when the session ends.
    def _install_signal_handlers(self) -> None:
        self._signal_previous = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in _ENDING_SIGNALS:
            try:
                previous = signal.getsignal(signum)
                if previous is None or previous == signal.SIG_IGN:
                    continue  # set outside Python (cannot be chained to), or ignored: left alone
                signal.signal(signum, self._on_signal)
                self._signal_previous[signum] = previous
            except (ValueError, OSError):  # an embedding that does not allow it
                continue

    def _restore_signal_handlers(self) -> None:
        for signum, previous in self._signal_previous.items():
            try:
                if signal.getsignal(signum) == self._on_signal:  # not if the program set its own since
                    signal.signal(signum, previous)
            except (ValueError, OSError):
                pass

    @contextlib.contextmanager
    def _signals_held_back(self):
        """gpuprof's own step and stop code runs whole: a signal that comes meanwhile is handled
        once it is done. That includes SIGCHLD when the program has a Python handler for it (torch's
        DataLoader raises "worker killed" from one): raised inside a span's end, it would cost the
        span its report (the one that says which worker died); it is raised after it instead."""
        outermost = self._signals_held == 0
        chld = self._hold_sigchld() if outermost else None
        self._signals_held += 1
        try:
            yield
        finally:
            self._signals_held -= 1
            if not self._signals_held and self._signals_pending:
                pending, self._signals_pending = self._signals_pending, []
                for signum in pending:
                    self._on_signal(signum, None)
            if chld is not None:
                self._release_sigchld(*chld)

    def _hold_sigchld(self):
        """(torch's handler, [came]) with a handler that notes SIGCHLD in its place; None when there
        is no Python handler to hold (or not on the main thread, where handlers are set)."""
        chld = getattr(signal, "SIGCHLD", None)
        if chld is None or threading.current_thread() is not threading.main_thread():
            return None
        try:
            previous = signal.getsignal(chld)
            if not callable(previous):
                return None
            came: list = []
            signal.signal(chld, lambda signum, frame: came.append(frame))
        except (ValueError, OSError):
            return None
        return previous, came

    @staticmethod
    def _release_sigchld(previous, came: list) -> None:
        try:
            signal.signal(signal.SIGCHLD, previous)
        except (ValueError, OSError):
            return
        if came:
            previous(signal.SIGCHLD, came[-1])  # the program's handler, as if the signal came now

    def _on_signal(self, signum: int, frame) -> None:
        if self._signals_held:
            if signum not in self._signals_pending:
                self._signals_pending.append(signum)
                return
            # The same signal a second time while gpuprof's code runs means now: not held back.
            self._signals_pending.remove(signum)
        self._save_cut_span(signum)
        previous = self._signal_previous.get(signum, signal.SIG_DFL)
        if previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)  # ends the process as the signal would have
            return
        if callable(previous):
            # It may raise (KeyboardInterrupt, SystemExit) or return (the program goes on: the next
            # prof.step() starts over as after a span's end).
            previous(signum, frame)

    def _save_cut_span(self, signum: int) -> None:
        """Save the span in progress (if one is), cut short by a signal."""
        if self._signals_held or _active_session is not self:
            return
        if self.current_action not in _RECORDING or self._span_cut:
            return
        name = signal.Signals(signum).name
        try:
            with self._signals_held_back():
                self._close_step(_core.collector_ticks())
                self._span_cut = True
                self._finish_span(partial=True, failed=True)
        except Exception:  # the signal, not our report, decides what happens next
            log.exception("gpuprof: could not save the span cut short by %s", name)

    def _nvtx_step(self) -> None:
        # GPU collection: each profiled step is also an NVTX range, for Nsight Systems.
        if self._nvtx_step_open:
            _core.nvtx_pop()
            self._nvtx_step_open = False
        if self.current_action in _HOOKED:
            _core.nvtx_push(f"ProfilerStep#{self.step_num}")
            self._nvtx_step_open = True

    def _close_step(self, end_ticks: int) -> None:
        self._steps_in_span += 1
        self._gpu.sample_energy()  # first: the counter's reading is the one that needs the boundary's time
        self._sample_memory(end_ticks)
        _core.collector_record("step", f"ProfilerStep#{self.step_num}", self._step_start_ticks, end_ticks)

    def _sample_memory(self, ticks: int) -> None:
        # At a step boundary: host RSS, and the device allocator's statistics unless every
        # allocation is recorded (profile_memory=True, unless its reporter could not be installed:
        # then _memory_note says why).
        _core.collector_record_host_rss(ticks)
        every_allocation_recorded = self.profile_memory and not self._memory_note
        if not every_allocation_recorded:
            self._allocator.sample(ticks)

    def _transition(self, prev: ProfilerAction, new: ProfilerAction) -> None:
        if prev == ProfilerAction.RECORD_AND_SAVE:
            self._finish_span(partial=False)
            # Building the span's report and on_trace_ready's writing are gpuprof's time, not the
            # next step's: the next step starts when control goes back to the training loop.
            self._step_start_ticks = _core.collector_ticks()
        starting_span = new in _HOOKED and (prev not in _HOOKED or prev == ProfilerAction.RECORD_AND_SAVE)
        leaving_warmup = prev == ProfilerAction.WARMUP and new in _RECORDING
        if starting_span or leaving_warmup:
            # A fresh collector epoch: warmup events (first-call costs) are not kept.
            _core.collector_start(self.max_events)
            self._gpu.start()  # GPU collection (a new epoch when warmup ends)
            # Starting GPU collection (loading CUPTI, subscribing, a flush) is gpuprof's time, not
            # the first step's; the step starts at the energy counter's first reading.
            self._step_start_ticks = _core.collector_ticks()
            self._gpu.sample_energy()
            self._capture.reset()
            self._modules.reset()
            self._steps_in_span = 0
            self._allocator.reset()
            self._sample_memory(self._step_start_ticks)
        if new in _HOOKED:
            self._capture.open()  # (torch's DataLoader may have been imported after the start)
            self._hook(new)
            if starting_span or leaving_warmup:
                self._watch_tensors()
        else:
            self._unhook()
            self._tensors.remove()
            _core.collector_stop()
            self._gpu.stop()  # GPU collection
        self.current_action = new

    def _await_hooks(self, action: ProfilerAction) -> bool:
        """Start loading the operator hooks if not yet done, and wait for them before a recorded
        step (a warmup step waits only for a load, not for a compile). True if it waited."""
        if self._hooked or self._hooks_note:
            return False
        try:
            _hooks_loader.start_loading()
            if _hooks_loader.ready() or action not in _HOOKED:
                return False
            _hooks_loader.settle()  # loaded, failed, or compiling
            if _hooks_loader.ready():
                return True
            if action == ProfilerAction.WARMUP:
                return False
            _hooks_loader.hooks()  # the compile's line said it comes before the first recorded step
        except Exception:  # said once by _hook, which meets the same failure
            pass
        return True

    def _hook(self, action: ProfilerAction = ProfilerAction.RECORD) -> None:
        if self._hooked or self._hooks_note:
            return
        if action == ProfilerAction.WARMUP and not _hooks_loader.ready():
            return  # still compiling: the warmup goes on without operators, the record waits
        try:
            hooks = _hooks_loader.hooks()
        except Exception as e:
            # The training run goes on: steps are still timed, operators are not recorded, and the
            # report says why (once on stderr, and in its metadata).
            self._hooks_note = str(e)
            print(f"gpuprof: operators are not recorded: {e}", file=sys.stderr, flush=True)
            return
        hooks.install(self.record_shapes, autograd_links=self.with_modules)
        if self.with_modules and not self._modules_note:
            self._modules_note = self._modules.install()
        if self.profile_memory:
            self._memory_note = hooks.install_memory_reporter()
        self._capture.install()
        self._hooked = True

    def _watch_tensors(self) -> None:
        # The optimizers the span steps (with the models, their tensors' storages go into the span
        # for the memory composition): gradients at every optimizer step only where every
        # allocation is recorded.
        try:
            self._tensors.install(every_step=self.profile_memory and not self._memory_note)
        except Exception as e:  # the training run comes first
            log.debug("gpuprof: cannot watch the modules and optimizers: %s", e)

    def _record_tensors(self) -> None:
        # The storages serve the memory composition, which needs allocator levels: every allocation
        # recorded, or a GPU's statistics. A CPU span without profile_memory has neither: no lookup.
        if not self.profile_memory and not _cuda_initialized():
            return
        try:
            self._tensors.record()
        except Exception as e:  # the training run and the report come first
            log.debug("gpuprof: could not read the models' and optimizers' tensors: %s", e)

    def _unhook(self) -> None:
        if not self._hooked:
            return
        self._hooked = False
        self._capture.remove()
        self._modules.remove()
        hooks = _hooks_loader.hooks()
        hooks.remove_memory_reporter()
        hooks.remove()

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
        return made

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
                **_cpu_budget_facts(),
                **_cuda_host_facts(),
            },
            span_source=lambda steps: self._span_source(steps, partial),
            rank=rank,
            gather=self._gather(failed and not peer_failure),
            peak_tflops=self.peak_tflops,
            failure=failure,
        )

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
            self._exchange = _distributed.Exchange(self.rank_timeout_s)
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

    # ---- results --------------------------------------------------------------------------------
    def reports(self) -> list:
        """The latest spans of the session, oldest first: all of them up to ``keep_reports`` (8 by
        default), then the latest ``keep_reports``. ``source.span`` is each one's index in the
        session (spans dropped earlier still count). Reports before the two latest no longer hold
        their native trace (``report.trace`` is None)."""
        return list(self._reports)

    def report(self) -> Report:
        """The latest span, as torch.profiler reports it: the latest completed span, or the
        partial span the block ended in (its ``source.note`` names the complete span before it;
        ``reports()`` gives every span)."""
        if self._report is None:
            raise ProfilerError(
                "no recorded span yet: the schedule has not reached an active step "
                f"(now at step {self.step_num}, action {self.current_action.name}). Call "
                "prof.step() once per training step, or check the schedule's wait/warmup counts."
            )
        return self._report

    # ---- export -------------------------------------------------------------------------------
    def export_chrome_trace(self, path) -> str:
        """Write the latest span (``report().trace``) as a Kineto-style Chrome trace (``.json``,
        or gzip for ``.json.gz``) that Perfetto, chrome://tracing, Holistic Trace Analysis and
        ``gpuprof analyze`` read."""
        from ..traces.export import export_chrome_trace

        return export_chrome_trace(self.report().trace, path)


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


def _cuda_host_facts() -> dict:
    """``cuda_available`` and ``cuda_device_count``, asked of torch only when the user's program has
    imported it already (this module never imports torch itself); {} when it cannot be told."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return {}
    try:
        available = bool(cuda.is_available())
        facts = {
            "cuda_available": available,
            "cuda_device_count": int(cuda.device_count()) if available else 0,
        }
        if available:  # FLOPs: "high"/"medium" run fp32 matrix work as TF32 (its peak is the tf32 row)
            facts["float32_matmul_precision"] = str(torch.get_float32_matmul_precision())
        return facts
    except Exception:  # a broken driver install must not cost the user the report
        return {}


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # a broken CUDA setup: no device levels either
        return False


def _cpu_budget_facts() -> dict:
    """The CPUs this process may use for DataLoader workers and what set the number."""
    cpus, source = cpu_budget()
    return {"cpu_budget": round(cpus, 2), "cpu_budget_source": source}


def _loader_batch_size(dataloaders: list) -> Optional[int]:
    sizes = [d.get("batch_size") for d in dataloaders or [] if isinstance(d.get("batch_size"), int)]
    return sizes[0] if sizes else None


def current() -> Optional[profile]:
    """The active profiling session, if any."""
    return _active_session
