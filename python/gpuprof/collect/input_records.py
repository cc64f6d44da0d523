"""The input pipeline's timed code and its records (the collection is described in
``input_reader.py``): timed copies of torch 2.x's fetchers (torch/utils/data/_utils/fetch.py) and of
``_utils.pin_memory.pin_memory``, the wrappers that time a dataset's ``transform``/``transforms``/
``target_transform``, the swap that puts them in and takes them out, and the records they send.

- **Records** are small tuples, pickled and written with one non-blocking ``write`` of at most
  PIPE_BUF bytes, which a pipe keeps whole: a full pipe drops the record (counted), never blocks the
  worker. In the main process (a loader with ``num_workers=0``, the pin-memory thread) they go
  straight to the session's capture.
- **The main process.** While a span records, the fetcher classes are timed there too (a loader
  with ``num_workers=0`` loads in the training process), and ``_utils.pin_memory.pin_memory`` (the
  pin-memory thread's and ``num_workers=0``'s pinning) is timed per batch.

Clocks: ``time.monotonic_ns()`` is CLOCK_MONOTONIC, the clock of the session's Trace, in every
process of the machine; ``time.thread_time_ns()`` gives each batch's CPU time.
"""

from __future__ import annotations

import gc
import heapq
import operator
import os
import pickle
import struct
import sys
import threading
from time import monotonic_ns, thread_time_ns
from typing import Any, Optional

# Records: (kind, channel, ...). Kinds and fields, in order:
#   "h" hello:  chan, worker, pid, t_ns
#   "b" batch:  chan, worker, pid, tid, seq, start_ns, idle_ns, load_ns, transform_ns, collate_ns,
#               cpu_ns, runq_ns, samples, sample_sum_ns, sample_sumsq, slowest ((ns, index), ...),
#               gc_ns (Python's garbage collector on the batch's thread; not in load_ns or collate_ns)
#               (idle_ns -1: the worker's first timed batch; transform_ns -1: no transform
#               attribute to time, loading and transforming are one; runq_ns: time it was ready
#               to run but waited for a CPU, -1 where /proc cannot tell)
#   "e" error:  chan, worker, pid, seq, t_ns, stage, text, index (the sample being loaded, or None)
#   "x" bye:    chan, worker, pid, t_ns, dropped
#   "p" pin:    chan, tid, start_ns, dur_ns
SLOWEST_KEPT = 8  # per batch: the slowest samples kept (index and time)
MAX_RECORDS = 200_000  # per span (about 40 MB at most); past it records are counted, not kept
_FRAME = struct.Struct("<I")
_PIPE_BUF = getattr(__import__("select"), "PIPE_BUF", 512)
_ERROR_TEXT = 300
TRANSFORM_ATTRIBUTES = ("transform", "transforms", "target_transform")


# ---- state shared by the timed code ---------------------------------------------------------------
class _ThreadState(threading.local):
    """Per thread: its schedstat file, and the process it was opened in."""

    sched_fd = None
    sched_pid = None


class _TransformClock:
    """The transform time so far (ns) and the transforms' nesting depth. One per process, not per
    thread (a thread-local costs a third of a timed call): a batch is loaded on one thread, and the
    fetch reads the clock's difference over its own batch."""

    __slots__ = ("ns", "depth")

    def __init__(self) -> None:
        self.ns = 0
        self.depth = 0


_local = _ThreadState()
_clock = _TransformClock()


class _GcClock:
    """Python's garbage-collector pauses, summed per thread (ns) while the timed code is in: a pause
    that falls inside a batch's loading or collating is the interpreter's, not the user's code, and
    is reported apart (``gc_ns``). ``gc.callbacks`` call it at each collection's start and stop, on
    the thread that triggered it."""

    __slots__ = ("ns", "started")

    def __init__(self) -> None:
        self.ns: dict = {}
        self.started: dict = {}

    def __call__(self, phase: str, info: dict) -> None:
        try:
            tid = threading.get_ident()
            if phase == "start":
                self.started[tid] = monotonic_ns()
            else:
                t0 = self.started.pop(tid, None)
                if t0 is not None:
                    self.ns[tid] = self.ns.get(tid, 0) + monotonic_ns() - t0
        except Exception:  # never an error out of the collector
            pass

    def now(self) -> int:
        return self.ns.get(threading.get_ident(), 0)


