"""``gpuprof scaling RUN... [--batch-size N] [--format text|markdown|html|json] [--json OUT]``: reports of
one training at different numbers of processes/nodes -> the scaling table (docs/distributed.md), with
the job's energy per step and per sample where NVML measured it (docs/metrics.md, "Energy").
Each RUN is rank 0's report.json of a run (its cross-rank report), or a folder of per-rank traces or
reports (read as `gpuprof analyze DIR` does)."""

from __future__ import annotations

import html
import json
import os
import sys

from . import UserError

COLUMNS = [
    ("nodes", "nodes"),
    ("world_size", "world size"),
    ("global_batch", "global batch"),
    ("step_us", "step ms"),
    ("samples_per_s", "samples/s"),
    ("speedup", "speed-up"),
    ("efficiency_pct", "parallel efficiency %"),
    ("communication_pct", "communication % of step"),
    ("imbalance_pct", "imbalance % of step"),
    ("tflops_per_rank", "TFLOP/s per rank"),
]
# Shown when some run measured its energy (NVML on every rank's GPU).
ENERGY_COLUMNS = [
    ("energy_per_step_j", "energy J/step"),
    ("energy_per_sample_j", "energy J/sample"),
]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "scaling",
        help="scaling table of one training run at several sizes",
        description="Nodes, world size, global batch, time per step, samples/s, "
        "speed-up and parallel efficiency from runs of one training.",
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUN", help="rank 0's report.json of a run, or a folder of rank files"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="samples per step per rank, when the reports do not record it",
    )
    p.add_argument("--format", choices=["text", "markdown", "html", "json"], default="text")
    p.add_argument("--json", metavar="OUT", dest="json_out", help='also write {"scaling": [...]} here')
    p.set_defaults(run=run)


def _load(path: str) -> dict:
    if os.path.isdir(path):
        from ..report.build import cross_rank_report
        from ..report.inputs import summarize_files
        from ..traces.folders import rank_files

        files = rank_files(path)
        if not files:
            raise UserError(f"{path}: no trace files or gpuprof reports in this folder")
        return cross_rank_report(summarize_files(files)).to_dict()
    from ..traces.read import InputTooLarge, read_json

    try:
        return read_json(path)
    except InputTooLarge as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise UserError(f"{path}: not a JSON report ({e})") from None


def _cell(key, v) -> str:
    if v is None:
        return "-"
    if key == "step_us":
        return f"{v / 1000:.2f}"
    if key == "tflops_per_rank":
        return f"{v:.4g}"
    return f"{v:g}" if isinstance(v, float) else str(v)


def run(args) -> int:
    from ..analysis.scaling import run_row, scaling_table

    rows = scaling_table([run_row(_load(p), batch_size=args.batch_size, label=p) for p in args.runs])
    if any(r["global_batch"] is None for r in rows):
        print(
            "gpuprof scaling: the batch size is not recorded in some runs; pass --batch-size N "
            "(samples per step per rank) for samples/s, speed-up and efficiency",
            file=sys.stderr,  # stdout is the table, JSON for tools with --format json
            flush=True,
        )
    payload = {"scaling": rows}
    if args.json_out:
        from ..traces.atomic import write_text

        try:
            write_text(args.json_out, json.dumps(payload, indent=2) + "\n")
        except OSError as e:
            raise UserError(f"cannot write {args.json_out}: {e.strerror}") from None
    columns = COLUMNS + (ENERGY_COLUMNS if any(r["energy_per_step_j"] is not None for r in rows) else [])
    cells = [[_cell(k, r[k]) for k, _ in columns] for r in rows]
    heads = [h for _, h in columns]
    if args.format == "json":
        print(json.dumps(payload, indent=2))
    elif args.format == "markdown":
        from ..report.markdown import md_escape, table

        print("\n".join(table(heads, [[md_escape(c) for c in row] for row in cells], ["---:"] * len(heads))))
    elif args.format == "html":
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
        print(
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>gpuprof scaling</title></head><body>"
            "<table><thead><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in heads)
            + f"</tr></thead><tbody>{body}</tbody></table></body></html>"
        )
    else:
        from ..report.sections import printable
        from ..report.term import Console, Table

        t = Table()
        for h in heads:
            t.add_column(h, justify="right")
        for row in cells:  # labels are paths given on the command line: shown inert
            t.add_row(*map(printable, row))
        console = Console(width=160, color=sys.stdout.isatty())
        console.table(t)
        print(console.text())
    return 0
