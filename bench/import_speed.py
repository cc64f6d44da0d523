"""The plain-JSON import on one core, this build against an earlier one: callgrind's instructions of
`_core.import_trace(FILE, import_cpus=1)` (the import alone: reading, tokenizing, building the
Trace), its CPU time (best of --repeat, each import in a fresh process, the two builds taking
turns), and the whole `gpuprof analyze GZ --json` wall time (best of --repeat, taking turns).

    python3 bench/import_speed.py --before DIR [--repeat 5] [--gz GZ] [--out results.json]
        [--callgrind FILE.json]... FILE.json ...

``--before DIR``: the gpuprof package of the earlier build (a folder holding ``gpuprof/`` with its
native module, e.g. ``pip install --no-deps --target DIR .`` at the earlier commit). FILEs are plain
JSON (inflate a .json.gz first: the question is the tokenizer and the handler, not inflating);
``--callgrind FILE`` (repeated) names the FILEs also counted under callgrind (a 20-50 MB text takes
a minute or two there). CPU time, not wall time: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _callgrind import callgrind_counts  # noqa: E402

ONE_IMPORT = r"""
import os, sys, time
from gpuprof import _core
c = time.process_time()
trace, stats = _core.import_trace(os.fsencode(sys.argv[1]), import_cpus=1)
print(time.process_time() - c, stats["records"])
"""


def child(path: str) -> None:
    from gpuprof import _core

    os.getppid()
    _core.import_trace(os.fsencode(path), import_cpus=1)
    os.getpgrp()
    print("MEASURED import", flush=True)


def env_for(before: str | None) -> dict:
    env = dict(os.environ)
    if before:
        env["PYTHONPATH"] = os.path.abspath(before) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def import_cpu_s(path: str, before: str | None) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", ONE_IMPORT, path], env=env_for(before), check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1])


def analyze_wall_s(gz: str, before: str | None, out: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpuprof", "analyze", gz, "--json", out], env=env_for(before),
                   check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - t


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--before", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--callgrind", action="append", default=[], metavar="FILE")
    ap.add_argument("--gz", help="a .json.gz trace for the whole `gpuprof analyze` wall time")
    ap.add_argument("--out")
    args = ap.parse_args()
    builds = {"before": args.before, "now": None}
    result: dict = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "load_average": os.getloadavg(), "repeat": args.repeat, "inputs": {}}  # fmt: skip
    for path in args.files:
        size = os.path.getsize(path)
        row: dict = {"bytes": size}
        if path in args.callgrind:
            for name, before in builds.items():
                counts, _ = callgrind_counts(__file__, [os.path.abspath(path)], before_dir=before)
                row[f"instructions_{name}"] = counts["import"]
        best = {name: float("inf") for name in builds}
        for _ in range(args.repeat):  # the builds take turns
            for name, before in builds.items():
                cpu, records = import_cpu_s(path, before)
                best[name] = min(best[name], cpu)
                row["records"] = records
        for name in builds:
            row[f"cpu_s_{name}"] = best[name]
            row[f"gb_per_s_{name}"] = size / best[name] / 1e9
        result["inputs"][os.path.basename(path)] = row
        print(os.path.basename(path), json.dumps(row), flush=True)
    if args.gz:
        best = {name: float("inf") for name in builds}
        for _ in range(args.repeat):
            for name, before in builds.items():
                best[name] = min(
                    best[name], analyze_wall_s(args.gz, before, f"/tmp/import_speed_{name}.json")
                )
        result["analyze_wall_s"] = {"file": os.path.basename(args.gz), **best}
        print("analyze", json.dumps(result["analyze_wall_s"]), flush=True)
    result["load_average_after"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
