"""What writing a report's JSON costs: ``dumps_report`` (the core's writer: the report indented, its
step views compact) against the same text through ``json.dumps`` (CPython's pure-Python indented
encoder and its C compact one), on one stored trace's report, in one process.

Two ways: instructions under valgrind's callgrind (the main thread, repeatable to a fraction of a
percent on a loaded machine) and wall time, the best of ``--repeat`` calls of each, taking turns.
With ``--before DIR`` (a folder holding an earlier build's ``gpuprof`` package), also the whole
``gpuprof analyze TRACE --json OUT`` of each build under callgrind, every thread, after one run of
each that writes its bytecode (so that compiling the modules counts in neither).

    PYTHONPATH=python python bench/report_json_cost.py [--trace PATH] [--repeat 7] [--no-callgrind]
        [--before DIR]

Run by hand (not in CI); the trace defaults to the DDP sample in ../shared/traces.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts  # noqa: E402

DDP = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "hta_2xv100_ddp" / "rank0.json.gz"


def _ways(trace: str):
    import gpuprof
    from gpuprof.report.renderers import dumps_report

    data = gpuprof.analyze(trace).to_dict()

    def with_json_dumps() -> str:
        rest = {k: v for k, v in data.items() if k != "step_views"}
        views = json.dumps(data["step_views"], separators=(",", ":"))
        return json.dumps(rest, indent=2)[:-2] + ',\n  "step_views": ' + views + "\n}"

    def with_writer() -> str:
        return dumps_report(data)

    if with_json_dumps() != with_writer():
        sys.exit("the writer's text differs from json.dumps's: fix that before timing it")
    return {"json.dumps": with_json_dumps, "writer": with_writer}, len(with_writer())


def child(trace: str) -> None:
    ways, _ = _ways(trace)
    for name, run in ways.items():
        os.getppid()  # callgrind zeroes its counters here
        run()
        os.getpgrp()  # and dumps them here
        print(f"MEASURED {name}", flush=True)


def whole_command(pythonpath: str, trace: str) -> dict:
    """Instructions of ``gpuprof analyze TRACE --json OUT`` with ``pythonpath`` first: every thread's
    and the main thread's, and the JSON's size."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=pythonpath, PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "gpuprof", "analyze", trace, "--json", f"{tmp}/r.json"]
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)  # bytecode written
        out = f"{tmp}/callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--separate-threads=yes"]
        cmd += ["--dump-instr=no", "--dump-line=no", *command]
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        threads = {}
        for path in glob.glob(out + "-*"):  # one file a thread: callgrind.out-01, -02 ...
            with open(path) as f:
                threads[path.rsplit("-", 1)[-1]] = int(
                    re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M).group(1)
                )
        return {
            "all_threads": sum(threads.values()),
            "main_thread": threads.get("01"),
            "bytes": os.path.getsize(f"{tmp}/r.json"),
        }


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(DDP))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--before", metavar="DIR", help="an earlier build's folder: the whole command of both")
    args = ap.parse_args()
    if not Path(args.trace).is_file():
        print(f"{args.trace}: no such trace (give one with --trace)", file=sys.stderr)
        return 2
    ways, size = _ways(args.trace)
    best = {name: float("inf") for name in ways}
    for _ in range(args.repeat):
        for name, run in ways.items():
            t = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t)
    out = {"trace": args.trace, "bytes": size, "best_s": best, "speedup": best["json.dumps"] / best["writer"]}
    if not args.no_callgrind:
        counts, _ = callgrind_counts(__file__, [args.trace])
        out["instructions"] = counts
        out["instructions_ratio"] = counts["json.dumps"] / counts["writer"]
    if args.before:
        import gpuprof

        now = os.path.dirname(os.path.dirname(os.path.abspath(gpuprof.__file__)))
        out["whole_command"] = {"before": whole_command(os.path.abspath(args.before), args.trace)}
        out["whole_command"]["now"] = whole_command(now, args.trace)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
