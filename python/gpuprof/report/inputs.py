"""The one entry for an input, a file or a folder (``analyze``: what ``gpuprof analyze`` and
``gpuprof.analyze`` run). A folder of per-rank traces (or gpuprof reports) is map-reduce over its
files.

Each file is read by one worker process with the one-file analysis (``build.analyze_file``), which
returns a small summary (``ranks.summary_from_report``) and, when asked, its analysed report dict,
never the events; the summaries merge in the report builder (``build.cross_rank_report``). Memory
is bounded by the workers, not by the number of ranks: each holds one trace at a time, within its
share of the memory budget (``traces.read.memory_budget``: the workers of a machine divide it),
and is replaced after ``tasks_per_worker`` files (files under ``FILE_UNIT_BYTES`` count as their
share of one), so no allocator growth piles up. ``dask_address`` runs the same per-file function
on an existing dask.distributed cluster instead, each dask worker dividing its own memory limit
among its threads. Nothing here imports torch.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ..traces.journal import ended_note, is_journal, read_journal
from ..traces.read import TraceImportError, check_path, display_path, read_json
from .build import analyze_file, build_report, cross_rank_report
from .model import Report

_HOST_FROM_NAME = r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$"

#: A file this large or larger is one task of a worker's ``tasks_per_worker``; a smaller one is its
#: share of one (a folder of 10,000 small rank files would otherwise start a pool every 50 files).
FILE_UNIT_BYTES = 1 << 20


def _dask_worker_budget(max_memory: int) -> Optional[tuple[int, int]]:
    """On a dask worker: (the memory budget, the imports that share it), from ``max_memory`` or
    the worker's own memory limit (half of it; 0: half the memory left), divided among its threads;
    elsewhere None."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    threads = getattr(getattr(worker, "state", None), "nthreads", None) or getattr(worker, "nthreads", 1)
    limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
    return (max_memory or (limit or 0) // 2), max(1, int(threads or 1))


def summarize_file(
    path: str,
    drop_incomplete_last_step: bool = True,
    keep_report: str = "rank0",
    import_cpus: int = 0,
    peak_tflops: Optional[float] = None,
    max_bytes: int = 0,
    max_events: int = 0,
    max_memory: int = 0,
    memory_share: int = 1,
) -> tuple:
    """One file -> (summary, analysed report dict or None). The report dict comes back for rank 0
    (the cross-rank report is built on it) or, with keep_report="all", always. Runs in a worker,
    whose import counts on ``import_cpus`` CPUs (0: all this process may use) and on its
    ``memory_share`` of the memory budget (``max_memory``, or half the memory left); on a dask
    worker, on its thread's share of that worker's memory limit."""
    p = Path(path)
    on_dask = _dask_worker_budget(max_memory)
    if on_dask is not None:
        max_memory, memory_share = on_dask
    from ..traces.folders import is_report  # a folder's saved reports: only for folders

    from_report = p.name.endswith(".json") and is_report(p)
    if from_report:
        data = read_json(p)
    elif is_journal(p):
        data = analyze_journal(p, with_step_views=False, peak_tflops=peak_tflops).to_dict()
    else:
        data = analyze_file(
            p,
            drop_incomplete_last_step=drop_incomplete_last_step,
            with_step_views=False,
            peak_tflops=peak_tflops,
            max_bytes=max_bytes,
            max_events=max_events,
            import_cpus=import_cpus,
            max_memory=max_memory,
            memory_share=memory_share,
        ).to_dict()
    from ..analysis.ranks import summary_from_report  # the cross-rank module: only for folders

    info = dict(data.get("distributed") or {})
    m = re.match(_HOST_FROM_NAME, p.name)
    if m and not info.get("hostname"):
        info["hostname"] = m.group("host")  # tensorboard_trace_handler's default worker name
    summary = summary_from_report(data, rank_info=info)
    summary["source"] = str(p)
    summary["from_report"] = from_report
    keep = keep_report == "all" or summary["rank"] == 0
    return summary, (data if keep else None)


def summarize_chunk(paths: list, **kwargs) -> list[tuple]:
    """``summarize_file`` of each path in turn: (True, its result) or (False, the exception)."""
    out = []
    for path in paths:
        try:
            out.append((True, summarize_file(path, **kwargs)))
        except Exception as e:
            out.append((False, e))
    return out


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
    max_bytes: int = 0,
    max_events: int = 0,
    max_memory: int = 0,
    file_unit_bytes: int = FILE_UNIT_BYTES,
) -> list[tuple]:
    """(summary, report dict or None) per file, in the files' order.

    A file that cannot be read (truncated, not a trace, not allowed) raises, unless ``skipped`` is
    a list: then its entry is None and ``{"path", "error"}`` is appended to ``skipped``, so that
    one bad rank file does not cost the report of the others. ``workers`` processes share the
    memory budget (``max_memory``, or half the memory left): each import gets its share."""
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
            # Small files go many to a task (a task per file cost the scheduler more than reading
            # one); a task reads its files one after another, so a worker holds one trace at a time.
            chunks = list(batches(files, 1, max(1, file_unit_bytes // 4)))
            futures = client.map(
                summarize_chunk,
                [files[a:b] for a, b in chunks],
                drop_incomplete_last_step=drop_incomplete_last_step,
                keep_report=keep_report,
                peak_tflops=peak_tflops,
                max_bytes=max_bytes,
                max_events=max_events,
                max_memory=max_memory,
                pure=False,
            )
            index = {f.key: chunk for f, chunk in zip(futures, chunks)}
            # Results fetched as they complete, in the background (a fut.result() each was one
            # round trip to the scheduler per task).
            for fut, result in as_completed(futures, with_results=True, raise_errors=False):
                first, end = index[fut.key]
                if fut.status == "error" or isinstance(result, BaseException):
                    why = (
                        result[1]
                        if fut.status == "error"
                        else RuntimeError(f"dask cancelled the task: {result}")
                    )
                    result = [(False, why)] * (end - first)
                for i, (ok, value) in zip(range(first, end), result):
                    if ok:
                        results[i] = value
                    else:
                        failed(i, value)
                    if on_done:
                        on_done()
                fut.release()
        return results
    workers = workers or min(len(files), os.cpu_count() or 1)
    if workers <= 1 or len(files) == 1:
        for i, f in enumerate(files):
            try:
                results[i] = summarize_file(
                    f,
                    drop_incomplete_last_step,
                    keep_report,
                    0,
                    peak_tflops,
                    max_bytes,
                    max_events,
                    max_memory,
                )
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
    # Each worker's import may use its share of the CPUs for threads of its own (two parsers, and
    # for gzip two inflaters, from 2 and 4 CPUs: docs/analyze.md), not all of them each.
    from .._host import cpus_available

    share = max(1, cpus_available() // workers)
    for first, end in batches(files, workers * max(1, tasks_per_worker), file_unit_bytes):
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = {
                pool.submit(
                    summarize_file,
                    files[i],
                    drop_incomplete_last_step,
                    keep_report,
                    share,
                    peak_tflops,
                    max_bytes,
                    max_events,
                    max_memory,
                    workers,
                ): i
                for i in range(first, end)
            }
            for fut in done(futs):
                try:
                    results[futs[fut]] = fut.result()
                except Exception as e:
                    failed(futs[fut], e)
                if on_done:
                    on_done()
    return results


def batches(files: list, tasks: int, file_unit_bytes: int) -> Iterable[tuple[int, int]]:
    """The files cut into runs of ``tasks`` tasks, (first, end) each: a file of
    ``file_unit_bytes`` or more is one task, a smaller one its share of one (at least one byte), so
    small files come many to a run. One pool of workers reads each run."""
    first, load = 0, 0.0
    for i, f in enumerate(files):
        try:
            size = os.stat(f).st_size
        except OSError:
            size = file_unit_bytes  # reading it will say why
        load += min(1.0, max(1, size) / file_unit_bytes)
        if load >= tasks:
            yield first, i + 1
            first, load = i + 1, 0.0
    if first < len(files):
        yield first, len(files)


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


def analyze_folder(
    folder: Union[str, os.PathLike],
    *,
    ranks: bool = False,
    workers: Optional[int] = None,
    dask_address: Optional[str] = None,
    drop_incomplete_last_step: bool = True,
    peak_tflops: Optional[float] = None,
    max_bytes: int = 0,
    max_events: int = 0,
    max_memory: int = 0,
    say: Optional[Callable[[str], None]] = None,
    progress: Optional[Callable[[list], Any]] = None,
):
    """The report of a folder, as ``gpuprof analyze DIR`` prints it: for the ranks of one job (files
    that carry a world size above 1, gpuprof reports of a job, or any files with ``ranks``) one
    cross-rank ``Report``; else a list of Reports, one per file in path order, leaving out the
    trailing traces whose steps hold no recorded work (unless every file is one).

    Files that are neither a trace nor a gpuprof report, files that cannot be read (named in the
    report's ``cross_rank.skipped_files``) and traces left out are each one line to ``say`` (by
    default a warning on the ``gpuprof`` logger). ``progress(files)``, when given, is entered around
    the reading and yields the callable each read file calls.

    Raises FileNotFoundError (no file to read), TraceImportError (no file could be read), ValueError
    (``workers`` below 1), OSError (the folder cannot be listed), RuntimeError (``dask_address``
    reaches no scheduler)."""
    import contextlib

    from ..report.sections import printable
    from ..traces.folders import rank_files

    if say is None:
        import logging

        say = logging.getLogger("gpuprof").warning
    unrecognised: list = []
    files = rank_files(folder, unrecognised)
    if not files:
        raise FileNotFoundError(
            f"{display_path(folder)}: no trace files (*.json.gz, or *.json with traceEvents) and no "
            "gpuprof reports in this folder"
        )
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be 1 or more, got {workers}")
    if unrecognised:  # listed and skipped: neither a trace nor a gpuprof report
        names = ", ".join(printable(display_path(p)) for p in unrecognised[:5])
        more = f" and {len(unrecognised) - 5} more" if len(unrecognised) > 5 else ""
        say(
            f"skipped {len(unrecognised)} file(s) that are neither a trace nor a gpuprof report: "
            f"{names}{more}"
        )
    keep = "all" if len(files) <= 64 else "rank0"
    skipped: list[dict] = []  # files that cannot be read: named, and the others reported
    with progress(files) if progress else contextlib.nullcontext(None) as advance:
        results = summarize_files(
            files,
            workers=workers,
            dask_address=dask_address,
            drop_incomplete_last_step=drop_incomplete_last_step,
            keep_report=keep,
            on_done=advance,
            skipped=skipped,
            peak_tflops=peak_tflops,
            max_bytes=max_bytes,
            max_events=max_events,
            max_memory=max_memory,
        )
    if skipped and len(skipped) == len(files):
        first = skipped[0]
        raise TraceImportError(
            f"no file of {display_path(folder)} could be read: {first['path']}: {first['error']}"
            + (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else "")
        )
    for s in skipped:  # the report of the others is made, and says so
        say(f"skipped {printable(s['path'])}: {printable(s['error'])}")
    read = [(f, r) for f, r in zip(files, results) if r is not None]
    if ranks or any(s.get("world_size", 1) > 1 for _f, (s, _d) in read):
        return cross_rank_report([r for _f, r in read], skipped=skipped)
    reports, idle = [], []
    for f, (_s, d) in read:
        if d is None:
            d = summarize_file(
                str(f), drop_incomplete_last_step, "all", 0, peak_tflops, max_bytes, max_events, max_memory
            )[1]
        report = build_report(analysed=d)
        (idle if _no_work_in_steps(report) else reports).append((f, report))
    if reports:  # a folder of nothing but idle traces still shows them, as they are
        for f, _report in idle:
            say(
                f"left out {printable(display_path(f))}: its steps hold no recorded work (a "
                "torch.profiler cycle's trailing trace: the next cycle's warm-up only)"
            )
    return [r for _f, r in (reports or idle)]


def _no_work_in_steps(report) -> bool:
    """No step, or steps of nothing but Other: no operator, range, data loading or device work was
    recorded in them (what torch.profiler's schedule writes for the warm-up of a cycle that never
    ran)."""
    from ..analysis import CATEGORIES

    avg = report.average
    return not report.steps or all(not avg.get(f"{key}_us") for key, _name in CATEGORIES if key != "other")


def analyze(
    path: Union[str, os.PathLike],
    *,
    drop_incomplete_last_step: bool = True,
    max_bytes: int = 0,
    max_events: int = 0,
    max_memory: int = 0,
    peak_tflops: Optional[float] = None,
    with_step_views: bool = True,
    ranks: bool = False,
    workers: Optional[int] = None,
    dask_address: Optional[str] = None,
    say: Optional[Callable[[str], None]] = None,
    progress: Optional[Callable[[list], Any]] = None,
    import_progress=None,
    read_pass=None,
    trace_progress=None,
) -> Union[Report, list[Report]]:
    """Analyse existing PyTorch-profiler traces: the one entry for a file or a folder, which
    ``gpuprof analyze`` prints.

    Args:
        path: a ``.json`` / ``.json.gz`` Kineto trace file, or a folder of them and of gpuprof's
            saved reports (searched recursively; ``gpuprof.traces.folders.rank_files``).
        drop_incomplete_last_step: the old plugin's rule (drop a last step with fewer than 0.8x
            the device activities of the one before); False keeps it.
        max_bytes / max_events: refuse files whose JSON text or event count is larger (0: no
            limit but ``GPUPROF_MAX_EVENTS``'s, docs/analyze.md "Limits"). The text is streamed,
            so memory follows the events kept, not the file size.
        max_memory: the memory budget in bytes that sets the event cap (0: ``GPUPROF_MAX_MEMORY``,
            else half the memory left); a folder's worker processes divide it among them.
        peak_tflops: the device's dense peak in TFLOPS, for MFU where the peak table has no row
            for it (or the trace ran on a CPU).
        with_step_views: (a file) also the timelines and per-step tables the HTML and JSON carry.
        ranks, workers, dask_address, say, progress: (a folder) as ``gpuprof analyze DIR
            --ranks --workers N --dask ADDRESS``; ``say`` gets each line about a file skipped or
            left out (default: a warning on the ``gpuprof`` logger). See ``analyze_folder``.
        import_progress: (a trace file) a ``_core.ImportProgress`` the import keeps up to date,
            for a progress display on another thread (``gpuprof.cli.progress``); ``read_pass``
            (a trace file too large for the memory budget, read in windows) is told each pass over
            the file with the ImportProgress it keeps (``ReadProgress.phase``); ``trace_progress()``
            (a context manager yielding such a callback, or None) is entered while the Chrome
            trace of a report read in windows is written, reading the file again
            (``gpuprof.cli.progress.export_progress``).

    Returns:
        For a file, its ``Report``. For a folder of the ranks of one job (files that carry a world
        size above 1, gpuprof reports of a job, or any folder with ``ranks=True``), the one
        cross-rank Report; for other folders a list of Reports, one per file in path order, each
        saying which file it came from in ``report.source["path"]``.

    Raises:
        FileNotFoundError: the path does not exist, or a folder holds no trace file.
        TraceImportError: a file is not a readable trace (the message names it and the place), or
            no file of a folder could be read.
    """
    p = Path(path)
    if stat.S_ISDIR(check_path(p).st_mode):
        return analyze_folder(
            p,
            ranks=ranks,
            workers=workers,
            dask_address=dask_address,
            drop_incomplete_last_step=drop_incomplete_last_step,
            peak_tflops=peak_tflops,
            max_bytes=max_bytes,
            max_events=max_events,
            max_memory=max_memory,
            say=say,
            progress=progress,
        )
    if is_journal(p):
        try:
            return analyze_journal(p, with_step_views=with_step_views, peak_tflops=peak_tflops)
        except ValueError as e:
            raise TraceImportError(str(e)) from None
    return analyze_file(
        p,
        drop_incomplete_last_step=drop_incomplete_last_step,
        max_bytes=max_bytes,
        max_events=max_events,
        max_memory=max_memory,
        with_step_views=with_step_views,
        peak_tflops=peak_tflops,
        import_progress=import_progress,
        read_pass=read_pass,
        trace_progress=trace_progress,
    )


def analyze_journal(path: Union[str, os.PathLike], **analyze_kwargs) -> Report:
    """The Report rebuilt from a step journal (``traces/journal.py``): its steps, and a note
    saying the job ended without closing (``source.ended_without_closing``)."""
    import json
    import tempfile

    header: dict = {}
    events, bad = read_journal(path, header=header)
    step_events = [{k: v for k, v in e.items() if k != "gpuprof"} for e in events]
    trace = {"traceEvents": step_events, "displayTimeUnit": "ms"}
    rank, world = header.get("rank"), header.get("world_size")
    if isinstance(rank, int) and isinstance(world, int) and world > 1:
        trace["distributedInfo"] = {"rank": rank, "world_size": world}  # as torch.profiler writes it
    fd, tmp = tempfile.mkstemp(prefix="gpuprof-journal-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(trace, f)
        analyze_kwargs.setdefault("drop_incomplete_last_step", False)
        report = analyze_file(tmp, **analyze_kwargs)
    finally:
        os.unlink(tmp)
    from socket import gethostname

    from .journal_report import with_step_summaries

    summarized = with_step_summaries(
        report,
        events,
        peak_tflops=analyze_kwargs.get("peak_tflops"),
        same_host=header.get("host") == gethostname(),
    )
    if summarized is not None:
        report = summarized
    report.source["path"] = display_path(path)
    report.source["ended_without_closing"] = True
    report.source["note"] = ended_note(events, bad, summarized=summarized is not None)
    return report
