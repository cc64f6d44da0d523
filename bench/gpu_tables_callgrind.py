"""Instructions of `_core.gpu_tables` and `_core.gpu_timeline` on one trace, each of gpu_tables'
two threads apart (the call lasts as long as the longer one), counted by callgrind.

    python3 bench/gpu_tables_callgrind.py TRACE [--before DIR]

The trace is imported once, outside the count; callgrind zeroes its counters at ``os.getppid()``
and dumps them at ``os.getpgrp()``, around one call. ``--before DIR``: the same for the gpuprof
package installed in DIR (``pip install --no-deps --target DIR .`` at an earlier commit). The side
thread's count is its thread function's inclusive count (callgrind numbers threads by slot, and the
import's inflater thread may have held the same slot before). Needs valgrind and unstripped
libraries for the side thread's count (a build tree's; a wheel's stripped library shows it as 0).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile


def child(trace: str, which: str) -> None:
    from gpuprof import _core
    from gpuprof.analysis import process_groups
    from gpuprof.traces.read import import_trace

    t, _ = import_trace(trace)
    groups = process_groups(t.metadata)
    os.getppid()
    if which == "tables":
        _core.gpu_tables(t, True, groups)
    else:
        _core.gpu_timeline(t)
    os.getpgrp()


def count(trace: str, which: str, before: str | None) -> tuple[int, int]:
    """(main thread's instructions, side thread's) for one call."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if before:
        env["PYTHONPATH"] = os.path.abspath(before) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--separate-threads=yes"]
        cmd += ["--zero-before=getppid", "--dump-before=getpgrp", "--dump-instr=no"]
        cmd += [sys.executable, os.path.abspath(__file__), "--child", which, trace]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the run under callgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        main = side = 0
        for path in glob.glob(out + "*"):
            with open(path) as f:
                text = f.read()
            if "Trigger: --dump-before=getpgrp" in text[:4000] and re.search(r"^thread: 1$", text, re.M):
                main = int(re.search(r"^totals: (\d+)", text, re.M).group(1))
            elif "analyse_tables" in text:
                ann = subprocess.run(
                    ["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True
                ).stdout
                for line in ann.splitlines():
                    if "_State_impl" in line and "analyse_tables" in line:
                        side = int(line.split()[0].replace(",", ""))
                        break
    return main, side


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[3], sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--before", metavar="DIR", default=None)
    args = ap.parse_args()
    for label, before in [("before", args.before), ("after", None)] if args.before else [("this", None)]:
        tables = count(args.trace, "tables", before)
        timeline = count(args.trace, "timeline", before)
        print(
            f"{label}: gpu_tables main thread {tables[0]:,} side thread {tables[1]:,} "
            f"(longer {max(tables):,}); gpu_timeline {timeline[0]:,}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
