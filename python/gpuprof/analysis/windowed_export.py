"""The Chrome trace beside a report read in windows (docs/design.md, "Memory"): the trace read again
the way it was analysed, window by window, each window's own events written as they come into one
document (``_core.WindowedChromeTrace``), opened before the first window and closed after the last,
and renamed onto its path once whole (``traces/atomic.py``). Memory: one window's trace, the step
markers and GPU samples of the scan, the names of the lanes (devices, streams, DataLoader workers)
and the GPU timeline's bucket sums (a few widths of 101 buckets a device).

The entries are those the whole trace's export has, in another order (each window's events, memory
samples and critical path in turn, the lanes' names and the utilization counters last, from the GPU
timeline merged as the windowed report merges it: ``window_views.TimelineMerge``), but for the Est.
SM efficiency counter tracks, left out: each level is a running sum of the kernels' SM shares over
the whole trace, whose float residue a window cannot reproduce. A launch's flow arrow needs its
kernel in the launch's window, context included: a kernel that starts more than a whole step after
its launch's step ends has its arrowhead without the tail.
"""

from __future__ import annotations

import contextlib
import os
from typing import Callable, Optional, Union

from .._native import _core
from ..traces.atomic import replace_atomically
from .window_views import TimelineMerge
from .windowed import _file_size, _pass, _trim, spilled


class WindowedExport:
    """Writes the Chrome trace of the trace at ``path`` (read in windows of at most about half of
    ``cap`` events each, as ``windowed_report_dict`` reads it) on demand: ``write(out)``. While it
    writes, it is inside ``progress()``, a context manager yielding the callback each pass over the
    file is announced to (``progress(what, total_bytes, counter)``, as ``windowed_report_dict``'s;
    ``cli.progress.export_progress``) or None."""

    def __init__(
        self,
        path: Union[str, os.PathLike],
        *,
        cap: int,
        import_cpus: int = 0,
        progress: Optional[Callable[[], contextlib.AbstractContextManager]] = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.cap = cap
        self.import_cpus = import_cpus
        self.progress = progress if progress is not None else contextlib.nullcontext
        self.stamp = _stamp(self.path)  # the file as it was analysed

    def write(self, out: Union[str, os.PathLike]) -> str:
        """Write the trace to ``out`` (gzip when it ends in .gz), whole or not at all. Raises
        OSError when it cannot be written or the trace file changed since it was analysed,
        TraceImportError when a window cannot be read."""
        from ..traces.read import display_path

        if _stamp(self.path) != self.stamp:
            raise OSError(
                f"{display_path(self.path)} changed since it was analysed, so its Chrome trace was "
                f"not written (gpuprof analyze {display_path(self.path)} again)"
            )
        replace_atomically(out, self._write)
        return os.fspath(out)

    def _write(self, tmp: str) -> None:
        with self.progress() as announce:
            self._write_windows(tmp, announce)

    def _write_windows(self, tmp: str, announce) -> None:
        from ..traces.windows import plan_windows, read_numbered_window, scan_steps

        finding = _pass(announce, "finding its steps", _file_size(self.path))
        scan = scan_steps(self.path, self.import_cpus, progress=finding)
        windows = plan_windows(scan, max(1, self.cap // 2))
        out = _core.WindowedChromeTrace(tmp, scan.trace)
        try:
            timeline = TimelineMerge()
            with spilled(self.path, scan, windows, announce) as files:
                for i, w in enumerate(windows):
                    source = files[i] if files else self.path
                    counter = _pass(announce, f"window {i + 1} of {len(windows)}", _file_size(source))
                    trace, _stats = read_numbered_window(
                        self.path, source, windows, i, 2 * max(self.cap, w.events), self.import_cpus, counter
                    )
                    out.add(trace, w.own_from, w.own_to)
                    timeline.add(trace, w.own_from, w.own_to)
                    del trace
                    if files:
                        os.unlink(files[i])
                    _trim()
            for device, rows in timeline.result().items():
                # The buckets' starts in ns: the span's first event plus whole bucket widths.
                width = round(rows[0]["dur_us"] * 1000) if len(rows) > 1 else 0
                buckets = [(timeline.lo + b * width, r["utilization_pct"]) for b, r in enumerate(rows)]
                out.utilization(int(device), buckets, timeline.hi)
            out.close()
        finally:
            # A write cut short lets go of its file now (the temporary is removed), not when the
            # exception's traceback, which holds this frame, is freed.
            del out


def _stamp(path: str) -> tuple:
    """The file's size and modification time; ``(None,)`` where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return (None,)
    return (st.st_size, st.st_mtime_ns)
