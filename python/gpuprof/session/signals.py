"""Signals that end a training run (SIGTERM, SIGINT) save the span they cut short."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

from .._native import _core
from . import state as _state
from .state import _RECORDING

log = logging.getLogger("gpuprof")


# Signals that end a training run from outside (scancel, a batch system's time limit, Ctrl-C): while
# a session is active, a span they cut short is saved before they take effect (_on_signal).
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalHandling:
    """The signal part of ``gpuprof.profile``."""

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
        if self._signals_held or _state.active is not self:
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
