"""Progress of a long read on stderr, for ``gpuprof analyze``: once a read has taken two seconds, one
line redrawn in place with how much is read of how much, the rate and the time left; cleared when
the read ends. Nothing when stderr is not a terminal (logs and CI output stay clean) or with
``--quiet``. ``GPUPROF_PROGRESS_AFTER_S`` sets the two seconds (docs/analyze.md)."""

from __future__ import annotations

import io
import os
import sys
import time
from typing import Callable, Optional

#: Seconds a read runs before its progress shows.
DELAY_S = 2.0
#: Seconds between redraws.
INTERVAL_S = 0.25


def delay_s() -> float:
    """``GPUPROF_PROGRESS_AFTER_S`` when it is a number of seconds (0 or more), else ``DELAY_S``."""
    try:
        value = float(os.environ.get("GPUPROF_PROGRESS_AFTER_S", ""))
    except ValueError:
        return DELAY_S
    return value if value >= 0 and value == value and value != float("inf") else DELAY_S


def three_figures(n: float) -> str:
    """``n`` (below 1000) with three significant figures, trailing zeros kept: 1.00, 12.3, 950."""
    return f"{n:.2f}" if n < 9.995 else f"{n:.1f}" if n < 99.95 else f"{n:.0f}"


def size_text(n: float) -> str:
    """Bytes in decimal units, three significant figures: ``950 B``, ``12.3 kB``, ``1.00 GB``."""
    if n < 999.5:
        return f"{n:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        n /= 1000
        if n < 999.5 or unit == "TB":
            return f"{three_figures(n) if n < 999.5 else f'{n:.0f}'} {unit}"
    raise AssertionError("unreachable")


def count_text(n: float) -> str:
    """A count per second, short: ``0.50``, ``950``, ``12.3 k``, ``2.50 M``."""
    if n < 999.5:
        return three_figures(n)
    if n < 999.5e3:
        return f"{three_figures(n / 1e3)} k"
    return f"{three_figures(n / 1e6) if n < 999.5e6 else f'{n / 1e6:.0f}'} M"


def duration_text(s: float) -> str:
    """Seconds as ``m:ss`` (``h:mm:ss`` from an hour)."""
    s = int(s + 0.5)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def progress_line(
    label: str,
    done: float,
    total: Optional[float],
    unit: str,
    count: Optional[int],
    count_name: str,
    elapsed_s: float,
) -> str:
    """The line shown: ``label: 1.23 GB of 4.00 GB (31%), 2.10 M events/s, 0:12 left``. ``unit`` is
    "bytes" (sizes shown in B/kB/MB...) or a noun counted as it is (``3 of 10 files``); ``count``
    (events so far, or None) gives the rate; without a total there is no share and no time left."""

    def amount(n: float) -> str:
        return size_text(n) if unit == "bytes" else f"{n:.0f}"

    if total:
        done = min(done, total)
        text = f"{label}: {amount(done)} of {amount(total)}{'' if unit == 'bytes' else ' ' + unit}"
        text += f" ({100 * done / total:.0f}%)"
    else:
        text = f"{label}: {amount(done)}{'' if unit == 'bytes' else ' ' + unit}"
    if elapsed_s > 0:
        if count is not None:
            text += f", {count_text(count / elapsed_s)} {count_name}/s"
        elif unit == "bytes":
            text += f", {size_text(done / elapsed_s)}/s"
        else:
            text += f", {count_text(done / elapsed_s)} {unit}/s"
        if total and 0 < done < total:
            text += f", {duration_text(elapsed_s * (total - done) / done)} left"
    return text