_gc_clock = _GcClock()


class _WorkerState:
    """In a worker process: where its records go and what it measured last."""

    __slots__ = ("chan", "worker", "pid", "fd", "seq", "last_end", "dropped", "broken", "dataset", "wrapped")

    def __init__(self, chan: int, worker: int, fd: int, dataset: Any) -> None:
        self.chan, self.worker, self.pid, self.fd = chan, worker, os.getpid(), fd
        self.seq = 0
        self.last_end = -1
        self.dropped = 0
        self.broken = False
        self.dataset = dataset
        self.wrapped: list = []


_worker: Optional[_WorkerState] = None  # set in a worker process only
_main: Optional[Any] = None  # the session's input_reader.PipelineCapture, in the main process only
_main_current = threading.local()  # .chan: the loader whose __next__ runs on this thread (main)


def set_current_channel(chan: int) -> int:
    """The loader whose batch the calling thread fetches now (``num_workers=0``); returns the one
    before, for the caller to put back."""
    before = getattr(_main_current, "chan", -1)
    _main_current.chan = chan
    return before


# ---- timed copies of torch's code ------------------------------------------------------------------
class TimedTransform:
    """A dataset's transform attribute while a span records: calls it, adds its time to the
    thread's transform clock (the outermost call only: a transform calling another counts once),
    less the collector's pauses on its thread."""

    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, *args, **kwargs):
        clock = _clock
        if clock.depth:
            return self.fn(*args, **kwargs)
        clock.depth = 1
        g0 = _gc_clock.now()
        t0 = monotonic_ns()
        try:
            return self.fn(*args, **kwargs)
        finally:
            clock.ns += monotonic_ns() - t0 - (_gc_clock.now() - g0)  # a collector's pause is gc_ns
            clock.depth = 0

    def __getattr__(self, name):
        return getattr(self.fn, name)

    def __repr__(self) -> str:
        return repr(self.fn)


def _datasets_of(dataset: Any, depth: int = 0) -> list:
    """The dataset and the ones it wraps (``Subset.dataset``, ``ConcatDataset.datasets``)."""
    out = [dataset]
    if depth >= 3:
        return out
    attrs = getattr(dataset, "__dict__", None) or {}
    inner = attrs.get("dataset")
    if inner is not None and inner is not dataset:
        out += _datasets_of(inner, depth + 1)
    for d in (attrs.get("datasets") or [])[:8] if isinstance(attrs.get("datasets"), (list, tuple)) else []:
        out += _datasets_of(d, depth + 1)
    return out


