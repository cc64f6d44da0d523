"""``gpuprof export DIR --merged [OUT]``: every rank of a job on one timeline.

Writes one Chrome/Perfetto trace of every rank's events (the traces of a ``gpuprof run`` or
``gpuprof.save`` folder, or torch.profiler's per-rank traces): one process per rank, each rank's clock
shifted onto the lowest rank's so that the ends of their collectives line up (docs/distributed.md,
"One timeline"). Each trace is read twice, one at a time (once for its clock, once to write it), so
memory follows one rank, not the job. Loads no torch.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from . import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="write every rank of a job as one Chrome/Perfetto trace",
        description="Merge the per-rank traces of one job (a gpuprof run --out folder, a "
        "gpuprof.save span folder, or torch.profiler's per-rank traces) into one Chrome/Perfetto "
        "trace: one process per rank, clocks aligned on the collectives' ends.",
    )
    p.add_argument("path", help="the folder of one job's ranks (of one span)")
    p.add_argument(
        "--merged",
        nargs="?",
        const="",
        required=True,
        metavar="OUT",
        help="the merged trace to write (default: DIR/merged.trace.json.gz; gzip when it ends in .gz)",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from ..analysis import clock_anchors
    from ..analysis.ranks import clock_offset
    from ..report.sections import printable
    from ..traces.export import MERGED_TIMELINE_NAME, rank_traces, write_merged
    from ..traces.read import TraceImportError, check_path, display_path, import_trace

    try:
        if not stat.S_ISDIR(check_path(args.path).st_mode):
            raise UserError(
                f"{display_path(args.path)} is a file: give the folder of the job's ranks "
                f"(gpuprof export DIR --merged), e.g. the --out of gpuprof run"
            )
    except OSError as e:
        raise UserError(str(e)) from None
    out = Path(args.merged) if args.merged else Path(args.path) / MERGED_TIMELINE_NAME
    try:
        found = rank_traces(args.path)
    except OSError as e:
        raise UserError(str(e)) from None
    if not found:
        raise UserError(
            f"{display_path(args.path)}: no rank traces here (gpuprof run writes them unless --no-trace; "
            "torch.profiler's tensorboard_trace_handler writes one per rank)"
        )
    # Pass 1: each trace's rank and clock anchors, one trace in memory at a time.
    ranks = []
    for path, rank in found:
        try:
            trace, _stats = import_trace(path)
        except (TraceImportError, OSError) as e:
            raise UserError(str(e)) from None
        if rank is None:
            from ..analysis.ranks import summary_from_report

            info = summary_from_report({"metadata": dict(trace.metadata)})
            rank = info["rank"] if info["world_size"] > 1 else None
        ranks.append({"path": path, "rank": rank, "anchors": clock_anchors(trace), "host": _host(trace)})
        del trace
    if any(r["rank"] is None for r in ranks):
        for i, r in enumerate(ranks):
            r["rank"] = i
        print(
            "gpuprof export: the traces do not all say their rank: ranks are numbered in file order",
            file=sys.stderr,
        )
    seen: dict = {}
    for r in ranks:
        if r["rank"] in seen:
            raise UserError(
                f"{display_path(args.path)} holds two traces of rank {r['rank']} "
                f"({display_path(seen[r['rank']])} and {display_path(r['path'])}): several spans? "
                "Give the folder of one span, e.g. gpuprof export DIR/span_000 --merged"
            )
        seen[r["rank"]] = r["path"]
    ranks.sort(key=lambda r: r["rank"])
    reference = ranks[0]
    # Live traces of one host share its CLOCK_MONOTONIC: nothing to shift.
    same_clock = all(r["host"] for r in ranks) and len({r["host"] for r in ranks}) == 1
    rows = []
    for r in ranks:
        how = clock_offset(reference["anchors"], r["anchors"], same_clock=same_clock)
        rows.append({"rank": r["rank"], "trace": display_path(r["path"]), **how})
        r["offset_ns"] = int(round(how["offset_us"] * 1000))
    metadata = {"reference_rank": reference["rank"], "ranks": rows}
    try:
        write_merged(
            out,
            [(r["path"], r["rank"], r["offset_ns"], f"rank {r['rank']}") for r in ranks],
            metadata,
        )
    except (TraceImportError, OSError) as e:
        raise UserError(f"cannot write {display_path(out)}: {e}") from None
    skew = max((x["skew_us"] for x in rows[1:] if x["skew_us"] is not None), default=None)
    by = sorted({x["aligned_by"] for x in rows[1:]})
    how = _alignment(by, skew) if len(rows) > 1 else "one rank"
    print(
        f"gpuprof export: wrote {printable(display_path(out))}: {len(rows)} "
        f"rank{'s' if len(rows) > 1 else ''}, "
        f'one process each, {how}; open it in https://ui.perfetto.dev ("Open trace file")'
    )
    for x in rows:
        print(
            f"  rank {x['rank']}: {printable(x['trace'])}, shifted {x['offset_us'] / 1000:+.3f} ms "
            f"({x['aligned_by']}, {x['matched']} matched ends)"
        )
    return 0


def _host(trace) -> str:
    """The host a live trace was recorded on (gpuprof's own metadata), "" when it does not say."""
    import json

    raw = trace.metadata.get("hostname") or trace.metadata.get("gpuprofMetadata") or ""
    if raw.startswith("{"):
        try:
            return str(json.loads(raw).get("hostname") or "")
        except ValueError:
            return ""
    return raw


def _alignment(by: list, skew) -> str:
    spread = f"{skew / 1000:.3f} ms" if skew is not None else "unknown"
    if by == ["host clock"]:
        return f"one host's clock, not shifted (collective ends up to {spread} apart)"
    if by == ["collectives"]:
        return f"clocks aligned on the collectives' ends (largest skew {spread})"
    return f"clocks aligned by {' / '.join(by)} (largest skew {spread})"
