"""Time, peak memory and output size of `gpuprof analyze` on traces of hostile name counts and
lengths (docs/performance.md, "Bounded by design"):

- `distinct`: 1,000,000 distinct operator names (one call each, in three steps), about 120 MB of
  JSON, through `gpuprof analyze FILE` (text) and `gpuprof analyze FILE --json OUT`;
- `long`: 20 operator names of 10 MiB each, through `gpuprof analyze FILE --html OUT`.

    python bench/bounded_names.py [--names 1000000] [--long 20] [--long-mib 10] [--json out.json]
                                  [--before DIR]   # an earlier gpuprof build (a folder holding its
                                                   # gpuprof package), run on the same traces

The traces are generated into a temporary folder (never committed) and removed afterwards. Each
command runs in its own process; its wall time, its peak resident set (the child's ru_maxrss from
wait4) and the size of what it wrote (stdout, and the --json/--html file) are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_700_000_000_000_000


def write_distinct(path: Path, names: int) -> None:
    """`names` host ops with distinct names, one microsecond each, in three ProfilerStep ranges."""
    per_step = -(-names // 3)
    with open(path, "w") as f:
        f.write('{"traceEvents": [\n')
        for s in range(3):
            start = T0 + s * (per_step + 10)
            f.write(
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s + 1}", "pid": 1, '
                f'"tid": 1, "ts": {start}, "dur": {per_step + 5}}},\n'
            )
        lines = []
        for i in range(names):
            s, k = divmod(i, per_step)
            ts = T0 + s * (per_step + 10) + 1 + k
            lines.append(
                f'{{"ph": "X", "cat": "cpu_op", "name": "custom::op_{i:07d}", "pid": 1, "tid": 1, '
                f'"ts": {ts}, "dur": 1}}'
            )
            if len(lines) == 10000:
                f.write(",\n".join(lines) + ",\n")
                lines = []
        lines.append('{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "bench"}}')
        f.write(",\n".join(lines) + "\n]}\n")


def write_long(path: Path, count: int, mib: int) -> None:
    """`count` host ops whose names are `mib` MiB each (distinct), in one ProfilerStep range."""
    with open(path, "w") as f:
        f.write('{"traceEvents": [\n')
        f.write(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, '
            f'"ts": {T0}, "dur": {count * 10 + 10}}}'
        )
        body = "x" * (mib << 20)
        for i in range(count):
            f.write(
                f',\n{{"ph": "X", "cat": "cpu_op", "name": "op{i:02d}_{body}", "pid": 1, "tid": 1, '
                f'"ts": {T0 + 1 + 10 * i}, "dur": 5}}'
            )
        f.write("\n]}\n")


def measure(args: list[str], out_file: Path | None, before: str | None = None) -> dict:
    cmd = [sys.executable, "-m", "gpuprof.cli", *args]
    env = dict(os.environ)
    if before:
        env["PYTHONPATH"] = os.pathsep.join([before] + [p for p in [env.get("PYTHONPATH")] if p])
    if out_file is not None and out_file.exists():
        out_file.unlink()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        stdout_bytes = stdout.seek(0, os.SEEK_END)
    wall = time.perf_counter() - started
    row = {
        "build": "before" if before else "this",
        "command": "gpuprof " + " ".join(Path(a).name if "/" in a else a for a in args),
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024.0, 1),
        "stdout_bytes": stdout_bytes,
    }
    if out_file is not None:
        row["file_bytes"] = out_file.stat().st_size if out_file.exists() else None
    if proc.returncode != 0:
        row["stderr"] = stderr[-2000:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=int, default=1_000_000)
    ap.add_argument("--long", type=int, default=20)
    ap.add_argument("--long-mib", type=int, default=10)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--before", help="an earlier build's folder (holding its gpuprof package), run too")
    args = ap.parse_args()
    builds = [None] + ([args.before] if args.before else [])
    results: dict = {
        "host": {"python": platform.python_version(), "cpus": len(os.sched_getaffinity(0))},
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="gpuprof_bounded_") as tmp:
        folder = Path(tmp)
        distinct = folder / "distinct.json"
        write_distinct(distinct, args.names)
        results["distinct_trace_bytes"] = distinct.stat().st_size
        out = folder / "distinct.report.json"
        for build in builds:  # the builds take turns on each command
            results["runs"].append(measure(["analyze", str(distinct)], None, build))
        for build in builds:
            results["runs"].append(measure(["analyze", str(distinct), "--json", str(out)], out, build))
        distinct.unlink()
        long_names = folder / "long.json"
        write_long(long_names, args.long, args.long_mib)
        results["long_trace_bytes"] = long_names.stat().st_size
        html = folder / "long.html"
        for build in builds:
            results["runs"].append(measure(["analyze", str(long_names), "--html", str(html)], html, build))
        for build in builds:
            results["runs"].append(measure(["analyze", str(long_names)], None, build))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
