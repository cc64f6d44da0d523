"""``gpuprof.profile``: a profiling session over a training loop, driven by ``prof.step()``."""

from __future__ import annotations

import functools
import logging
import os
import time
import traceback
from collections import deque
from typing import Callable, Optional

from .._native import _core
from ..collect import exchange as _distributed
from ..collect.dataloader import DataLoaderCapture
from ..collect.dynamo import DynamoWatch
from ..collect.gpu import AllocatorSampler, GpuCollection
from ..collect.inductor import InductorKernels
from ..collect.modules import ModuleHooks
from ..collect.schedule import ProfilerAction, always_record
from ..collect.tensors import KnownTensors
from ..report.model import Report
from ..traces.journal import StepJournal
from . import state as _state
from .failure import OutOfMemoryReports
from .recording import Recording
from .signals import SignalHandling
from .span_report import SpanReports
from .state import _RECORDING, ProfilerError

log = logging.getLogger("gpuprof")

DEFAULT_KEEP_REPORTS = 8  # reports() keeps this many of the latest spans (profile(keep_reports=...))


class profile(SpanReports, Recording, SignalHandling, OutOfMemoryReports):
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
        journal: a folder for the step journal: each recorded step is appended to
            ``<journal>/steps.partial.jsonl`` as it completes (one flush per step, bounded), so a
            job killed before its span closes (SIGKILL, ``os._exit``) keeps its completed steps for
            ``gpuprof analyze``/``gpuprof report`` of that folder. The span's clean close removes
            it. ``gpuprof run --out DIR`` journals into its output folder.
        first_step: the number of the step the session starts in (0 by default): a session started
            in the middle of a run numbers its steps as the run does, and ``schedule`` is asked
            about those numbers (a watched run's capture starts at the step it asked for).
        compiled_kernels: for torch.compile'd models: from the session's start to its end (the
            ``with`` block), Inductor generates its C++ kernels with profiling on, notes which aten
            operators and source lines went into each kernel, and bypasses its caches, for the
            graphs compiled in that time only; Inductor's settings are restored at the end. The
            ``compiled`` section then lists ``compiled_kernels`` with their operators
            (docs/profiling.md, "Compiled models"). It costs compile time, never step time
            (docs/performance.md).
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
        journal: Optional[os.PathLike | str] = None,
        first_step: int = 0,
        compiled_kernels: bool = False,
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
        if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
            raise ValueError(f"gpuprof.profile: first_step must be a non-negative int, got {first_step!r}")
        self.first_step = first_step
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
        # The key under which the ranks' summaries meet in the job's store: by default the count of
        # sessions this process made (the same on every rank when every rank makes the same ones).
        self.exchange_session: Optional[str] = None
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
        self._dynamo = DynamoWatch()
        self._inductor = InductorKernels(compiled_kernels)
        self._entered_at = ""
        self._gpu = GpuCollection(bool(gpu), self.max_events)
        self._nvtx_step_open = False
        self._signal_previous: dict = {}  # signal -> the handler ours replaced (chained to)
        self._signals_held = 0  # > 0 while gpuprof's own step/stop code runs (signals wait)
        self._signals_pending: list = []
        self._span_cut = False  # a signal saved the span in progress; nothing recorded since
        # A session that gives way to one the program starts itself (gpuprof run's): it then ends as
        # if its block had ended there, and its steps after it are no-ops (stood_aside_for says
        # where the program's session was entered).
        self.yields_to_nested = False
        self.on_stand_aside: Optional[Callable[[], None]] = None  # called once it has stood aside
        # Said at the block's end when no prof.step() came (off where something else says it: the
        # decorator form, where one call is one step, and gpuprof run, which finds steps itself).
        self.warn_without_steps = True
        self.stood_aside_for = ""
        self._journal: Optional[StepJournal] = StepJournal(journal) if journal is not None else None
        self._journal_start_ns = 0  # the monotonic clock where the current step began
        # Each journalled step's operators, breakdown and memory, from the events recorded since the
        # step before (native: cpp/src/analysis/step_journal.cpp); None: step times only.
        summarizer = getattr(_core, "StepSummarizer", None) if journal is not None else None
        self._summarizer = summarizer() if summarizer is not None else None

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
            self.warn_without_steps = False  # the whole call is one step unless the code steps
            with self:
                return fn(*args, **kwargs)

        return wrapper

    def start(self) -> None:
        entered_at = _caller()
        outer = _state.active
        if outer is not None and outer.yields_to_nested and not outer.stood_aside_for:
            outer.stand_aside(entered_at)
        if _state.active is not None:
            raise ProfilerError(
                "gpuprof.profile is already active (entered at "
                f"{_state.active._entered_at}); nested sessions are not supported. Profile the "
                "outer loop only, or mark the inner part with gpuprof.range(name) instead."
            )
        self._entered_at = entered_at
        self.stood_aside_for = ""
        _state.active = self
        self.step_num = self.first_step
        self._report = None
        self._reports = deque(maxlen=self.keep_reports)
        self._last_complete = None
        self._spans_completed = 0
        self._span_cut = False
        self._signals_pending = []
        try:
            self._exchange = None  # made at the first span end (see _gather)
            self._capture.open()  # DataLoader iterators made from now on carry the workers' hook
            self._inductor.start()  # compiled_kernels=True: Inductor's provenance until the block ends
            first = self.schedule(self.step_num)
            # The operator hooks load (or compile) on a background thread from now on, while the
            # schedule's wait and warmup steps run; before a recorded step it is waited for.
            self._await_hooks(first)
            self._step_start_ticks = _core.collector_ticks()
            self._transition(ProfilerAction.NONE, first)
            self._nvtx_step()
            self._install_signal_handlers()
            self._journal_start_ns = time.monotonic_ns()
        except BaseException:
            self._teardown()
            raise

    def stop(self, _failed: bool = False, _exc: Optional[BaseException] = None) -> None:
        """End the session. What the current span recorded so far becomes ``report()``."""
        if _state.active is not self:
            return
        with self._signals_held_back():
            try:
                self._stop(_failed, _exc)
            finally:
                self._teardown()
        if self.step_num == self.first_step and not _failed and self.warn_without_steps:
            self._warn_without_steps()

    def _warn_without_steps(self) -> None:
        """The block ended and prof.step() was never called: said now, not after the whole loop at
        report() (or never, when the block became one step nobody asked for)."""
        if self._report is not None:
            what = (
                "the whole block is reported as 1 step (prof.report().steps has one row), not one "
                "row per training step"
            )
        else:
            what = (
                f"nothing was recorded: the schedule's step 0 is {self.schedule(0).name}, and only "
                "prof.step() moves the session to the steps it records"
            )
        log.warning(
            "gpuprof: the `with gpuprof.profile(...)` block entered at %s ended without a prof.step() "
            "call; %s. Call prof.step() at the end of each training step (or use gpuprof run, "
            "which finds the steps itself).",
            self._entered_at,
            what,
        )

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

    def _teardown(self) -> None:
        self._restore_signal_handlers()
        self._inductor.stop()  # Inductor's settings as the span found them
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
        _state.active = None

    # ---- steps ----------------------------------------------------------------------------------
    def stand_aside(self, entered_at: str) -> None:
        """End this session as its block's end would (the span in progress, if any, is reported as
        a partial span) so that the session the program starts at ``entered_at`` can run; this
        session's later ``step()`` calls do nothing."""
        if _state.active is not self:
            return
        with self._signals_held_back():
            try:
                # The step in progress is not a whole step: only the steps ended so far are kept.
                if self.current_action in _RECORDING and not self._span_cut and self._steps_in_span > 0:
                    self._finish_span(partial=True)
            finally:
                self._teardown()
        self.stood_aside_for = entered_at
        if self.on_stand_aside is not None:
            try:
                self.on_stand_aside()
            except Exception:  # the program's session starts regardless
                log.exception("gpuprof: could not finish standing aside")

    def step(self) -> None:
        """Mark the end of one training step and the start of the next."""
        if self.stood_aside_for:
            return
        if _state.active is not self:
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
                if self._journal is not None:
                    self._journal.step(
                        self.step_num, self._journal_start_ns, time.monotonic_ns(), self._step_summary()
                    )
                    now = _core.collector_ticks()  # journalling the step is gpuprof's time, in no step
            self.step_num += 1
            new = self.schedule(self.step_num)
            if self._await_hooks(new):
                now = _core.collector_ticks()  # the hooks' compile is in no step
            self._step_start_ticks = now
            self._transition(prev, new)
            self._nvtx_step()
            self._journal_start_ns = time.monotonic_ns()

    def _step_summary(self) -> Optional[bytes]:
        if self._summarizer is None:
            return None
        try:
            return self._summarizer.next()
        except Exception as e:  # never an exception in the training loop: step times only from here
            self._summarizer = None
            log.warning(
                "gpuprof: cannot summarize the step for the step journal (%s); later steps are journalled "
                "with their times only",
                e,
            )
            return None

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


def _caller() -> str:
    """FILE:LINE of the program's code that entered the session (the innermost frame outside this
    package: ``with``, the decorator, or a call to ``start()``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for frame in reversed(traceback.extract_stack()):
        if os.path.dirname(os.path.abspath(frame.filename)) != here:
            return f"{frame.filename}:{frame.lineno}"
    return "?"