def wrap_transforms(dataset: Any) -> list:
    """Time the transform attributes a dataset (or one it wraps) holds in its own ``__dict__``;
    returns (object, name, original, wrapper) for ``unwrap_transforms``."""
    wrapped = []
    for d in _datasets_of(dataset):
        attrs = getattr(d, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name in TRANSFORM_ATTRIBUTES:
            fn = attrs.get(name)
            if fn is None or not callable(fn) or isinstance(fn, TimedTransform):
                continue
            w = TimedTransform(fn)
            attrs[name] = w
            wrapped.append((d, name, fn, w))
    return wrapped


def unwrap_transforms(wrapped: list) -> None:
    """Put the originals back, where the attribute still holds our wrapper (the program may have
    set a transform of its own since)."""
    for d, name, fn, w in wrapped:
        attrs = getattr(d, "__dict__", None)
        if isinstance(attrs, dict) and attrs.get(name) is w:
            attrs[name] = fn


def _strip_inherited_wrappers(dataset: Any) -> None:
    """A worker forked while the main process timed this dataset's transforms holds our wrappers:
    put the user's own back before anything else."""
    for d in _datasets_of(dataset):
        attrs = getattr(d, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name in TRANSFORM_ATTRIBUTES:
            if isinstance(attrs.get(name), TimedTransform):
                attrs[name] = attrs[name].fn


def _runq_ns() -> int:
    """The calling thread's time so far waiting for a CPU while ready to run (the second field of
    /proc/thread-self/schedstat), -1 where it cannot be read. The file stays open per thread and
    process (a forked worker opens its own) and is read again from its start: one pread."""
    local = _local
    pid = os.getpid()
    fd = local.sched_fd
    if fd is None or local.sched_pid != pid:
        try:
            fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        local.sched_fd, local.sched_pid = fd, pid
    if fd < 0:
        return -1
    try:
        return int(os.pread(fd, 96, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return -1


class _Batch:
    """One batch being timed. Its samples' times are appended to ``times`` (and their indices to
    ``indices``) by the fetch loop itself; the statistics are made once, at the end."""

    __slots__ = (
        "start",
        "cpu0",
        "runq0",
        "tr0",
        "gc0",
        "gc_fetched",
        "times",
        "indices",
        "timed_transform",
        "whole_n",
    )

    def __init__(self, timed_transform: bool) -> None:
        self.timed_transform = timed_transform
        self.tr0 = _clock.ns
        self.times: list = []
        self.indices: list = []
        self.whole_n = 0
        self.runq0 = _runq_ns()
        self.gc0 = self.gc_fetched = _gc_clock.now()
        self.cpu0 = thread_time_ns()
        self.start = monotonic_ns()

    def whole(self, n: int, ns: int) -> None:
        """A batch fetched by one call (``__getitems__``): its samples' times are not told apart."""
        self.whole_n, self.times = n, [ns]

    def fetched(self) -> int:
        """The end of the loading: its time, and the collector's pauses so far noted."""
        t = monotonic_ns()
        self.gc_fetched = _gc_clock.now()
        return t

    def done(self, fetched: int, collated: int) -> None:
        try:
            self._done(fetched, collated)
        except Exception:  # the batch is the user's either way: a record lost, never their loading
            pass

    def _done(self, fetched: int, collated: int) -> None:
        gc_end = _gc_clock.now()
        cpu = thread_time_ns() - self.cpu0
        runq = _runq_ns()
        runq = runq - self.runq0 if runq >= 0 and self.runq0 >= 0 else -1
        transform = _clock.ns - self.tr0 if self.timed_transform else -1
        gc_load, gc_collate = self.gc_fetched - self.gc0, gc_end - self.gc_fetched
        load = fetched - self.start - max(transform, 0) - gc_load
        times = self.times
        if self.whole_n:
            n, sumsq, slowest = self.whole_n, -1.0, ()
        else:
            n = len(times)
            sumsq = float(sum(map(operator.mul, times, times)))
            indices = [i if type(i) is int else -1 for i in self.indices]
            slowest = tuple(heapq.nlargest(SLOWEST_KEPT, zip(times, indices)))
        collate = max(collated - fetched - gc_collate, 0)
        _emit_batch(
            self.start,
            max(load, 0),
            transform,
            collate,
            cpu,
            runq,
            n,
            sum(times),
            sumsq,
            slowest,
            gc_load + gc_collate,
        )


def _transforms_timed(dataset: Any) -> bool:
    if _worker is not None:
        return bool(_worker.wrapped)
    if _main is None:
        return False
    return _main.time_transforms_of(dataset)


def timed_map_fetch(self, possibly_batched_index):
    """torch's ``_MapDatasetFetcher.fetch``, each sample and the collate timed."""
    _fetch_began()
    try:
        try:
            b = _Batch(_transforms_timed(self.dataset))
        except Exception:  # gpuprof's own setup failed: torch's fetch, untimed
            return _ORIGINALS["map_fetch"](self, possibly_batched_index)
        idx = None
        try:
            if self.auto_collation:
                if hasattr(self.dataset, "__getitems__") and self.dataset.__getitems__:
                    data = self.dataset.__getitems__(possibly_batched_index)
                    b.whole(len(possibly_batched_index), monotonic_ns() - b.start)
                else:
                    data = []
                    dataset, times, clock = self.dataset, b.times, monotonic_ns
                    b.indices = possibly_batched_index
                    for idx in possibly_batched_index:
                        t = clock()
                        data.append(dataset[idx])
                        times.append(clock() - t)
            else:
                idx = possibly_batched_index
                b.indices = [idx]
                t = monotonic_ns()
                data = self.dataset[possibly_batched_index]
                b.times.append(monotonic_ns() - t)
        except Exception as e:
            _emit_error("fetch", e, idx)
            raise
        return _collated(self, b, data)
    finally:
        _fetch_ended()


def timed_iterable_fetch(self, possibly_batched_index):
    """torch's ``_IterableDatasetFetcher.fetch``, each ``next()`` and the collate timed; a sample's
    index is its position in the worker's stream."""
    if self.ended:
        raise StopIteration
    _fetch_began()
    try:
        try:
            b = _Batch(_transforms_timed(self.dataset))
        except Exception:  # gpuprof's own setup failed: torch's fetch, untimed
            return _ORIGINALS["iterable_fetch"](self, possibly_batched_index)
        position = getattr(self, "_gpuprof_position", 0)
        b.indices = range(
            position, position + len(possibly_batched_index) if self.auto_collation else position + 1
        )
        try:
            if self.auto_collation:
                data = []
                times, clock = b.times, monotonic_ns
                for _ in possibly_batched_index:
                    t = clock()
                    try:
                        data.append(next(self.dataset_iter))
                    except StopIteration:
                        self.ended = True
                        break
                    times.append(clock() - t)
                    position += 1
                if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
                    raise StopIteration
            else:
                t = monotonic_ns()
                data = next(self.dataset_iter)
                b.times.append(monotonic_ns() - t)
                position += 1
        except StopIteration:
            self._gpuprof_position = position
            raise
        except Exception as e:
            _emit_error("fetch", e, position)
            raise
        self._gpuprof_position = position
        return _collated(self, b, data)
    finally:
        _fetch_ended()


def _collated(fetcher, b: _Batch, data):
    """The batch's samples through the fetcher's collate_fn, timed; the batch's record emitted."""
    fetched = b.fetched()
    try:
        out = fetcher.collate_fn(data)
    except Exception as e:
        _emit_error("collate", e)
        raise
    b.done(fetched, monotonic_ns())
    return out


_pin_local = threading.local()


def _timed_pin_memory(data, device=None):
    """torch's ``_utils.pin_memory.pin_memory``: the outermost call per batch timed (it calls
    itself for every element of a nested batch)."""
    if getattr(_pin_local, "depth", 0):
        return _ORIGINALS["pin_memory"](data, device)
    _pin_local.depth = 1
    t0 = monotonic_ns()
    try:
        return _ORIGINALS["pin_memory"](data, device)
    finally:
        _pin_local.depth = 0
        capture = _main
        if capture is not None:
            capture.add_pin(t0, monotonic_ns() - t0)


# ---- where records go -------------------------------------------------------------------------
def _batch_record(chan, worker, pid, tid, seq, start, idle, stages: tuple) -> tuple:
    """A batch's record: ``"b"``, who made it (channel, worker or -1, pid, thread, sequence), when
    it started, the idle time before it (-1: not known) and its ``stages`` as ``_emit_batch`` has
    them (load, transform, collate, cpu, runq, n, total, sumsq, slowest, gc)."""
    return ("b", chan, worker, pid, tid, seq, start, idle) + stages


def _emit_batch(start, load, transform, collate, cpu, runq, n, total, sumsq, slowest, gc) -> None:
    stages = (load, transform, collate, cpu, runq, n, total, sumsq, slowest, gc)
    w = _worker
    if w is not None:
        idle = start - w.last_end if w.last_end >= 0 else -1
        w.last_end = start + load + max(transform, 0) + collate + gc
        w.seq += 1
        _send(_batch_record(w.chan, w.worker, w.pid, w.pid, w.seq, start, idle, stages))
    elif _main is not None:
        _main.add_main_batch(start, stages)


def _error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= _ERROR_TEXT else text[: _ERROR_TEXT - 3] + "..."


def _emit_error(stage: str, e: BaseException, index: Any = None) -> None:
    if isinstance(e, StopIteration):  # the end of the data, as torch reads it
        return
    index = index if isinstance(index, int) and not isinstance(index, bool) else None
    try:
        w = _worker
        if w is not None:
            _send(("e", w.chan, w.worker, w.pid, w.seq + 1, monotonic_ns(), stage, _error_text(e), index))
        elif _main is not None:
            _main.add(("e", _main_chan(), -1, os.getpid(), 0, monotonic_ns(), stage, _error_text(e), index))
    except Exception:  # the user's exception is what matters
        pass


def _main_chan() -> int:
    return getattr(_main_current, "chan", -1)


def _send(record: tuple) -> None:
    """One record, one non-blocking write that the pipe keeps whole; dropped (counted) when the
    pipe is full, never a wait."""
    w = _worker
    if w is None or w.broken:
        return
    data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) + _FRAME.size > _PIPE_BUF:
        w.dropped += 1
        return
    try:
        os.write(w.fd, _FRAME.pack(len(data)) + data)
    except BlockingIOError:
        w.dropped += 1
    except OSError:  # the session ended and closed its end: nothing more to say
        w.broken = True
        _disable_in_worker()


# ---- swapping torch's code in and out ------------------------------------------------------------
_ORIGINALS: dict = {}


def _torch_parts():
    fetch = sys.modules.get("torch.utils.data._utils.fetch")
    pin = sys.modules.get("torch.utils.data._utils.pin_memory")
    return fetch, pin


def _remember_originals() -> bool:
    """torch's own functions, noted once (before any swap) so that every process can put them back."""
    if _ORIGINALS:
        return True
    fetch, pin = _torch_parts()
    if fetch is None or pin is None:
        return False
    m, i = fetch._MapDatasetFetcher.__dict__.get("fetch"), fetch._IterableDatasetFetcher.__dict__.get("fetch")
    if m is None or i is None or m is timed_map_fetch or i is timed_iterable_fetch:
        return False
    _ORIGINALS.update(map_fetch=m, iterable_fetch=i, pin_memory=pin.pin_memory)
    return True


class _Fetches:
    """The timed fetches in flight, and whether the collector's clock is to leave once they end.

    The clock is in ``gc.callbacks`` before the first timed fetch and stays until the last one is
    gone: a worker switched on or off by its control thread may be inside a timed fetch (or about to
    enter one it looked up before the swap) when the swap happens, and a collection in that batch
    without the clock would leave its pause in the batch's stages with ``gc_ns`` 0."""

    __slots__ = ("lock", "running", "clock_in", "timing")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.clock_in = False
        self.timing = False

    def clock(self, on: bool) -> None:
        if on != self.clock_in:
            _gc_clock_in(on)
            self.clock_in = on


_fetches = _Fetches()


def _fetch_began() -> None:
    f = _fetches
    with f.lock:
        f.running += 1
        f.clock(True)


def _fetch_ended() -> None:
    f = _fetches
    with f.lock:
        f.running -= 1
        if not f.running and not f.timing:
            f.clock(False)


def _swap_fetch(on: bool) -> None:
    fetch, _ = _torch_parts()
    if fetch is None or not _ORIGINALS:
        return
    f = _fetches
    with f.lock:
        f.timing = on
        if on:
            f.clock(True)
        fetch._MapDatasetFetcher.fetch = timed_map_fetch if on else _ORIGINALS["map_fetch"]
        fetch._IterableDatasetFetcher.fetch = timed_iterable_fetch if on else _ORIGINALS["iterable_fetch"]
        if not on and not f.running:
            f.clock(False)


def _gc_clock_in(on: bool) -> None:
    try:
        if on and _gc_clock not in gc.callbacks:
            gc.callbacks.append(_gc_clock)
        elif not on and _gc_clock in gc.callbacks:
            gc.callbacks.remove(_gc_clock)
    except (AttributeError, ValueError):  # an interpreter without gc.callbacks: pauses stay in the stages
        pass


def _swap_pin(on: bool) -> None:
    _, pin = _torch_parts()
    if pin is None or not _ORIGINALS:
        return
    pin.pin_memory = _timed_pin_memory if on else _ORIGINALS["pin_memory"]


def _enable_in_worker() -> None:
    w = _worker
    if w is None or w.broken:
        return
    if w.dataset is not None and not w.wrapped:
        w.wrapped = wrap_transforms(w.dataset)
    w.last_end = -1
    _swap_fetch(True)


def _disable_in_worker() -> None:
    w = _worker
    _swap_fetch(False)
    if w is not None and w.wrapped:
        unwrap_transforms(w.wrapped)
        w.wrapped = []
