"""The input pipeline seen from inside the DataLoader, while a span records: per batch, what each
worker process spends loading its samples, transforming them and collating the batch, how long it
idles waiting for the next index; what the pin-memory thread spends pinning each batch. (How long
the training loop waits for a batch, and how many were ready, is measured in ``dataloader.py``.)

Where it hooks, without touching the user's Dataset or DataLoader code (torch 2.x:
torch/utils/data/dataloader.py, _utils/worker.py, _utils/fetch.py, _utils/pin_memory.py):

- **Workers.** While a session is active, a multi-process iterator (``_MultiProcessingDataLoaderIter``)
  is created with the loader's ``worker_init_fn`` chained to a ``WorkerHook`` (the user's function
  runs first, unchanged). The hook reaches every worker the way torch sends ``worker_init_fn``
  (inherited under fork, pickled under spawn and forkserver), with two kinds of pipe: one that all
  the iterator's workers write their records into, and one control pipe per worker. In the worker
  the hook starts a thread that blocks on its control pipe: "on" (a span starts recording) swaps
  the worker's fetcher classes' ``fetch`` for timed copies of torch's and wraps the dataset's
  ``transform``/``transforms``/``target_transform`` attributes; "off" puts torch's back. So while no
  span records a worker runs torch's own code, with no call of gpuprof's per batch.
- **Records** are small tuples, pickled and written with one non-blocking ``write`` of at most
  PIPE_BUF bytes, which a pipe keeps whole: a full pipe drops the record (counted), never blocks the
  worker. A thread of the session reads the pipes (``_Reader``); it is woken only when records
  arrive. A worker says hello when it starts and goodbye when it exits; one that ends without a
  goodbye died, and the report says so. The records reach the session, never the training loop.
- **The main process.** While a span records, the fetcher classes are timed there too (a loader
  with ``num_workers=0`` loads in the training process), and ``_utils.pin_memory.pin_memory`` (the
  pin-memory thread's and ``num_workers=0``'s pinning) is timed per batch.
- **Teardown.** When the session ends, every control pipe gets "close": the worker threads put
  torch's code back and end; the reader thread ends and the session's pipe ends are closed. Workers
  started before the session (a ``persistent_workers`` iterator from an earlier epoch) have no hook:
  the report names them as not measured.

Clocks: ``time.monotonic_ns()`` is CLOCK_MONOTONIC, the clock of the session's Trace, in every
process of the machine; ``time.thread_time_ns()`` gives each batch's CPU time.
"""

from __future__ import annotations

import heapq
import operator
import os
import pickle
import selectors
import struct
import sys
import threading
import weakref
from time import monotonic_ns, thread_time_ns
from typing import Any, Optional

# Records: (kind, channel, ...). Kinds and fields, in order:
#   "h" hello:  chan, worker, pid, t_ns
#   "b" batch:  chan, worker, pid, tid, seq, start_ns, idle_ns, load_ns, transform_ns, collate_ns,
#               cpu_ns, runq_ns, samples, sample_sum_ns, sample_sumsq, slowest ((ns, index), ...)
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
_main: Optional[PipelineCapture] = None  # the session's capture, in the main process only
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
    thread's transform clock (the outermost call only: a transform calling another counts once)."""

    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn) -> None:
        self.fn = fn

    def __call__(self, *args, **kwargs):
        clock = _clock
        if clock.depth:
            return self.fn(*args, **kwargs)
        clock.depth = 1
        t0 = monotonic_ns()
        try:
            return self.fn(*args, **kwargs)
        finally:
            clock.ns += monotonic_ns() - t0
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

    __slots__ = ("start", "cpu0", "runq0", "tr0", "times", "indices", "timed_transform", "whole_n")

    def __init__(self, timed_transform: bool) -> None:
        self.timed_transform = timed_transform
        self.tr0 = _clock.ns
        self.times: list = []
        self.indices: list = []
        self.whole_n = 0
        self.runq0 = _runq_ns()
        self.cpu0 = thread_time_ns()
        self.start = monotonic_ns()

    def whole(self, n: int, ns: int) -> None:
        """A batch fetched by one call (``__getitems__``): its samples' times are not told apart."""
        self.whole_n, self.times = n, [ns]

    def done(self, fetched: int, collated: int) -> None:
        try:
            self._done(fetched, collated)
        except Exception:  # the batch is the user's either way: a record lost, never their loading
            pass

    def _done(self, fetched: int, collated: int) -> None:
        cpu = thread_time_ns() - self.cpu0
        runq = _runq_ns()
        runq = runq - self.runq0 if runq >= 0 and self.runq0 >= 0 else -1
        transform = _clock.ns - self.tr0 if self.timed_transform else -1
        load = fetched - self.start - max(transform, 0)
        times = self.times
        if self.whole_n:
            n, sumsq, slowest = self.whole_n, -1.0, ()
        else:
            n = len(times)
            sumsq = float(sum(map(operator.mul, times, times)))
            indices = [i if type(i) is int else -1 for i in self.indices]
            slowest = tuple(heapq.nlargest(SLOWEST_KEPT, zip(times, indices)))
        _emit_batch(
            self.start, max(load, 0), transform, collated - fetched, cpu, runq, n, sum(times), sumsq, slowest
        )


