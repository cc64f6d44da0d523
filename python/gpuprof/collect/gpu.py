"""GPU collection for a live session: CUPTI activities, NVML samples (C++ in cpp/src/collect).

``profile`` drives one ``GpuCollection``: start at each active span, flush + drain at its end, stop
outside active steps, release when the session ends. When GPU collection cannot run (no driver, no
CUPTI, insufficient privileges, another profiler holding CUPTI) the span is profiled host-side only
and the report says why, in one line.

The user's own NVTX ranges reach CUPTI only when libcupti is the process's NVTX injection library
(``NVTX_INJECTION64_PATH``), which each NVTX-using library looks up once, at its first NVTX call.
gpuprof does not set it: the variable changes how every library in the process handles NVTX, the
path is unproven on a GPU here, and a CUPTI 13.0 used as injection has been reported to crash in
``nvtxNameOsThreadA`` (NVIDIA/NVTX#125). The user opts in by setting it before Python starts
(``nvtx_injection_path()`` gives the value); the report says in one line whether ranges are collected
and how to turn that on.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import sys
import time
from typing import Optional

from .._host import cuda_allocator_levels
from .._native import _core

log = logging.getLogger("gpuprof")


def cupti_search_dirs() -> list[str]:
    """Folders of torch's CUDA wheels where libcupti lives, found without importing torch."""
    dirs: list[str] = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for sub in ("cuda_cupti/lib", "cu13/lib", "cu13/extras/CUPTI/lib64"):
            d = os.path.join(root, sub)
            if os.path.isdir(d):
                dirs.append(d)
    try:
        torch_spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        torch_spec = None
    if torch_spec is not None and torch_spec.origin:
        d = os.path.join(os.path.dirname(torch_spec.origin), "lib")
        if os.path.isdir(d):
            dirs.append(d)
    return dirs


NVTX_INJECTION_ENV = "NVTX_INJECTION64_PATH"


def nvtx_injection_path() -> str:
    """The libcupti that GPU collection uses: the value for ``NVTX_INJECTION64_PATH`` so that CUPTI
    sees every NVTX range of the process. Raises RuntimeError (with the reason) where there is none.

    ``export NVTX_INJECTION64_PATH=$(python -c "from gpuprof.collect.gpu import nvtx_injection_path;
    print(nvtx_injection_path())")`` (one line)
    """
    path, why = _core.cupti_library_path(cupti_search_dirs())
    if not path:
        raise RuntimeError(f"no usable libcupti for NVTX injection: {why}")
    return path


def nvtx_injection_note(library: str) -> str:
    """Whether the process's NVTX ranges reach ``library`` (the libcupti gpuprof loads), in one
    line: ``on (...)``, or ``off: ...`` saying which tool has them or how to turn it on."""
    current = os.environ.get(NVTX_INJECTION_ENV, "")
    if current and library and _same_file(current, library):
        return f"on ({NVTX_INJECTION_ENV} names gpuprof's libcupti)"
    if current:
        return (
            f"off: {NVTX_INJECTION_ENV} names another NVTX tool ({current}), which receives the NVTX ranges"
        )
    return (
        f"off: to collect your own NVTX ranges, start Python with {NVTX_INJECTION_ENV}={library} "
        f"(docs/gpu.md)"
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


def other_profiler_active() -> Optional[str]:
    """Why CUPTI is taken by another profiler in this process, or None."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch._C._autograd._profiler_enabled():
                return (
                    "torch.profiler is active in this process and holds CUPTI; profiling "
                    "host-side only. Run gpuprof outside the torch.profiler block for GPU timings"
                )
        except AttributeError:
            pass
    return None


# With TEARDOWN_CUPTI=1, torch.profiler gives CUPTI back inside a later CUDA call, on its own
# thread: a few tries with short waits (about 0.6 s in all) before profiling host-side only.
TEARDOWN_RETRY_WAITS_S = (0.0, 0.02, 0.05, 0.1, 0.2, 0.25)


def _kineto_may_release_cupti(message: str) -> bool:
    """True where CUPTI is held by a torch.profiler that was told to give it back (TEARDOWN_CUPTI=1)
    and a CUDA call may complete the hand-over."""
    torch = sys.modules.get("torch")
    if "MULTIPLE_SUBSCRIBERS" not in message or os.environ.get("TEARDOWN_CUPTI") != "1":
        return False
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # a failing device must not break host profiling
        return False


def devices_in_use() -> list[int]:
    """CUDA ordinals this process uses: the current device, those the caching allocator holds memory
    on, and those CUPTI records came from. [] where torch has not initialised CUDA."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return []
        devices = {torch.cuda.current_device()}
        for d in range(torch.cuda.device_count()):
            if torch.cuda.memory_reserved(d) > 0:
                devices.add(d)
    except Exception as e:  # a failing device must not break host profiling
        log.debug("gpuprof: could not list the CUDA devices in use: %s", e)
        return []
    devices.update(_core.gpu_devices_seen())
    return sorted(devices)


# Sessions whose CUPTI subscription is still held (a profile never stopped included: hence strong
# references): released at interpreter exit, while torch and the CUDA driver are still alive, so
# no CUPTI callback runs into a half torn-down process.
_unreleased: set[GpuCollection] = set()


@atexit.register
def _release_at_exit() -> None:
    for collection in list(_unreleased):
        try:
            collection.release()
        except Exception as e:  # exiting anyway: say why, never raise
            log.debug("gpuprof: GPU collection release at exit failed: %s", e)


def _cuda_expected() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available())
    except Exception:  # a broken CUDA setup must not break host profiling
        return False


