"""What `gpuprof analyze` costs on one trace, this build against an earlier one, two ways:

* instructions (valgrind callgrind, every thread, repeatable to a fraction of a percent) of the
  work after the imports: reading the trace, building the report, and rendering it: the text
  (`gpuprof analyze FILE`: no step views) or JSON + HTML (`--json --html`: with them);
* wall and CPU time of the whole command (`gpuprof analyze FILE`, and with `--json --html`), each
  in its own process of the same interpreter, the two builds taking turns: medians and minima.

    python bench/report_cost.py --before DIR [--trace PATH] [--runs 21] [--no-callgrind] [--out OUT.json]

DIR holds the earlier build's installed `gpuprof` (`pip install --no-deps --target DIR .` at its
commit). Run by hand (not in CI); the trace defaults to the ResNet-50 sample in ../shared/traces.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESNET = REPO / ".." / "shared" / "traces" / "tb_resnet50_v100_nw0" / "worker0.1623143089861.pt.trace.json.gz"

# Under callgrind: the imports first, then the measured part between getppid (zero) and getpgrp (dump).
MEASURED = r"""
import json, os, sys
mode, path = sys.argv[1], sys.argv[2]
import gpuprof, gpuprof.report.html, gpuprof.report.text, jinja2
from gpuprof._native import _core
from gpuprof.report.build import build_report
os.getppid()
trace, _ = _core.import_trace(path)
report = build_report(trace, with_step_views=mode == "full")
out = report.to_text() if mode == "text" else json.dumps(report.to_dict()) + report.to_html()
os.getpgrp()
"""

# The `gpuprof` command as its console script runs it; argv[1]: the build's folder ("": installed).
COMMAND = (
    "import sys\n"
    "if sys.argv[1]: sys.path.insert(0, sys.argv[1])\n"
    "import gpuprof.cli as c\n"
    "c.entry(sys.argv[2:])\n"
)


def instructions(before: str, trace: str, mode: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONHASHSEED="0")  # the same dict probes in both builds
        if before:
            env["PYTHONPATH"] = before
        out = os.path.join(tmp, "callgrind.out")
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--zero-before=getppid",
            "--dump-before=getpgrp",
            "--dump-instr=no",
            "--dump-line=no",
            sys.executable,
            "-c",
            MEASURED,
            mode,
            trace,
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the run under callgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        total = 0
        for path in glob.glob(out + "*"):
            text = Path(path).read_text()
            if "Trigger: --dump-before=getpgrp" in text[:4000]:
                total += int(re.search(r"^(?:totals|summary): (\d+)", text, re.M).group(1))
        return total


def timed_runs(before: str, trace: str, runs: int, full: bool, work: str) -> dict:
    args = ["analyze", trace] + (["--json", f"{work}/r.json", "--html", f"{work}/r.html"] if full else [])
    seen: dict = {"before": {"wall_s": [], "cpu_s": []}, "now": {"wall_s": [], "cpu_s": []}}
    for i in range(runs):
        order = [("before", before), ("now", "")]
        for name, folder in order if i % 2 == 0 else order[::-1]:
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", COMMAND, folder, *args], stdout=subprocess.DEVNULL, check=True
            )
            seen[name]["wall_s"].append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            seen[name]["cpu_s"].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return {
        name: {k: {"median": statistics.median(v), "min": min(v), "all": v} for k, v in d.items()}
        for name, d in seen.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, metavar="DIR")
    ap.add_argument("--trace", default=str(RESNET))
    ap.add_argument("--runs", type=int, default=21, help="timed runs of each build and command")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    before = os.path.abspath(args.before)
    if not (Path(before) / "gpuprof" / "__init__.py").is_file():
        print(f"--before {args.before}: no gpuprof package in that folder", file=sys.stderr)
        return 2
    if not Path(args.trace).is_file():
        print(f"{args.trace}: no such trace (give one with --trace)", file=sys.stderr)
        return 2
    # Byte-compiled first, as bench/analyze_speed.py does: stale byte code is compiled on every run.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(before) / "gpuprof")],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result: dict = {"trace": args.trace, "before": before, "load_average": os.getloadavg()}
    for mode in ("text", "full"):
        what = "text" if mode == "text" else "JSON + HTML"
        if not args.no_callgrind:
            b, n = instructions(before, args.trace, mode), instructions("", args.trace, mode)
            result[f"instructions_{mode}"] = {"before": b, "now": n, "ratio": n / b}
            print(f"{what}: {b / 1e6:,.1f} M instructions before, {n / 1e6:,.1f} M now ({n / b:.4f}x)")
        with tempfile.TemporaryDirectory() as work:
            t = timed_runs(before, args.trace, args.runs, mode == "full", work)
        result[f"timed_{mode}"] = t
        for k in ("wall_s", "cpu_s"):
            b, n = t["before"][k], t["now"][k]
            print(
                f"{what}, {k[:-2]}: median (min) {b['median']:.4f} ({b['min']:.4f}) s before, "
                f"{n['median']:.4f} ({n['min']:.4f}) s now ({n['median'] / b['median']:.3f}x)"
            )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
