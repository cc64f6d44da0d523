"""Trace import on one thread against the default (two parsers, and for gzip two inflaters), side by
side in one run: what the split import (docs/analyze.md) gains on this machine's CPUs.

Each import runs in a fresh process (as `gpuprof analyze` does), the settings taking turns; the table
gives each setting's median and best wall time, CPU time and peak RSS, and the ratio of the medians.
The import's `import_cpus` (what `GPUPROF_IMPORT_CPUS` sets for `gpuprof analyze`) says how many CPUs
it counts on: 1 keeps it on one thread; 0, the default, counts the CPUs the process may use (a gzip
file is split from 2, as plain text).

    python bench/import_threads.py [--repeat 7] [--out results.json] [FILE ...]

Without FILEs: the two public samples beside the repository (../shared/traces), when there, and a
synthetic trace of --events events (default 2 million, about 465 MB of JSON, 39 MB as gzip)
written once under --workdir, as gzip and as plain JSON. Run by hand and by tests/gpu/run_on_gpu.sh
(a 16-CPU machine); not in CI.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = [
    REPO / ".." / "shared" / "traces" / "hta_2xv100_ddp" / "rank0.json.gz",
    REPO / ".." / "shared" / "traces" / "tb_resnet50_v100_nw0" / "worker0.1623143089861.pt.trace.json.gz",
]

ONE_IMPORT = r"""
import json, resource, sys, time
from gpuprof._native import _core
t = time.perf_counter(); c = time.process_time()
trace, stats = _core.import_trace(sys.argv[1], import_cpus=int(sys.argv[2]))
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                  "threads": stats["threads"], "events": trace.num_events,
                  "json_bytes": stats["json_bytes"],
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

SETTINGS = {"one thread": 1, "default": 0}  # import_cpus


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def one_run(path: Path, import_cpus: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", ONE_IMPORT, str(path), str(import_cpus)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"import of {path} failed: {proc.stderr[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def inputs(args) -> list[Path]:
    if args.files:
        return [Path(f) for f in args.files]
    found = [p.resolve() for p in SAMPLES if p.exists()]
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    gz = work / f"synthetic_{args.events}.pt.trace.json.gz"
    if not gz.exists():
        sys.path.insert(0, str(REPO / "bench"))
        from analyze_speed import synthetic_trace

        synthetic_trace(gz, n_events=args.events)
    plain = work / f"synthetic_{args.events}.pt.trace.json"
    if not plain.exists():
        with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return found + [gz, plain]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpuprof-bench"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    doc = {
        "machine": platform.processor() or platform.machine(),
        "cpus": cpus(),
        "repeat": args.repeat,
        "python": platform.python_version(),
        "inputs": {},
    }
    print(f"{'input':44} {'setting':12} {'median s':>9} {'best s':>8} {'CPU s':>7} {'threads':>7} {'MiB':>6}")
    settings = dict(SETTINGS)
    for path in inputs(args):
        runs = {name: [] for name in settings}
        for _ in range(args.repeat):
            for name, import_cpus in settings.items():  # taking turns: drifts of a shared machine hit all
                runs[name].append(one_run(path, import_cpus))
        row = {}
        for name, rs in runs.items():
            walls = [r["wall_s"] for r in rs]
            row[name] = {
                "median_wall_s": statistics.median(walls),
                "best_wall_s": min(walls),
                "median_cpu_s": statistics.median(r["cpu_s"] for r in rs),
                "threads": rs[0]["threads"],
                "max_rss_mib": max(r["max_rss_mib"] for r in rs),
                "events": rs[0]["events"],
                "json_bytes": rs[0]["json_bytes"],
            }
            print(
                f"{path.name[:44]:44} {name:12} {row[name]['median_wall_s']:9.3f} "
                f"{row[name]['best_wall_s']:8.3f} "
                f"{row[name]['median_cpu_s']:7.3f} {row[name]['threads']:7} {row[name]['max_rss_mib']:6.0f}"
            )
        row["one_thread_over_default"] = row["one thread"]["median_wall_s"] / row["default"]["median_wall_s"]
        print(f"{'':44} one thread / default: {row['one_thread_over_default']:.2f}x")
        doc["inputs"][path.name] = row
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2))
        print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
