"""``gpuprof findings PATH [--json] [-o OUT]``: the advice on a run as findings, each with its
evidence, the step time it can save as a low/high bound (ms and %), its confidence and the exact
change. ``--json`` prints the ``gpuprof.findings/1`` object the ``findings`` tool of ``gpuprof mcp``
returns (docs/agents.md), for scripts and CI."""

from __future__ import annotations

import json

from . import UserError
from .report import write_output


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "findings",
        help="the advice on a run, each with its bound and the exact change (--json for scripts)",
        description="The advice on a run folder, a report.json, a profiler trace or a folder of "
        "traces: evidence, a low/high bound of the step time each change can save, confidence "
        "and the exact change.",
    )
    p.add_argument("path", metavar="PATH", help="a run folder, report.json, trace file or folder of traces")
    p.add_argument("--json", action="store_true", help="print the gpuprof.findings/1 JSON object")
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="write here instead of stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from pathlib import Path

    from ..agents import answers as A
    from ..report.sections import printable

    path = Path(args.path)
    if not path.exists():
        raise UserError(f"{args.path}: no such file or folder")
    try:
        loaded, total = A.Loader().reports(path)
    except A.AnswerError as e:
        raise UserError(str(e)) from None
    doc = A.findings_document([(str(f), r) for f, r in loaded], total)
    if args.json:
        write_output(json.dumps(doc, indent=2, allow_nan=False) + "\n", args.output)
        return 0
    lines = []
    for rep in doc["reports"]:
        step = f", mean step {rep['mean_step_ms']:.3f} ms" if rep["mean_step_ms"] else ""
        lines.append(
            f"{printable(rep['source'])}: {rep['steps']} steps{step}, {len(rep['findings'])} finding(s)"
        )
        for x in rep["findings"]:
            s = x["saving"]
            ms = f" ({s['low_ms']:g}-{s['high_ms']:g} ms)" if s["high_ms"] is not None else ""
            lines.append(
                f"  [{x['rule']}] saves {s['low_pct']:g}-{s['high_pct']:g}% of the step{ms}, "
                f"confidence {x['confidence']}: {printable(x['title'])}"
            )
            lines.append(f"    change: {printable(x['change'])}")
    if doc.get("files_not_read"):
        lines.append(f"({doc['files_not_read']} more files not read: pass one file's path)")
    write_output("\n".join(lines) + "\n", args.output)
    return 0