class ReadProgress:
    """A progress line on ``stream`` (stderr) for a read in progress, drawn by a thread of its own
    while the read runs (the trace import releases the GIL). ``poll()`` returns ``(done, count)``:
    how much is read (bytes, or files for a folder) and the events parsed so far (None when not
    known). Use as a context manager around the read."""

    def __init__(
        self,
        label: str,
        total: Optional[float],
        poll: Callable[[], tuple],
        *,
        unit: str = "bytes",
        count_name: str = "events",
        stream=None,
        enabled: Optional[bool] = None,
        after_s: Optional[float] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = enabled
        self.label, self.total, self.poll, self.unit, self.count_name = label, total, poll, unit, count_name
        # What the line shows now, (label, total, poll): one tuple, swapped whole by phase().
        self._view = (label, total, poll)
        self.after_s = delay_s() if after_s is None else after_s
        self.clock = clock
        import threading  # only where a progress line may show: a plain `gpuprof analyze` skips it

        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._drawn = False
        self._begun = self._start = 0.0  # when the read began; when the pass shown began
        self._lock = threading.Lock()  # the drawing thread's and phase()'s draws, one at a time

    def __enter__(self):
        if self.enabled:
            self._begun = self._start = self.clock()
            import threading

            self._thread = threading.Thread(target=self._run, name="gpuprof-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        # A read that ended past the delay shows where it ended before the line is cleared, so
        # that a read finishing between two redraws still showed its progress once.
        if exc[0] is None and self.clock() - self._begun >= self.after_s:
            self._draw()
        if self._drawn:
            self._write("\r\x1b[K")

    def _run(self) -> None:
        if self._stop.wait(self.after_s):
            return
        while True:
            self._draw()
            if self._stop.wait(INTERVAL_S):
                return

    def phase(self, what: str, total: Optional[float], counter) -> None:
        """The read moves on to another pass over the file (a windowed read: its steps found, its
        events copied into windows, each window read): the line shows ``what`` after the label,
        with ``counter``'s bytes of ``total`` and its own rate and time left. The pass before is
        drawn as it ended first, so that each pass that ran past the delay was seen complete."""
        if self.enabled and self._thread is not None and self.clock() - self._begun >= self.after_s:
            self._draw()

        def poll() -> tuple:
            return counter.bytes, (counter.events or None)

        self._view = (f"{self.label} ({what})", total, poll)
        self._start = self.clock()

    def _draw(self) -> None:
        with self._lock:
            self._draw_now()

    def _draw_now(self) -> None:
        label, total, poll = self._view
        done, count = poll()
        line = progress_line(
            label, done, total, self.unit, count, self.count_name, self.clock() - self._start
        )
        # One terminal line at most: a longer one would wrap, and "\r" would redraw only its end.
        width = self._width()
        if width and len(line) >= width:
            line = line[: max(1, width - 2)] + "…"
        self._write("\r" + line + "\x1b[K")
        self._drawn = True

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            return 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or gone terminal: the read goes on without it
            self.enabled = False


def file_progress(path, quiet: bool, stream=None):
    """``(ReadProgress, ImportProgress)`` for reading one trace file: the line shows the file's
    bytes (compressed bytes for gzip) and the events parsed. The ImportProgress goes to the import
    (``gpuprof.analyze(..., import_progress=)``); None for both when no progress is to be shown."""
    from .. import _core
    from ..report.sections import printable
    from ..traces.read import display_path

    stream = stream if stream is not None else sys.stderr
    if quiet or not (hasattr(stream, "isatty") and stream.isatty()):
        return None, None
    counter = _core.ImportProgress()
    try:
        st = os.stat(path)
        total = st.st_size if st.st_size > 0 and os.path.isfile(path) else None
    except OSError:
        total = None
    label = f"reading {printable(display_path(path))}"
    return ReadProgress(label, total, lambda: (counter.bytes, counter.events), stream=stream), counter


def folder_progress(quiet: bool, stream=None):
    """The ``progress(files)`` a folder's analysis enters around its reading (``analyze_folder``):
    a line with the files read of all, their total size, files per second and the time left."""
    import contextlib

    stream = stream if stream is not None else sys.stderr

    @contextlib.contextmanager
    def reading(files: list):
        if quiet or not (hasattr(stream, "isatty") and stream.isatty()):
            yield lambda amount=1: None
            return
        done = [0]
        size = sum(os.path.getsize(f) for f in files)
        label = f"reading {len(files)} files ({size_text(size)})"
        with ReadProgress(label, len(files), lambda: (done[0], None), unit="files", stream=stream):

            def advance(amount=1):
                done[0] += amount

            yield advance

    return reading


def export_progress(quiet: bool, stream=None):
    """The ``progress()`` a report read in windows enters around writing its Chrome trace, which
    reads the trace file again window by window (``analysis/windowed_export.py``): it yields the
    callback each pass over the file is announced to (``ReadProgress.phase``: ``writing the Chrome
    trace (window I of N): ...``), or None when no line is shown (``quiet``, or stderr is not a
    terminal)."""
    import contextlib

    stream = stream if stream is not None else sys.stderr

    @contextlib.contextmanager
    def writing():
        if quiet or not (hasattr(stream, "isatty") and stream.isatty()):
            yield None
            return
        with ReadProgress("writing the Chrome trace", None, lambda: (0, None), stream=stream) as shown:
            yield shown.phase

    return writing
