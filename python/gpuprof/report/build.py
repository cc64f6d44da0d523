"""The one report builder: analyse -> cross-rank attach -> advise, exactly once, for a live span, one
trace file and a folder of ranks alike.

Everything a report holds is gathered before ``build_report`` runs (the trace, where it came from,
the DataLoaders and host it ran on, this rank's identity or every rank's summary); the Report it
returns is read-only and nothing edits it afterwards. The step views the HTML and the JSON draw
(``step_views``) come from the same build, with the per-event flags the analysis pass hands on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional, Union

from .._build_info import GPUPROF_VERSION
from ..advice import advise
from ..analysis import SCHEMA_VERSION, average, report_dict, step_views
from ..analysis.implausible import clamp_percentages
from ..traces.read import TooManyEvents, import_trace, read_json, trace_source
from .model import Report

# The cross-rank analysis (and its statistics module) loads only for reports that have ranks: a
# one-file `gpuprof analyze` never needs it (docs/performance.md).

#: Called by a live span's build with this rank's summary; returns every rank's summaries and a
#: note ({"summaries": [...], "note": str}), or None when no exchange took place.
Gather = Callable[[dict], Optional[dict]]

# This rank's identity as a report's "distributed" key holds it.
_RANK_KEYS = ("rank", "local_rank", "world_size", "hostname", "backend", "device", "batch_size")


def build_report(
    trace=None,
    *,
    analysed: Optional[dict] = None,
    source: Optional[dict] = None,
    dataloaders: Optional[list] = None,
    pipeline: Optional[dict] = None,
    host: Optional[dict] = None,
    drop_incomplete_last_step: bool = True,
    span_source: Optional[Callable[[list], dict]] = None,
    rank: Optional[dict] = None,
    gather: Optional[Gather] = None,
    rank_summaries: Optional[list] = None,
    rank_note: str = "",
    skipped_files: Optional[list] = None,
    with_step_views: bool = True,
    peak_tflops: Optional[float] = None,
    failure: Optional[dict] = None,
    dynamo: Optional[list] = None,
    compiled_kernels: Optional[list] = None,
    step_views_of_windows: Optional[dict] = None,
) -> Report:
    """The Report of one native ``trace`` (or of an ``analysed`` report dict: a worker's analysis
    of a rank's file, or a saved report).

    Args:
        source: where the report came from (``kind``: "live" or "trace", ``path``...).
        dataloaders, host: the DataLoader settings and host facts the span ran with.
        pipeline: what the span measured inside its DataLoaders (``collect/dataloader.py``'s
            ``pipeline_records``), for the ``input_pipeline`` section.
        span_source: given the analysed steps, the entries a live span adds to ``source`` (which
            steps it covers; for a span cut short, which complete span came before it).
        rank: this process's identity in a torch.distributed job (``rank``, ``world_size``...):
            its summary joins the cross-rank section, and ``gather`` (when given) exchanges it
            with the other ranks' summaries.
        rank_summaries, rank_note: every rank's summary, for a folder of ranks read from files.
        skipped_files: the folder's files that could not be read (``{"path", "error"}``), named
            in the cross-rank section.
        with_step_views: also compute the timelines and per-step tables the HTML and JSON carry
            (needs ``trace``; the terminal text does not use them).
        peak_tflops: the dense peak (TFLOPS) MFU and HFU divide by, where the peak table has no
            row for the device or the user knows better (docs/metrics.md, "MFU and HFU").
        failure: what a live session read when an out-of-memory error ended it
            (``collect/oom.py``): the report gets its ``out_of_memory`` section.
        dynamo: torch.compile's compilation records at the span's end (``collect/dynamo.py``),
            for the ``compiled`` section's graphs, recompilations and graph breaks.
        compiled_kernels: the kernels Inductor generated in the span with their aten operators and
            source lines (``collect/inductor.py``; None when the opt-in was off).
        step_views_of_windows: the ``step_views`` of a trace read in windows (``analysis/windowed.py``),
            placed where a whole trace's go.
    """
    native: dict = {}
    if trace is not None:
        data = report_dict(
            trace,
            dataloaders=dataloaders,
            host=host,
            source=source,
            drop_incomplete_last_step=drop_incomplete_last_step,
            native=native,
            peak_tflops=peak_tflops,
            batch_size=_batch_size(rank, dataloaders),
            pipeline=pipeline,
            dynamo=dynamo,
            compiled_kernels=compiled_kernels,
        )
    elif analysed is not None:
        from ..analysis.spill import json_copy

        data = json_copy(analysed)  # the caller's dict stays as it was
    else:
        raise ValueError("build_report needs a trace or an analysed report dict")
    clamp_percentages(data)  # a saved report or a device sample may hold one out of 0-100
    if span_source is not None:
        data["source"] = {**data.get("source", {}), **span_source(data["steps"])}
    if failure is not None:
        from ..analysis.memory import out_of_memory_section

        data["out_of_memory"] = out_of_memory_section(data, failure, native)
    # The advice comes right after the analysis in the file (where a saved report had it).
    keys = list(data)
    analysed_keys = keys[: keys.index("advice")] if "advice" in keys else keys
    data.pop("advice", None)
    if rank is not None:
        _attach_own_rank(data, rank, gather)
    elif rank_summaries is not None:
        from ..analysis.ranks import attach, cross_rank

        world = max(s.get("world_size", 1) for s in rank_summaries)
        attach(
            data,
            cross_rank(rank_summaries, expected_world_size=world),
            note=rank_note,
            skipped_files=skipped_files,
        )
    recommendations = advise(data)
    ordered = {k: data[k] for k in analysed_keys}
    ordered["advice"] = recommendations
    ordered.update((k, v) for k, v in data.items() if k not in ordered)
    if with_step_views and trace is not None:
        ordered["step_views"] = step_views(
            trace,
            ordered["steps"],
            repeated_op_calls=native.get("repeated_op_calls"),
            module_of_event=native.get("module_of_event"),
            breakdown_steps=native.get("breakdown_steps"),
            critical_path_kept=native.get("critical_path_kept"),
        )
    elif step_views_of_windows is not None:
        ordered["step_views"] = step_views_of_windows
    return Report(ordered, trace)


def _batch_size(rank: Optional[dict], dataloaders: Optional[list]) -> Optional[int]:
    """Samples per step, where the report knows it: this rank's (``gpuprof.profile(batch_size=)``,
    else its DataLoader's), else the first DataLoader's; None for a trace."""
    size = (rank or {}).get("batch_size")
    if isinstance(size, int):
        return size
    return next((d["batch_size"] for d in dataloaders or [] if isinstance(d.get("batch_size"), int)), None)


def unbuilt_report(trace, *, source: dict, reason: str, kept: str) -> Report:
    """The report of a span whose build failed (``reason``): no steps and no tables, one warning
    (``report_failed``) saying why and what became of its events (``kept``), and the native
    ``trace`` (None when it could not be had), so that its Chrome trace can still be written.
    Made of plain values only: it must not fail where the build did."""
    try:
        events = int(trace.num_events) if trace is not None else 0
    except Exception:
        events = 0
    data = {
        "schema_version": SCHEMA_VERSION,
        "gpuprof_version": GPUPROF_VERSION,
        "source": dict(source),
        "steps": [],
        "average": average([]),
        "step_rules": {},
        "warnings": [
            {
                "kind": "report_failed",
                "count": 1,
                "message": f"this report could not be built ({reason}): {kept}",
            }
        ],
        "dataloaders": [],
        "host": {},
        "counts": {"events": events, "dropped": 0, "skipped": 0, "steps": 0},
        "metadata": {},
        "advice": [],
    }
    return Report(data, trace)


def _attach_own_rank(data: dict, rank: dict, gather: Optional[Gather]) -> None:
    """A live span's cross-rank section: its own summary, and every rank's when ``gather`` had them."""
    from ..analysis.ranks import attach, cross_rank, summary_from_report

    if rank["world_size"] > 1 and "distributedInfo" not in data["metadata"]:
        data["metadata"]["distributedInfo"] = {
            "backend": rank["backend"],
            "rank": rank["rank"],
            "world_size": rank["world_size"],
        }
    own = summary_from_report(data, rank_info=rank)
    data["distributed"] = {k: rank[k] for k in _RANK_KEYS}
    gathered = gather(own) if gather is not None else None
    if gathered is None and rank["world_size"] > 1 and rank["rank"] != 0:
        # One rank of a job: the other ranks' summaries went to rank 0. This report says so and
        # draws no cross-rank conclusion (no missing ranks, no straggler) from its own row alone.
        result = cross_rank([own])
        result["missing_ranks"] = []
        attach(data, result, note=one_rank_note(rank["rank"], rank["world_size"]))
    elif gathered is None:
        attach(data, cross_rank([own]))
    else:
        attach(
            data,
            cross_rank(gathered["summaries"], expected_world_size=rank["world_size"]),
            note=gathered["note"],
        )


def one_rank_note(rank: int, world: int) -> str:
    """What a non-zero rank's own report says of the job."""
    return (
        f"this is rank {rank} of a {world}-rank job: rank 0's report holds every rank's row, the "
        "straggler call and the cross-rank advice"
    )


def analyze_file(
    path: Union[str, os.PathLike],
    *,
    drop_incomplete_last_step: bool = True,
    max_bytes: int = 0,
    max_events: int = 0,
    with_step_views: bool = True,
    peak_tflops: Optional[float] = None,
    import_cpus: int = 0,
    max_memory: int = 0,
    memory_share: int = 1,
    import_progress=None,
    read_pass=None,
    trace_progress=None,
) -> Report:
    """The Report of one trace file: the one analysis of a file, for ``gpuprof analyze FILE``,
    ``gpuprof.analyze(file)`` and each worker of a folder (``inputs.summarize_file``), whose import
    counts on ``import_cpus`` CPUs (0: all this process may use) and on its ``memory_share`` of the
    memory budget (``traces.read.memory_budget``); ``import_progress`` (a ``_core.ImportProgress``)
    is kept up to date while the file is read; ``read_pass(what, total_bytes, counter)`` is told
    when a trace read in windows moves to its next pass over the file (``cli.progress``'s
    ``ReadProgress.phase``), with the ``_core.ImportProgress`` that pass keeps up to date;
    ``trace_progress`` is the same for the passes of such a trace's Chrome trace when it is saved
    (``analysis/windowed_export.py``)."""
    try:
        trace, stats = import_trace(
            path,
            max_bytes=max_bytes,
            max_events=max_events,
            import_cpus=import_cpus,
            max_memory=max_memory,
            memory_share=memory_share,
            progress=import_progress,
        )
    except TooManyEvents as e:
        # More events than the memory budget holds: read in windows of steps (analysis/windowed.py).
        from ..analysis.windowed import windowed_report_dict

        analysed = windowed_report_dict(
            path,
            cap=e.cap,
            reason=e.reason,
            drop_incomplete_last_step=drop_incomplete_last_step,
            peak_tflops=peak_tflops,
            import_cpus=import_cpus,
            progress=read_pass,
            with_step_views=with_step_views,
        )
        from ..analysis.windowed_export import WindowedExport

        views = analysed.pop("step_views", None)
        report = build_report(analysed=analysed, step_views_of_windows=views)
        # Its Chrome trace, when saved: the file read again in windows.
        export = WindowedExport(path, cap=e.cap, import_cpus=import_cpus, progress=trace_progress)
        report._set_trace_writer(export.write)
        return report
    # The aten operators of the Triton kernels it launched, from Inductor's output code if it is
    # still here (traces/inductor_code.py, loaded only for a trace with such launches)
    launches = list(getattr(trace, "compiled_launches", None) or [])
    provenance = None
    if launches:
        from ..traces.inductor_code import output_code_provenance

        provenance = output_code_provenance(launches)
    return build_report(
        trace,
        source=trace_source(path, stats),
        drop_incomplete_last_step=drop_incomplete_last_step,
        with_step_views=with_step_views,
        peak_tflops=peak_tflops,
        compiled_kernels=provenance,
    )


def cross_rank_report(results: list[tuple], skipped: Optional[list] = None) -> Report:
    """The Report of rank 0 (or of the first file) with every rank's row, the stragglers and the
    advice, from ``gpuprof.report.inputs.summarize_files``' results (None for a file that
    could not be read: ``skipped`` says which and why). Ranks come from each file's
    distributedInfo (or the saved report's ``distributed``). A rank given both by a saved report
    and by a trace is read from the report; when ranks are still absent or repeated (copies of one
    file), files are numbered in path order. The note says which."""
    results = [r for r in results if r is not None]

    # One span of one rank saved twice (gpuprof run, gpuprof.save and the trainer adapters write rank
    # 0's report into OUT/rank0/ and, as the job's report, into OUT/): the copy at OUT/ of a report
    # of the same rank and the same steps, to the number, in OUT/rank<N>/ counts once.
    import json

    def span_key(s: dict) -> tuple:
        return (s["rank"], s.get("hostname", ""), json.dumps(s["steps"], sort_keys=True))

    in_rank_folders = {
        (str(Path(s["source"]).parent.parent), span_key(s))
        for s, _ in results
        if s.get("from_report") and Path(s["source"]).parent.name == f"rank{s['rank']}"
    }
    results = [
        (s, d)
        for s, d in results
        if not (s.get("from_report") and (str(Path(s["source"]).parent), span_key(s)) in in_rank_folders)
    ]
    notes = []
    ranks = [s["rank"] for s, _ in results]
    if len(set(ranks)) != len(ranks):
        # A rank given both by a gpuprof report and by a trace (saved side by side): the report.
        by_report = {s["rank"] for s, _ in results if s.get("from_report")}
        kept = [(s, d) for s, d in results if s.get("from_report") or s["rank"] not in by_report]
        if len(kept) < len(results) and len({s["rank"] for s, _ in kept}) == len(kept):
            left = [
                Path(s["source"]).name
                for s, _ in results
                if not s.get("from_report") and s["rank"] in by_report
            ]
            notes.append(f"traces of ranks also given by gpuprof reports were left out: {', '.join(left)}")
            results = kept
    summaries = [s for s, _ in results]
    ranks = [s["rank"] for s in summaries]
    if len(set(ranks)) != len(ranks):
        for i, s in enumerate(summaries):
            s["rank"], s["world_size"] = i, len(summaries)
        notes.append("rank numbers absent or repeated in the files: ranks are numbered in file order")
    if skipped:
        notes.append(
            f"{len(skipped)} rank file{'s' if len(skipped) > 1 else ''} could not be read and "
            f"{'were' if len(skipped) > 1 else 'was'} skipped: "
            + "; ".join(f"{s['path']} ({s['error']})" for s in skipped)
        )
    note = "; ".join(notes)
    base = next((d for s, d in results if d is not None and s["rank"] == 0), None)
    if base is None:
        base = next((d for _, d in results if d is not None), None)
    if base is None:  # only when no file was rank 0 and none was kept: re-read the first
        first = summaries[0]
        if first.get("from_report"):
            base = read_json(first["source"])
        else:
            base = analyze_file(first["source"], with_step_views=False).to_dict()
    base = {**base, "source": base.get("source", {})}
    return build_report(analysed=base, rank_summaries=summaries, rank_note=note, skipped_files=skipped)