# How often the NVML sampler reads each device (ms; 0: no NVML samples and no energy). Not an
# option: bench/gpu_overhead.py sets it to 0 for its "gpuprof, no NVML" condition, to measure what
# the sampler's NVML calls (milliseconds each on an H200) cost the training loop beside them.
NVML_INTERVAL_MS = 100


class AllocatorSampler:
    """torch's CUDA caching allocator statistics at step boundaries (the default way device memory
    gets into a live report: one ``torch.cuda.memory_stats_as_nested_dict`` call per device and
    boundary).

    Each boundary records the current allocated and reserved levels. The allocator also keeps a
    high-water mark; when it rose since the last boundary, the step that just ended reached it, so
    the step's exact peak is recorded too, stamped at the step's middle (when within the step is not
    known; the middle is inside it on any clock, where "one tick before the end" can convert to the
    boundary's own nanosecond and count in the next step too). A step that set no new
    high-water mark shows the larger of its boundary levels: a lower bound. ``profile_memory=True``
    records every allocation instead (exact peaks)."""

    def __init__(self) -> None:
        self._high_water: dict[int, tuple[int, int]] = {}
        self._scan_all = True

    def reset(self) -> None:
        self._high_water = {}
        self._scan_all = True

    def sample(self, ticks: int, step_start_ticks: Optional[int] = None) -> None:
        """At a boundary (``ticks``); ``step_start_ticks``: where the step that ends here started
        (None at a span's first boundary, which ends no step and so records no step's peak)."""
        torch = sys.modules.get("torch")
        try:
            if torch is None or not torch.cuda.is_initialized():
                return
            # Every device at a span's first boundary; then those in use and the current one (a
            # DDP rank on an 8-GPU node reads one device's statistics per boundary, not eight).
            if self._scan_all:
                devices = list(range(torch.cuda.device_count()))
                self._scan_all = False
            else:
                devices = sorted(set(self._high_water) | {torch.cuda.current_device()})
            for device in devices:
                allocated, reserved, *peak = cuda_allocator_levels(torch.cuda, device)
                if reserved == 0 and device not in self._high_water:
                    continue  # a device this process has not allocated on
                before = self._high_water.get(device)
                ended = before is not None and step_start_ticks is not None
                if ended and (peak[0] > before[0] or peak[1] > before[1]):
                    mid = (step_start_ticks + ticks) // 2
                    _core.collector_record_memory(mid, 0, peak[0], peak[1], device)
                self._high_water[device] = tuple(peak)
                _core.collector_record_memory(ticks, 0, allocated, reserved, device)
        except Exception as e:  # a failing device must not break the training step
            log.debug("gpuprof: could not read the CUDA allocator statistics: %s", e)


