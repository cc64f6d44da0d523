"""The input pipeline seen from inside the DataLoader, while a span records: per batch, what each
worker process spends loading its samples, transforming them and collating the batch, how long it
idles waiting for the next index; what the pin-memory thread spends pinning each batch. (How long
the training loop waits for a batch, and how many were ready, is measured in ``dataloader.py``.)

Three modules, without touching the user's Dataset or DataLoader code (torch 2.x:
torch/utils/data/dataloader.py, _utils/worker.py, _utils/fetch.py, _utils/pin_memory.py):
``input_workers.py`` (the hook each worker runs), ``input_records.py`` (the timed code and the
records it sends; the record layout) and this one, the session's side:

- ``PipelineCapture`` hooks the creation of multi-process iterators for the session's life, gives
  each iterator its pipes and a ``WorkerHook``, times the main process's loading and pinning while a
  span records, tells the workers "on" and "off" as spans start and stop, and collects every record.
- **The reader.** A thread of the session reads the pipes (``_Reader``); it is woken only when
  records arrive. A worker that ends without a goodbye died, and the report says so. The records
  reach the session, never the training loop.
- **Teardown.** When the session ends, every control pipe gets "close": the worker threads put
  torch's code back and end; the reader thread ends and the session's pipe ends are closed. Workers
  started before the session (a ``persistent_workers`` iterator from an earlier epoch) have no hook:
  the report names them as not measured.
"""

from __future__ import annotations

import os
import pickle
import selectors
import sys
import threading
import weakref
from typing import Optional

from . import input_records as rec
from .input_records import (
    _FRAME,
    MAX_RECORDS,
    _batch_record,
    _main_chan,
    _remember_originals,
    _swap_fetch,
    _swap_pin,
    unwrap_transforms,
    wrap_transforms,
)
from .input_workers import WorkerHook


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
        module = sys.modules.get("torch.utils.data.dataloader")
        if module is None or self._init_original is not None:
            rec._main = self
            return
        cls = module._MultiProcessingDataLoaderIter
        original = cls.__init__
        capture = self

        def __init__(it, loader, *args, **kwargs):
            return capture._make_iterator(original, it, loader, *args, **kwargs)

        __init__.__wrapped__ = original
        cls.__init__ = __init__
        self._iter_class, self._init_original = cls, original
        rec._main = self

    def close(self) -> None:
        """The session ends: the hooks come off, the workers put torch's code back, pipes close."""
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
        if rec._main is self:
            rec._main = None

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
