"""Steps and spans: the schedule's transitions, the hooks they install, each step's record."""

from __future__ import annotations

import logging
import sys

from .._host import cuda_initialized
from .._native import _core
from ..collect import hooks as _hooks_loader
from ..collect.schedule import ProfilerAction
from .state import _HOOKED, _RECORDING

log = logging.getLogger("gpuprof")


class Recording:
    """The recording part of ``gpuprof.profile``."""

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
        self._gpu.sample_energy()  # first: the counter reading (NVML's thread takes it) needs the boundary
        self._sample_memory(end_ticks, self._step_start_ticks)
        _core.collector_record("step", f"ProfilerStep#{self.step_num}", self._step_start_ticks, end_ticks)

    def _sample_memory(self, ticks: int, step_start_ticks: int | None = None) -> None:
        # At a step boundary: host RSS, and the device allocator's statistics unless every
        # allocation is recorded (profile_memory=True, unless its reporter could not be installed:
        # then _memory_note says why).
        _core.collector_record_host_rss(ticks)
        every_allocation_recorded = self.profile_memory and not self._memory_note
        if not every_allocation_recorded:
            self._allocator.sample(ticks, step_start_ticks)

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
            # the first step's; the step starts at the energy counter's first reading, the middle of
            # that NVML call (where its reading is stamped).
            before = _core.collector_ticks()
            self._gpu.read_energy()
            self._step_start_ticks = (before + _core.collector_ticks()) // 2
            self._capture.reset()
            self._dynamo.reset()  # torch.compile's records from now on are the span's
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
        if not self.profile_memory and not cuda_initialized():
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
