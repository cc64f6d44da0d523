"""A folder of per-rank traces (or gpuprof reports): map-reduce over its files.

Each file is read by one worker process, which returns a small summary (``ranks.summary_from_report``)
and, when asked, its analysed report dict, never the events; the summaries merge in the report
builder (``gpuprof.report.build.cross_rank_report``). Memory is bounded by the workers (each holds
one trace at a time and is replaced after ``tasks_per_worker`` files, so no allocator growth piles
up), not by the number of ranks. ``dask_address`` runs the same per-file function on an existing
dask.distributed cluster instead. Nothing here imports torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, Optional, Union

from ..traces.folders import is_report
from ..traces.read import TraceImportError, display_path, import_trace, read_json, trace_source
from . import report_dict
from .ranks import summary_from_report


def file_report_dict(
    path: Union[str, os.PathLike],
    *,
    drop_incomplete_last_step: bool = True,
    import_cpus: int = 0,
    peak_tflops: Optional[float] = None,
) -> dict:
    """The analysed report dict of one trace file (no advice: the report builder adds it)."""
    trace, stats = import_trace(path, import_cpus=import_cpus)
    return report_dict(
        trace,
        source=trace_source(path, stats),
        drop_incomplete_last_step=drop_incomplete_last_step,
        peak_tflops=peak_tflops,
    )


_HOST_FROM_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")


def summarize_file(
    path: str,
    drop_incomplete_last_step: bool = True,
    keep_report: str = "rank0",
    import_cpus: int = 0,
    peak_tflops: Optional[float] = None,
) -> tuple:
    """One file -> (summary, analysed report dict or None). The report dict comes back for rank 0
    (the cross-rank report is built on it) or, with keep_report="all", always. Runs in a worker,
    whose import counts on ``import_cpus`` CPUs (0: all this process may use)."""
    p = Path(path)
    from_report = p.name.endswith(".json") and is_report(p)
    if from_report:
        data = read_json(p)
    else:
        data = file_report_dict(
            p,
            drop_incomplete_last_step=drop_incomplete_last_step,
            import_cpus=import_cpus,
            peak_tflops=peak_tflops,
        )
    info = dict(data.get("distributed") or {})
    m = _HOST_FROM_NAME.match(p.name)
    if m and not info.get("hostname"):
        info["hostname"] = m.group("host")  # tensorboard_trace_handler's default worker name
    summary = summary_from_report(data, rank_info=info)
    summary["source"] = str(p)
    summary["from_report"] = from_report
    keep = keep_report == "all" or summary["rank"] == 0
    return summary, (data if keep else None)


def summarize_files(
    files: Iterable[Union[str, os.PathLike]],
    *,
    workers: Optional[int] = None,
    tasks_per_worker: int = 25,
    dask_address: Optional[str] = None,
    drop_incomplete_last_step: bool = True,
    keep_report: str = "rank0",
    on_done: Optional[Callable[[], None]] = None,
    skipped: Optional[list] = None,
    peak_tflops: Optional[float] = None,
) -> list[tuple]:
    """(summary, report dict or None) per file, in the files' order.

    A file that cannot be read (truncated, not a trace, not allowed) raises, unless ``skipped`` is
    a list: then its entry is None and ``{"path", "error"}`` is appended to ``skipped``, so that
    one bad rank file does not cost the report of the others."""
    files = [str(f) for f in files]
    results: list = [None] * len(files)

    def failed(i: int, e: Exception) -> None:
        if skipped is None:
            raise e
        skipped.append(unreadable(files[i], e))

    if dask_address:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise RuntimeError(
                "--dask needs dask.distributed in this environment: "
                "python -m pip install 'distributed>=2023.1'"
            ) from None
        try:
            # Dask's connect timeout applies (distributed.comm.timeouts.connect, 30 s by default;
            # $DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT sets it).
            client = Client(dask_address)
        except (OSError, TimeoutError, ValueError, TypeError) as e:
            raise RuntimeError(f"--dask {dask_address}: cannot reach a dask scheduler there: {e}") from None
        with client:
            futures = client.map(
                summarize_file,
                files,
                drop_incomplete_last_step=drop_incomplete_last_step,
                keep_report=keep_report,
                peak_tflops=peak_tflops,
                pure=False,
            )
            index = {f.key: i for i, f in enumerate(futures)}
            for fut in as_completed(futures):
                try:
                    results[index[fut.key]] = fut.result()
                except Exception as e:
                    failed(index[fut.key], e)
                fut.release()
                if on_done:
                    on_done()
        return results
    workers = workers or min(len(files), os.cpu_count() or 1)
    if workers <= 1 or len(files) == 1:
        for i, f in enumerate(files):
            try:
                results[i] = summarize_file(f, drop_incomplete_last_step, keep_report, 0, peak_tflops)
            except Exception as e:
                failed(i, e)
            if on_done:
                on_done()
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import as_completed as done

    # Workers are replaced after tasks_per_worker files by running the files in batches, one pool
    # each, rather than with ProcessPoolExecutor(max_tasks_per_child=...): on Python 3.11 and 3.12
    # that option deadlocks once a worker retires while files are still queued (CPython
    # gh-115634, fixed only from 3.13), which hung every folder of more than workers x 25 files.
    ctx = multiprocessing.get_context("spawn")
    batch = workers * max(1, tasks_per_worker)
    # Each worker's import may use its share of the CPUs for threads of its own (two parsers, and
    # for gzip two inflaters, from 2 and 4 CPUs: docs/analyze.md), not all of them each.
    from ..collect.dataloader import cpus_available

    share = max(1, cpus_available() // workers)
    for first in range(0, len(files), batch):
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = {
                pool.submit(
                    summarize_file, files[i], drop_incomplete_last_step, keep_report, share, peak_tflops
                ): i
                for i in range(first, min(first + batch, len(files)))
            }
            for fut in done(futs):
                try:
                    results[futs[fut]] = fut.result()
                except Exception as e:
                    failed(futs[fut], e)
                if on_done:
                    on_done()
    return results


def unreadable(path: str, e: Exception) -> dict:
    """A file that could not be read, for the report: its path and why (an import error's own
    message, which names the byte; else the exception's type and message)."""
    shown = display_path(path)
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        # The OS's own error for this file ("[Errno 13] Permission denied: 'path'"): the cause alone.
        return {"path": shown, "error": e.strerror[:1].lower() + e.strerror[1:]}
    message = str(e) if isinstance(e, (OSError, TraceImportError)) else f"{type(e).__name__}: {e}"
    for prefix in (f"{shown}: ", f"{path}: "):
        message = message.removeprefix(prefix)
    return {"path": shown, "error": message}
