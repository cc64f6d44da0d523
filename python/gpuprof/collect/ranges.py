"""``gpuprof.range(name)``: mark a region of your code; it shows as a user range (CPU Exec) in the
breakdown and in torch.profiler, Perfetto and Nsight alike."""

from __future__ import annotations

import functools
import sys

from .._native import _core

# name -> called after a range of that name ends (gpuprof run --step-marker NAME: autostep.py).
_exit_listeners: dict = {}


def on_exit(name: str, listener) -> None:
    """Call ``listener()`` after each range named ``name`` ends (None: no longer)."""
    if listener is None:
        _exit_listeners.pop(name, None)
    else:
        _exit_listeners[name] = listener


class range:  # noqa: A001  (mirrors torch.profiler.record_function's role, under our namespace)
    """Context manager and decorator recording a user range named ``name``.

    With torch loaded, the range is a RecordFunction user scope (what ``torch.profiler.
    record_function`` opens), so gpuprof's hooks and any other RecordFunction observer see it;
    without torch, it is recorded straight into gpuprof's collector.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"gpuprof.range needs a non-empty name, got {name!r}")
        self.name = name
        self._torch_handle = None

    def __enter__(self) -> range:
        _core.nvtx_push(self.name)  # the same range in Nsight Systems (no-op without an NVTX tool)
        torch = sys.modules.get("torch")
        if torch is not None:
            self._torch_handle = torch.ops.profiler._record_function_enter_new(self.name, None)
        else:
            _core.collector_range_enter(id(self), self.name)
        return self

    def __exit__(self, *exc) -> None:
        if self._torch_handle is not None:
            handle, self._torch_handle = self._torch_handle, None
            sys.modules["torch"].ops.profiler._record_function_exit._RecordFunction(handle)
        else:
            _core.collector_range_exit(id(self))
        _core.nvtx_pop()
        if _exit_listeners:
            listener = _exit_listeners.get(self.name)
            if listener is not None:
                listener()

    def __call__(self, fn):
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with range(name):
                return fn(*args, **kwargs)

        return wrapper