def _transforms_timed(dataset: Any) -> bool:
    if _worker is not None:
        return bool(_worker.wrapped)
    if _main is None:
        return False
    return _main.time_transforms_of(dataset)


def timed_map_fetch(self, possibly_batched_index):
    """torch's ``_MapDatasetFetcher.fetch``, each sample and the collate timed."""
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
    fetched = monotonic_ns()
    try:
        out = self.collate_fn(data)
    except Exception as e:
        _emit_error("collate", e)
        raise
    b.done(fetched, monotonic_ns())
    return out


def timed_iterable_fetch(self, possibly_batched_index):
    """torch's ``_IterableDatasetFetcher.fetch``, each ``next()`` and the collate timed; a sample's
    index is its position in the worker's stream."""
    if self.ended:
        raise StopIteration
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
    fetched = monotonic_ns()
    try:
        out = self.collate_fn(data)
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
    them (load, transform, collate, cpu, runq, n, total, sumsq, slowest)."""
    return ("b", chan, worker, pid, tid, seq, start, idle) + stages


def _emit_batch(start, load, transform, collate, cpu, runq, n, total, sumsq, slowest) -> None:
    stages = (load, transform, collate, cpu, runq, n, total, sumsq, slowest)
    w = _worker
    if w is not None:
        idle = start - w.last_end if w.last_end >= 0 else -1
        w.last_end = start + load + max(transform, 0) + collate
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


def _swap_fetch(on: bool) -> None:
    fetch, _ = _torch_parts()
    if fetch is None or not _ORIGINALS:
        return
    fetch._MapDatasetFetcher.fetch = timed_map_fetch if on else _ORIGINALS["map_fetch"]
    fetch._IterableDatasetFetcher.fetch = timed_iterable_fetch if on else _ORIGINALS["iterable_fetch"]


def _swap_pin(on: bool) -> None:
    _, pin = _torch_parts()
    if pin is None or not _ORIGINALS:
        return
    pin.pin_memory = _timed_pin_memory if on else _ORIGINALS["pin_memory"]


# ---- the worker side -----------------------------------------------------------------------------
class WorkerHook:
    """The loader's ``worker_init_fn`` while a session is active: the user's function first (its
    errors reach the user as torch reports them), then gpuprof's start in the worker, which never
    raises."""

    def __init__(self, user_fn, chan: int, records, controls: list, on: bool) -> None:
        self.user_fn = user_fn
        self.chan = chan
        self.records = records  # multiprocessing.connection.Connection: travels under spawn too
        self.controls = controls
        self.on = on

    def __call__(self, worker_id: int) -> None:
        if self.user_fn is not None:
            self.user_fn(worker_id)
        try:
            _start_in_worker(self, worker_id)
        except Exception:  # the worker loads its batches either way
            pass


def _start_in_worker(hook: WorkerHook, worker_id: int) -> None:
    global _worker, _main
    _main = None  # a forked worker holds a copy of the session's capture: not its to use
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    dataset = info.dataset if info is not None else None
    if not _remember_originals():
        return
    _swap_fetch(False)  # a worker forked while the main process was timed starts as torch's
    _swap_pin(False)
    if dataset is not None:
        _strip_inherited_wrappers(dataset)
    control = None
    for i, c in enumerate(hook.controls):
        if i == worker_id:
            control = c
        else:
            c.close()  # another worker's pipe, inherited under fork
    fd = hook.records.fileno()
    os.set_blocking(fd, False)
    _worker = _WorkerState(hook.chan, worker_id, fd, dataset)
    _send(("h", hook.chan, worker_id, _worker.pid, monotonic_ns()))
    from multiprocessing import util

    util.Finalize(None, _say_goodbye, exitpriority=100)
    if hook.on:
        _enable_in_worker()
    if control is not None:
        threading.Thread(target=_control_loop, args=(control,), name="gpuprof-worker", daemon=True).start()


def _say_goodbye() -> None:
    w = _worker
    if w is not None:
        _disable_in_worker()
        _send(("x", w.chan, w.worker, w.pid, monotonic_ns(), w.dropped))


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


def _control_loop(control) -> None:
    fd = control.fileno()
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            data = b""
        if not data:
            _disable_in_worker()
            return
        last = data[-1:]  # only the latest state counts
        if last == b"1":
            _enable_in_worker()
        elif last == b"0":
            _disable_in_worker()
        else:  # b"x": the session ended
            _disable_in_worker()
            return


# ---- the main-process side -----------------------------------------------------------------------
class _Channel:
    """One multi-process iterator's pipes, as the session holds them."""

    def __init__(self, chan: int, read_fd: int, control_fds: list, iterator) -> None:
        self.chan = chan
        self.read_fd = read_fd
        self.control_fds = control_fds
        self.iterator = weakref.ref(iterator)
        self.handles: list = []  # torch's worker handles: a dead worker's exit code outlives its iterator
        self.buffer = b""
        self.closed = False

    def tell(self, message: bytes) -> None:
        for fd in self.control_fds:
            try:
                os.write(fd, message)
            except OSError:  # a worker that is gone, or a full pipe (64 KiB of state changes)
                pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.tell(b"x")
        for fd in self.control_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.control_fds = []

    def workers(self) -> list:
        return self.handles


