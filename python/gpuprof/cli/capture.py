"""``gpuprof capture TARGET --steps N``: the same N steps of every rank of a job watched with
``gpuprof run --watch --out RUN_DIR`` (TARGET: RUN_DIR, the job's SLURM id or a watched PID)
recorded with the full profiler, while it runs; waits for their reports and prints where the
cross-rank report is (session/watch_folder.py, docs/watch.md).

Exit status 0 when every rank asked wrote its report, 1 when some did not (each named, with why),
2 when nothing could be asked (no such folder, not yours, nothing watching, the job ended).
"""

from __future__ import annotations

import json
import sys

from . import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "capture",
        help="record N steps of every rank of a running watched job (gpuprof run --watch)",
        description="Ask every rank of a job watched with gpuprof run --watch --out RUN_DIR to "
        "record the same N steps with the full profiler (operators, DataLoader, memory), wait for "
        "the reports and print where they are: RUN_DIR/capture-<id>, a folder gpuprof analyze reads "
        "as the job's cross-rank report. The ranks look for the request once a second; no daemon, "
        "only the run folder (a shared filesystem under SLURM).",
    )
    p.add_argument(
        "run_dir",
        metavar="TARGET",
        help="the --out folder of gpuprof run --watch, or the SLURM job id or the PID (on this "
        "host) of a watched run",
    )
    p.add_argument("--steps", type=int, default=10, metavar="N", help="steps to record (default %(default)s)")
    p.add_argument("--modules", action="store_true", help="also record the module view")
    p.add_argument("--memory", action="store_true", help="also record every allocation (the memory view)")
    p.add_argument("--shapes", action="store_true", help="also record operators' input shapes")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for the ranks' reports (default %(default)g)",
    )
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..report.sections import printable
    from ..session.watch_folder import request_capture, resolve_target

    if args.timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    answer = request_capture(
        resolve_target(args.run_dir),
        args.steps,
        timeout_s=args.timeout,
        modules=args.modules,
        memory=args.memory,
        shapes=args.shapes,
        progress=lambda text: print(f"gpuprof capture: {printable(text)}", file=sys.stderr, flush=True),
    )
    if args.json:
        print(json.dumps(answer, indent=2, allow_nan=False))
        return 0 if answer["complete"] else 1
    first, last = answer["start"], answer["start"] + answer["steps"] - 1
    for _rank, message in sorted(answer["stragglers"].items()):
        print(f"gpuprof capture: straggler: {printable(message)}", file=sys.stderr)
    for rank, a in sorted(answer["ranks"].items()):
        if a["state"] == "done":
            continue
        why = a.get("reason") or f"state {a['state']}"
        print(f"gpuprof capture: rank {rank}: {a['state']}: {printable(why)}", file=sys.stderr)
    folder = printable(answer["folder"])
    if answer["complete"]:
        print(f"steps {first}..{last} of every rank: {folder} (gpuprof analyze {folder})")
        return 0
    done = [r for r, a in answer["ranks"].items() if a["state"] in ("done", "partial")]
    if done:
        print(f"steps {first}..{last}, ranks {', '.join(map(str, sorted(done)))} only: {folder}")
    else:
        print(f"capture {answer['id']}: no rank recorded steps {first}..{last}")
    return 1