class GpuCollection:
    def __init__(self, wanted: bool, max_events: int) -> None:
        self.wanted = wanted
        self.max_events = max_events
        self.status: dict = {
            "enabled": False,
            "message": "GPU collection not requested (gpu=False)" if not wanted else "not started",
        }
        self._warned = False
        self._started = False
        self._search_dirs: Optional[list] = None

    def start(self) -> None:
        """At the start of an active span (and when warmup ends: a new epoch)."""
        if not self.wanted:
            return
        reason = other_profiler_active()
        if reason is not None:
            if self._started:
                _core.gpu_stop()
                self._started = False
            self.status = {"enabled": False, "message": reason}
        else:
            self.status = self._gpu_start()
            if not self.status["enabled"] and _kineto_may_release_cupti(self.status.get("message", "")):
                # torch.profiler gives CUPTI back inside a later CUDA call after it stopped, and
                # tears down on another thread: synchronise, wait a little, ask again (only on this
                # failure path).
                torch = sys.modules.get("torch")
                for wait_s in TEARDOWN_RETRY_WAITS_S:
                    time.sleep(wait_s)
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # a failing device must not break host profiling
                        break
                    _core.gpu_stop()
                    self.status = self._gpu_start()
                    if self.status["enabled"] or "MULTIPLE_SUBSCRIBERS" not in self.status.get("message", ""):
                        break
            self._started = True
            _unreleased.add(self)
            if self.status.get("enabled"):
                self.status["nvtx"] = self._nvtx_injection()
        if not self.status["enabled"] and not self._warned and _cuda_expected():
            # One line, once per session, only where the user has a GPU and expects its timings.
            log.warning("gpuprof: GPU collection off: %s", self.status["message"])
            self._warned = True

    def _gpu_start(self) -> dict:
        # NVML polls only the devices in use (a rank of an 8-GPU job its own GPU); all of them
        # before CUDA is initialised. The CUPTI folders are looked up once per session (about
        # 50 us a lookup, and a span may be one step long).
        if self._search_dirs is None:
            self._search_dirs = cupti_search_dirs()
        # Every argument positionally: called with keywords, pybind11 interns the name of each
        # parameter it looks for among them, and names that no Python code holds (buffer_bytes, ...)
        # were added to and removed from the interpreter's table of interned strings at every span;
        # after some 7,600 one-step spans that churn made the table reallocate at twice its size
        # (+1.8 MiB held for good). Defaults as in the binding: 4 MiB CUPTI buffers, at most 32,
        # driver API records on, NVML sampled every NVML_INTERVAL_MS.
        return _core.gpu_start(
            self._search_dirs, 4 << 20, 32, self.max_events, True, NVML_INTERVAL_MS, devices_in_use()
        )

    def _nvtx_injection(self) -> str:
        """Whether the user's NVTX ranges are collected, in one line (and how to turn it on)."""
        if not self.status.get("nvtx_markers"):
            return "off: CUPTI's NVTX marker activity is unavailable (see gpu_collection_notes)"
        return nvtx_injection_note(self.status.get("cupti_library", ""))

    def stop(self) -> None:
        if self._started:
            _core.gpu_stop()

    # energy per step (docs/metrics.md, "Energy")
    def sample_energy(self) -> None:
        """At a step boundary: asks the NVML sampler's thread for one reading of the total-energy
        counter of each sampled GPU that has one, so that each step's energy is the counter's
        difference across it, and returns at once (one such NVML call took 2.2-2.8 ms on an H200)."""
        if self._started and self.status.get("nvml"):
            _core.gpu_sample_energy()

    def read_energy(self) -> None:
        """The same reading on this thread, returning when it is taken (where a span's first step
        starts)."""
        if self._started and self.status.get("nvml"):
            _core.gpu_read_energy()

    def flush(self) -> None:
        if self._started and self.status.get("enabled"):
            # Work of the last step may still be queued: wait for it on every device in use, so its
            # records are complete (a forced flush hands over unfinished records with no end
            # time). The step is already closed, so the wait is not part of any step.
            torch = sys.modules.get("torch")
            for device in devices_in_use():
                try:
                    torch.cuda.synchronize(device)
                except Exception as e:  # a failing device must not lose the host-side report
                    log.warning("gpuprof: could not synchronize GPU %d before the flush: %s", device, e)
            _core.gpu_flush()

    def drain_into(self, trace) -> None:
        md = dict(trace.metadata)
        if self._started:
            _core.gpu_drain(trace)
            md.update(trace.metadata)
            now = _core.gpu_status()  # failures and warnings found while records came in
            for key in ("error", "warning"):
                if now.get(key):
                    self.status[key] = now[key]
        if self.status.get("enabled"):
            md["gpu_collection"] = (
                f"on (CUPTI {self.status['cupti_version']}: {self.status['cupti_library']})"
            )
            if self.status.get("message"):
                md["gpu_collection_notes"] = self.status["message"]
            if self.status.get("nvtx"):
                md["nvtx_ranges"] = self.status["nvtx"]
            if self.status.get("error"):
                md["gpu_collection_error"] = (
                    f"{self.status['error']}: the first CUPTI call that failed; GPU records may be incomplete"
                )
            if self.status.get("warning"):
                md["gpu_collection_warning"] = self.status["warning"]
        else:
            md["gpu_collection"] = f"off: {self.status.get('message', '')}"
        if self.wanted and not self.status.get("nvml") and self.status.get("nvml_message"):
            md["gpu_samples"] = f"off: {self.status['nvml_message']}"
        trace.metadata = md

    def release(self) -> None:
        if self._started:
            _core.gpu_release()
            self._started = False
        _unreleased.discard(self)