class _Reader(threading.Thread):
    """Reads the workers' records as they arrive (a worker never waits for the session)."""

    def __init__(self, capture: PipelineCapture) -> None:
        super().__init__(name="gpuprof-pipeline", daemon=True)
        self.capture = capture
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, None)
        self.lock = threading.Lock()
        self.pending: list = []  # channels to start reading
        self.synced: list = []  # threading.Event set after the next full read of every pipe
        self.stopping = False

    def wake(self) -> None:
        try:
            os.write(self.wake_w, b"w")
        except OSError:
            pass

    def add(self, channel: _Channel) -> None:
        with self.lock:
            self.pending.append(channel)
        self.wake()

    def sync(self, timeout_s: float = 0.5) -> None:
        """Return once every record written so far has been read (or after ``timeout_s``)."""
        if not self.is_alive():
            return
        done = threading.Event()
        with self.lock:
            self.synced.append(done)
        self.wake()
        done.wait(timeout_s)

    def stop(self) -> None:
        self.stopping = True
        self.wake()

    def run(self) -> None:
        try:
            self._run()
        finally:
            for key in list(self.selector.get_map().values()):
                try:
                    os.close(key.fd)
                except OSError:
                    pass
            self.selector.close()
            try:
                os.close(self.wake_w)
            except OSError:
                pass
            with self.lock:
                for ev in self.synced:
                    ev.set()

    def _run(self) -> None:
        while True:
            ready = self.selector.select()
            woken = False
            for key, _ in ready:
                if key.data is None:
                    woken = True
                    try:
                        os.read(self.wake_r, 4096)
                    except OSError:
                        pass
                else:
                    self._read(key.data)
            if not woken:
                continue
            with self.lock:
                pending, self.pending = self.pending, []
                synced, self.synced = self.synced, []
            for ch in pending:
                os.set_blocking(ch.read_fd, False)
                self.selector.register(ch.read_fd, selectors.EVENT_READ, ch)
            if synced:
                for key in list(self.selector.get_map().values()):
                    if key.data is not None:
                        self._read(key.data)
                for ev in synced:
                    ev.set()
            if self.stopping:
                return

    def _read(self, ch: _Channel) -> None:
        while True:
            try:
                chunk = os.read(ch.read_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # every worker of the iterator has exited
                self.selector.unregister(ch.read_fd)
                os.close(ch.read_fd)
                self.capture.channel_ended(ch)
                return
            buf = ch.buffer + chunk
            at = 0
            while len(buf) - at >= _FRAME.size:
                (n,) = _FRAME.unpack_from(buf, at)
                if len(buf) - at - _FRAME.size < n:
                    break
                try:
                    self.capture.add(pickle.loads(buf[at + _FRAME.size : at + _FRAME.size + n]))
                except Exception:
                    pass
                at += _FRAME.size + n
            ch.buffer = buf[at:]


class PipelineCapture:
    """The session's side: hooks iterator creation for the session's life, times the main
    process's loading and pinning while a span records, and collects every record."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list = []
        self._channels: dict[int, _Channel] = {}
        self._chan_of_iter: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._next_chan = 0
        self._reader: Optional[_Reader] = None
        self._on = False
        self._init_original = None
        self._iter_class = None
        self._main_wrapped: dict = {}  # id(dataset) -> wrapped transforms, while a span records
        self._pin_chan: dict = {}  # pin-memory thread id -> channel
        self._main_seq = 0
        self.over_budget = 0
        self.last_over_budget = 0
        self._workers: dict = {}  # (chan, worker id) -> {"pid", "ended", "dropped"}
        self.ended: set = set()  # channels whose workers all exited

    # ---- session lifetime ------------------------------------------------------------------
    def open(self) -> None:
        """From the session's start: multi-process iterators made from now on carry the hook."""
        global _main
        module = sys.modules.get("torch.utils.data.dataloader")
        if module is None or self._init_original is not None:
            _main = self
            return
        cls = module._MultiProcessingDataLoaderIter
        original = cls.__init__
        capture = self

        def __init__(it, loader, *args, **kwargs):
            return capture._make_iterator(original, it, loader, *args, **kwargs)

        __init__.__wrapped__ = original
        cls.__init__ = __init__
        self._iter_class, self._init_original = cls, original
        _main = self

    def close(self) -> None:
        """The session ends: the hooks come off, the workers put torch's code back, pipes close."""
        global _main
        self.span_off()
        if self._init_original is not None:
            self._iter_class.__init__ = self._init_original
            self._iter_class = self._init_original = None
        with self._lock:
            channels = list(self._channels.values())
        for ch in channels:
            ch.close()
        if self._reader is not None:
            self._reader.stop()
            self._reader.join(timeout=1.0)
            self._reader = None
        if _main is self:
            _main = None

    # ---- iterator creation -----------------------------------------------------------------
    def _make_iterator(self, original, it, loader, *args, **kwargs):
        try:
            hook, channel = self._new_channel(loader, it)
        except Exception:  # no pipes (out of file descriptors...): the loader runs unmeasured
            hook = channel = None
        if hook is None:
            return original(it, loader, *args, **kwargs)
        user_fn = loader.worker_init_fn
        loader.worker_init_fn = hook
        try:
            return original(it, loader, *args, **kwargs)
        finally:
            loader.worker_init_fn = user_fn
            try:
                self._started(hook, channel, it)
            except Exception:  # the loader works either way; its workers go unmeasured
                pass

    def _new_channel(self, loader, it):
        import multiprocessing.connection as mpc

        n = int(getattr(loader, "num_workers", 0) or 0)
        if n <= 0 or not _remember_originals():
            return None, None
        read_fd, write_fd = os.pipe()
        controls_r, controls_w = [], []
        for _ in range(n):
            r, w = os.pipe()
            os.set_blocking(w, False)
            controls_r.append(mpc.Connection(r, writable=False))
            controls_w.append(w)
        with self._lock:
            chan = self._next_chan
            self._next_chan += 1
        hook = WorkerHook(
            loader.worker_init_fn, chan, mpc.Connection(write_fd, readable=False), controls_r, self._on
        )
        channel = _Channel(chan, read_fd, controls_w, it)
        return hook, channel

    def _started(self, hook: WorkerHook, channel: _Channel, it) -> None:
        # The workers hold their ends now (forked, or passed at spawn): the session's copies close,
        # so that the records pipe ends when the last worker exits.
        hook.records.close()
        for c in hook.controls:
            c.close()
        channel.handles = list(getattr(it, "_workers", []) or [])
        with self._lock:
            self._channels[channel.chan] = channel
        self._chan_of_iter[it] = channel.chan
        pin_thread = getattr(it, "_pin_memory_thread", None)
        if pin_thread is not None and getattr(pin_thread, "native_id", None) is not None:
            self._pin_chan[pin_thread.native_id] = channel.chan
        weakref.finalize(it, channel.close)
        if self._reader is None:
            self._reader = _Reader(self)
            self._reader.start()
        self._reader.add(channel)
        if self._on != hook.on:  # a span started or ended while the workers were starting
            channel.tell(b"1" if self._on else b"0")

    def channel_of(self, it) -> Optional[int]:
        """The channel of a multi-process iterator made while the session was active (None: made
        before it, so its workers are not measured)."""
        return self._chan_of_iter.get(it)

    def new_main_channel(self, it) -> int:
        """A channel number for an iterator that loads in the main process (``num_workers=0``)."""
        with self._lock:
            chan = self._next_chan
            self._next_chan += 1
        self._chan_of_iter[it] = chan
        return chan

    def channel_ended(self, channel: _Channel) -> None:
        self.ended.add(channel.chan)
        channel.close()

    # ---- spans -----------------------------------------------------------------------------
    def span_on(self) -> None:
        if self._on or not _remember_originals():
            return
        self._on = True
        _swap_fetch(True)
        _swap_pin(True)
        with self._lock:
            channels = list(self._channels.values())
        for ch in channels:
            ch.tell(b"1")

    def span_off(self) -> None:
        if not self._on:
            return
        self._on = False
        _swap_fetch(False)
        _swap_pin(False)
        with self._lock:
            channels = list(self._channels.values())
            wrapped, self._main_wrapped = self._main_wrapped, {}
        for ch in channels:
            ch.tell(b"0")
        for w in wrapped.values():
            unwrap_transforms(w)

    def time_transforms_of(self, dataset) -> bool:
        """In the main process, the first timed fetch of a dataset wraps its transforms (until the
        span ends)."""
        key = id(dataset)
        w = self._main_wrapped.get(key)
        if w is None:
            w = self._main_wrapped[key] = wrap_transforms(dataset)
        return bool(w)

    # ---- records ---------------------------------------------------------------------------
    def add(self, record: tuple) -> None:
        kind = record[0]
        if kind == "h" or kind == "x":  # a worker started or ended: kept across spans
            with self._lock:
                w = self._workers.setdefault((record[1], record[2]), {"pid": record[3], "ended": False})
                w["pid"] = record[3]
                if kind == "x":
                    w["ended"] = True
                    w["dropped"] = record[5]
            return
        if len(self._records) >= MAX_RECORDS:
            self.over_budget += 1
            return
        self._records.append(record)

    def add_main_batch(self, start: int, stages: tuple) -> None:
        tid = threading.get_native_id()
        self._main_seq += 1
        if len(self._records) >= MAX_RECORDS:
            self.over_budget += 1
            return
        record = _batch_record(_main_chan(), -1, os.getpid(), tid, self._main_seq, start, -1, stages)
        self._records.append(record)

    def add_pin(self, start: int, dur: int) -> None:
        tid = threading.get_native_id()
        chan = self._pin_chan.get(tid, _main_chan())
        if len(self._records) >= MAX_RECORDS:
            self.over_budget += 1
            return
        self._records.append(("p", chan, tid, start, dur))

    def take(self) -> list:
        """Every record so far (the workers' too, read up to now); the list starts over, and so
        does ``over_budget`` (records past MAX_RECORDS, counted since the last take)."""
        if self._reader is not None:
            self._reader.sync()
        with self._lock:
            records, self._records = self._records, []
            self.last_over_budget, self.over_budget = self.over_budget, 0
        return records

    def discard(self) -> None:
        """A new recording epoch starts: what came before is not the span's."""
        self.take()

    def workers(self) -> dict:
        """chan -> one row per worker that said hello: ``worker``, ``pid``, ``status`` ("running",
        "exited": said goodbye, "died": gone without a goodbye, killed or crashed), ``exitcode``
        (torch's handle's, for a worker that died while its iterator is held; a negative number is
        the signal) and ``dropped`` (its records lost to a full pipe). Asked on the session's thread
        at a span's end."""
        with self._lock:
            known = {k: dict(v) for k, v in self._workers.items()}
            channels = dict(self._channels)
        out: dict = {}
        for (chan, worker), w in sorted(known.items()):
            status, exitcode = ("exited" if w["ended"] else "running"), None
            ch = channels.get(chan)
            if not w["ended"]:
                handles = ch.workers() if ch is not None else []
                handle = handles[worker] if worker < len(handles) else None
                try:
                    alive = handle.is_alive() if handle is not None else chan not in self.ended
                    if not alive:
                        status = "died"
                        exitcode = handle.exitcode if handle is not None else None
                except Exception:
                    pass
            if status == "died":
                with self._lock:
                    entry = self._workers.get((chan, worker))
                    if entry is None or entry.get("reported"):
                        continue
                    entry["reported"] = True  # a death is told in one span's report, not every one
            out.setdefault(chan, []).append(
                {
                    "worker": worker,
                    "pid": w["pid"],
                    "status": status,
                    "exitcode": exitcode,
                    "dropped": w.get("dropped", 0),
                }
            )
        self._forget_ended()
        return out

    def _forget_ended(self) -> None:
        """An iterator whose workers have all ended has been reported: its channel and its workers'
        rows go, so that a long session of short epochs holds no more than its live iterators."""
        with self._lock:
            for chan in [c for c in self.ended if c in self._channels]:
                del self._channels[chan]
                for key in [k for k in self._workers if k[0] == chan]:
                    del self._workers[key]
