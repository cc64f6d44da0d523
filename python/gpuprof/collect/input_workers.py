"""The input pipeline's worker side: the hook a DataLoader worker runs at its start.

While a session is active, a multi-process iterator (``_MultiProcessingDataLoaderIter``) is created
with the loader's ``worker_init_fn`` chained to a ``WorkerHook`` (the user's function runs first,
unchanged). The hook reaches every worker the way torch sends ``worker_init_fn`` (inherited under
fork, pickled under spawn and forkserver), with two kinds of pipe: one that all the iterator's
workers write their records into, and one control pipe per worker. In the worker the hook starts a
thread that blocks on its control pipe: "on" (a span starts recording) swaps the worker's fetcher
classes' ``fetch`` for the timed copies of ``input_records.py`` and wraps the dataset's transforms;
"off" puts torch's back; "close" (the session ended) puts torch's back and ends the thread. So while
no span records a worker runs torch's own code, with no call of gpuprof's per batch. A worker says
hello when it starts and goodbye when it exits.
"""

from __future__ import annotations

import os
import threading
from time import monotonic_ns

from . import input_records as rec
from .input_records import (
    _disable_in_worker,
    _enable_in_worker,
    _remember_originals,
    _send,
    _strip_inherited_wrappers,
    _swap_fetch,
    _swap_pin,
    _WorkerState,
)


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
    rec._main = None  # a forked worker holds a copy of the session's capture: not its to use
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
    rec._worker = _WorkerState(hook.chan, worker_id, fd, dataset)
    _send(("h", hook.chan, worker_id, rec._worker.pid, monotonic_ns()))
    from multiprocessing import util

    util.Finalize(None, _say_goodbye, exitpriority=100)
    if hook.on:
        _enable_in_worker()
    if control is not None:
        threading.Thread(target=_control_loop, args=(control,), name="gpuprof-worker", daemon=True).start()


def _say_goodbye() -> None:
    w = rec._worker
    if w is not None:
        _disable_in_worker()
        _send(("x", w.chan, w.worker, w.pid, monotonic_ns(), w.dropped))


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
