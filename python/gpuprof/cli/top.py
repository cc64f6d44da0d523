"""``gpuprof top RUN_DIR [--once] [--json] [--interval S]``: every rank of a job watched with
``gpuprof run --watch --out RUN_DIR``, one row each, refreshed in the terminal (session/watch_folder.py
reads the ranks' watch.jsonl; docs/watch.md). ``--once`` prints one table and exits, for scripts
and CI; when stdout is not a terminal each refresh is plain text, one table after the other.
Ctrl-C ends it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from . import UserError

COLUMNS = (
    "rank",
    "host",
    "state",
    "step",
    "last ms",
    "median ms",
    "DL wait %",
    "RSS MiB",
    "GPU %",
    "GPU MiB",
    "flags",
)
CLEAR = "\x1b[H\x1b[2J"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "top",
        help="a live table of every rank of a watched job (gpuprof run --watch)",
        description="Every rank of a job watched with gpuprof run --watch --out RUN_DIR, one row "
        "each: the step reached, the last and median step time, the DataLoader wait, RSS, GPU "
        "utilization and memory when there is a GPU, and the flags (slow_steps, memory_growing, "
        "straggler). Refreshes every --interval seconds until Ctrl-C; works on a finished job's "
        "folder too.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out folder of gpuprof run --watch")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument(
        "--json",
        action="store_true",
        help='print {"ranks": [{"rank", "step", "step_time_ms", ...}]} once and exit',
    )
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between refreshes (default %(default)g)",
    )
    p.set_defaults(run=run)


def _cell(value, fmt: str, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    return format(value if scale == 1.0 else value / scale, fmt)


def table(rows: list[dict], run_dir: str) -> str:
    """The rows as a text table, with each holding flag's message under it."""
    from ..report.sections import printable

    cells = [
        [
            str(r["rank"]),
            printable(r["host"])[:24],
            r["state"],
            _cell(r["step"], "d"),
            _cell(r["step_time_ms"], ".1f"),
            _cell(r["step_time_median_ms"], ".1f"),
            _cell(r["dataloader_wait_pct"], ".1f"),
            _cell(r["rss_bytes"], ".0f", 2**20),
            _cell(r["gpu_util_pct"], ".0f"),
            _cell(r["gpu_mem_bytes"], ".0f", 2**20),
            printable(",".join(r["flags"])) or "-",
        ]
        for r in rows
    ]
    # The GPU columns only when a rank has a GPU reading.
    shown = [i for i, h in enumerate(COLUMNS) if not h.startswith("GPU") or any(c[i] != "-" for c in cells)]
    heads = [COLUMNS[i] for i in shown]
    cells = [[c[i] for i in shown] for c in cells]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = [f"gpuprof top: {printable(run_dir)}, {len(rows)} rank{'s' if len(rows) != 1 else ''}"]
    lines.append("  ".join(h.rjust(w) for h, w in zip(heads, widths)).rstrip())
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    for r in rows:
        lines += [f"rank {r['rank']}: {printable(m)}" for m in r["flag_messages"] if m]
    return "\n".join(lines) + "\n"


def run(args) -> int:
    from ..session.watch_folder import rank_rows, rank_states

    root = Path(args.run_dir)
    if not root.is_dir():
        raise UserError(f"{args.run_dir}: no such folder (the --out folder of gpuprof run --watch)")
    if not args.interval > 0:
        raise UserError(f"--interval must be a positive number of seconds, not {args.interval:g}")

    def rows() -> list[dict]:
        states = rank_states(root)
        if not states:
            raise UserError(
                f"nothing is watching in {args.run_dir}: no rank*/watch.jsonl (start the job with "
                f"gpuprof run --watch --out {args.run_dir} script.py)"
            )
        return rank_rows(states)

    if args.json:
        shown = [{k: v for k, v in r.items() if k != "flag_messages"} for r in rows()]
        print(json.dumps({"run_dir": str(root), "ranks": shown}, indent=2, allow_nan=False))
        return 0
    if args.once:
        sys.stdout.write(table(rows(), args.run_dir))
        return 0
    live = sys.stdout.isatty()
    try:
        while True:
            text = table(rows(), args.run_dir)
            sys.stdout.write((CLEAR + text) if live else text + "\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:  # how a live view ends
        return 0
