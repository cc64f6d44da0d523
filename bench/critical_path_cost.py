"""What the critical path adds to the native analysis of a large trace.

Times `_core.gpu_tables` (the one native pass: breakdown, links, tables and, in this build, the
critical path) on the same imported trace with this checkout's gpuprof and with an earlier build
without the critical path (`--before DIR`, a folder holding its `gpuprof` package), each in its own
process, the two taking turns; the fastest of `--repeat` calls per process (wall and process CPU
time), the best of `--rounds` processes. Input: the synthetic 2-million-event trace that
bench/analyze_speed.py writes (`--trace`). `--export` times the Chrome export instead, against a
build whose export does not draw the path (the "Critical path" track). `--drawn` times what the
report's step views add: `critical_path_pieces` for the two drawn steps, after `gpu_tables`.

    PYTHONPATH=python python bench/critical_path_cost.py --before DIR \
        --trace /tmp/gpuprof-bench/synthetic_2m.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SIDE = r"""
import json, os, sys, tempfile, time
from gpuprof._native import _core
from gpuprof.analysis import process_groups
trace, _ = _core.import_trace(sys.argv[1])
out = os.path.join(tempfile.mkdtemp(), "t.trace.json.gz")
if sys.argv[3] == "export":
    run = lambda: _core.export_chrome_trace(trace, out)
elif sys.argv[3] == "drawn":
    # The two critical_path_pieces calls of step_views (the slowest and the median step), passing the
    # analysis pass's kept paths where this build has them.
    analysed = _core.gpu_tables(trace, True, process_groups(trace.metadata))
    steps = analysed["breakdown"]["steps"]
    kept = analysed.get("critical_path_kept")
    by_length = sorted(steps, key=lambda s: s["total_ns"])
    drawn = [max(steps, key=lambda s: s["total_ns"]), by_length[(len(steps) - 1) // 2]]
    more = [kept] if kept is not None else []
    run = lambda: [_core.critical_path_pieces(trace, [s], 2000, *more) for s in drawn]
else:
    run = lambda: _core.gpu_tables(trace, True, process_groups(trace.metadata))
best_wall = best_cpu = 1e9
for _ in range(int(sys.argv[2])):
    w, c = time.perf_counter(), time.process_time()
    run()
    best_wall = min(best_wall, time.perf_counter() - w)
    best_cpu = min(best_cpu, time.process_time() - c)
print(json.dumps({"wall_s": best_wall, "cpu_s": best_cpu, "events": trace.num_events}))
"""


def side(pythonpath: str, trace: str, repeat: int, what: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run(
        [sys.executable, "-c", SIDE, trace, str(repeat), what], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _installed() -> str:
    """The folder holding the gpuprof package this Python imports (a checkout's python/ has no
    native pieces until it is built into; the installed package has them)."""
    import importlib.util

    spec = importlib.util.find_spec("gpuprof")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gpuprof is not installed for this Python: bash .ci/setup, or pass --now DIR")
    return str(Path(list(spec.submodule_search_locations)[0]).parent)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a folder holding the earlier build's gpuprof package")
    ap.add_argument(
        "--now",
        default=None,
        help="a folder holding this build's gpuprof package (default: the gpuprof this Python imports)",
    )
    ap.add_argument("--trace", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--export",
        action="store_true",
        help="time the Chrome export (export_chrome_trace, gzip), which draws the path, not gpu_tables",
    )
    ap.add_argument(
        "--drawn",
        action="store_true",
        help="time critical_path_pieces for the two steps a report draws (after gpu_tables), not gpu_tables",
    )
    args = ap.parse_args()
    now = args.now or _installed()
    runs: dict = {"before": [], "now": []}
    what = "export" if args.export else "drawn" if args.drawn else "gpu_tables"
    timed = {"export": "export_chrome_trace", "drawn": "critical_path_pieces", "gpu_tables": "gpu_tables"}[
        what
    ]
    for _ in range(args.rounds):
        runs["before"].append(side(args.before, args.trace, args.repeat, what))
        runs["now"].append(side(now, args.trace, args.repeat, what))
    best = {k: {m: min(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in runs.items()}
    result = {
        "trace": args.trace,
        "timed": timed,
        "events": runs["now"][0]["events"],
        "best": best,
        "ratio_wall": best["now"]["wall_s"] / best["before"]["wall_s"],
        "ratio_cpu": best["now"]["cpu_s"] / best["before"]["cpu_s"],
        "runs": runs,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(json.dumps({k: result[k] for k in ("events", "best", "ratio_wall", "ratio_cpu")}))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
