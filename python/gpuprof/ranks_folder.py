"""A folder of per-rank traces (or gpuprof reports) -> one cross-rank report: map-reduce.

Each file is read by one worker process, which returns a small summary (python/gpuprof/analysis/
ranks.py), never the events; the summaries merge. Memory is bounded by the workers (each holds one
trace at a time and is replaced after ``tasks_per_worker`` files, so no allocator growth piles up),
not by the number of ranks. ``dask_address`` runs the same per-file function on an existing
dask.distributed cluster instead. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

_SNIFF = 1 << 12


def report_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """gpuprof's own saved reports in ``folder`` (``*.json`` starting with a ``schema_version``)."""
    out = []
    for p in sorted(Path(folder).rglob("*.json")):
        try:
            with open(p, "rb") as f:
                head = f.read(_SNIFF)
        except OSError:
            continue
        if b'"schema_version"' in head and b'"traceEvents"' not in head:
            out.append(p)
    return out


def rank_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """Every trace file (the folder rule of gpuprof.analyze) and every saved report in ``folder``."""
    from .analyze import trace_files

    return sorted(set(trace_files(folder)) | set(report_files(folder)))


_HOST_FROM_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")


def summarize_file(path: str, drop_incomplete_last_step: bool = True, keep_report: str = "rank0") -> tuple:
    """One file -> (summary, report dict or None). The report dict comes back for rank 0 (the
    cross-rank report is built on it) or, with keep_report="all", always. Runs in a worker."""
    from .analysis.ranks import summary_from_report

    p = Path(path)
    if p.name.endswith(".json") and _is_report(p):
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    else:
        from .analyze import analyze_file

        data = analyze_file(p, drop_incomplete_last_step=drop_incomplete_last_step)._data
    info = dict(data.get("distributed") or {})
    m = _HOST_FROM_NAME.match(p.name)
    if m and not info.get("hostname"):
        info["hostname"] = m.group("host")   # tensorboard_trace_handler's default worker name
    summary = summary_from_report(data, rank_info=info)
    summary["source"] = str(p)
    keep = keep_report == "all" or summary["rank"] == 0
    return summary, (data if keep else None)


def _is_report(p: Path) -> bool:
    with open(p, "rb") as f:
        head = f.read(_SNIFF)
    return b'"schema_version"' in head and b'"traceEvents"' not in head


def summarize_files(files: Iterable[Union[str, os.PathLike]], *, workers: Optional[int] = None,
                    tasks_per_worker: int = 25, dask_address: Optional[str] = None,
                    drop_incomplete_last_step: bool = True, keep_report: str = "rank0",
                    on_done: Optional[Callable[[], None]] = None) -> list[tuple]:
    """(summary, report dict or None) per file, in the files' order."""
    files = [str(f) for f in files]
    results: list = [None] * len(files)
    if dask_address:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise RuntimeError("--dask needs dask.distributed in this environment: "
                               "python -m pip install 'distributed>=2023.1'") from None
        with Client(dask_address) as client:
            futures = client.map(summarize_file, files, drop_incomplete_last_step=drop_incomplete_last_step,
                                 keep_report=keep_report, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for fut in as_completed(futures):
                results[index[fut.key]] = fut.result()
                fut.release()
                if on_done:
                    on_done()
        return results
    workers = workers or min(len(files), os.cpu_count() or 1)
    if workers <= 1 or len(files) == 1:
        for i, f in enumerate(files):
            results[i] = summarize_file(f, drop_incomplete_last_step, keep_report)
            if on_done:
                on_done()
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed as done

    # Workers are replaced after tasks_per_worker files by running the files in batches, one pool
    # each, rather than with ProcessPoolExecutor(max_tasks_per_child=...): on Python 3.11 and 3.12
    # that option deadlocks once a worker retires while files are still queued (CPython
    # gh-115634, fixed only from 3.13), which hung every folder of more than workers x 25 files.
    ctx = multiprocessing.get_context("spawn")
    batch = workers * max(1, tasks_per_worker)
    # Each worker's import may use its share of the CPUs for threads of its own (two parsers, and
    # for gzip two inflaters, from 2 and 4 CPUs: docs/analyze.md), not all of them each.
    from .dataloader import cpus_available

    share = max(1, cpus_available() // workers)
    for first in range(0, len(files), batch):
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_import_cpus,
                                 initargs=(share,)) as pool:
            futs = {pool.submit(summarize_file, files[i], drop_incomplete_last_step, keep_report): i
                    for i in range(first, min(first + batch, len(files)))}
            for fut in done(futs):
                results[futs[fut]] = fut.result()
                if on_done:
                    on_done()
    return results


def _import_cpus(share: int) -> None:
    """Worker initializer: the CPUs this worker's imports may count on (read by the binding)."""
    os.environ.setdefault("GPUPROF_IMPORT_CPUS", str(share))   # a value the user set stays


def cross_rank_report(results: list[tuple]):
    """The Report of rank 0 (or of the first file) with every rank's row, the stragglers and the
    advice. Ranks come from each file's distributedInfo (or the saved report's ``distributed``); when
    absent or repeated (copies of one file), files are numbered in path order and the note says so."""
    from .analysis.ranks import analyze_ranks, attach
    from .report import Report

    summaries = [s for s, _ in results]
    note = ""
    ranks = [s["rank"] for s in summaries]
    if len(set(ranks)) != len(ranks):
        for i, s in enumerate(summaries):
            s["rank"], s["world_size"] = i, len(summaries)
        note = "rank numbers absent or repeated in the files: ranks are numbered in file order"
    base = next((d for s, d in results if d is not None and s["rank"] == 0), None)
    if base is None:
        base = next((d for _, d in results if d is not None), None)
    if base is None:   # only when no file was rank 0 and none was kept: re-read the first
        base = summarize_file(summaries[0]["source"], keep_report="all")[1]
    world = max(s.get("world_size", 1) for s in summaries)
    data = attach(dict(base), analyze_ranks(summaries, expected_world_size=world), note=note)
    data.setdefault("source", {})
    report = Report(data)
    report.advise()
    return report
