"""Many ranks: `gpuprof analyze DIR` over a folder of N per-rank traces vs Holistic Trace Analysis.

The folder is made at run time in a temporary directory: N symbolic links to the 53 MB DDP rank trace
(hta_2xv100_ddp, 3 MB gzip, 216k events) for gpuprof; for HTA, M gzip copies whose distributedInfo
rank is rewritten to 0..M-1 (HTA keys ranks by it). Each tool runs in its own subprocess; we record
wall time, CPU time (user + system of the whole process tree), and the peak resident memory of the
whole tree (main process and workers together, sampled every 20 ms with psutil).

    python bench/ranks_speed.py [--ranks 100] [--workers 2] [--hta-ranks 4] [--out results.json]

Run by hand (not in CI); HTA and psutil must be installed: pip install holistictraceanalysis psutil
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / ".." / "shared" / "traces" / "hta_2xv100_ddp" / "rank0.json.gz"


def measure(cmd: list[str], timeout: float) -> dict:
    import resource

    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                tree = [proc] + proc.children(recursive=True)
                total = 0
                for p in tree:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                peak[0] = max(peak[0], total)
            except psutil.Error:
                pass
            stop.wait(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        th.join()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed: {err[-2000:]}")
    # CPU of the whole tree: every descendant was waited for by its parent, so RUSAGE_CHILDREN has it.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mib": round(peak[0] / 2**20, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hta-ranks", type=int, default=4, help="0 skips HTA")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if not TRACE.exists():
        print(f"trace not found: {TRACE}", file=sys.stderr)
        return 2
    results = {"input": "hta_2xv100_ddp rank trace (53.7 MB JSON, 3.0 MB gzip)", "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="gpuprof-ranks-") as tmp:
        ours = Path(tmp) / "ours"
        ours.mkdir()
        for i in range(args.ranks):
            (ours / f"rank{i}.json.gz").symlink_to(TRACE.resolve())
        r = measure(
            [
                sys.executable,
                "-m",
                "gpuprof",
                "analyze",
                str(ours),
                "--ranks",
                "--workers",
                str(args.workers),
                "--json",
                str(Path(tmp) / "out.json"),
            ],
            args.timeout,
        )
        r.update(
            ranks=args.ranks,
            workers=args.workers,
            ranks_per_s=round(args.ranks / r["wall_s"], 2),
            ranks_per_cpu_s=round(args.ranks / r["cpu_s"], 2) if r["cpu_s"] else None,
        )
        results["gpuprof"] = r
        print(f"gpuprof: {args.ranks} ranks, {args.workers} workers: {r}", flush=True)
        if args.hta_ranks:
            hta_dir = Path(tmp) / "hta"
            hta_dir.mkdir()
            doc = json.loads(gzip.decompress(TRACE.read_bytes()))
            for i in range(args.hta_ranks):
                doc["distributedInfo"]["rank"] = i
                doc["distributedInfo"]["world_size"] = args.hta_ranks
                with gzip.open(hta_dir / f"rank{i}.json.gz", "wt") as f:
                    json.dump(doc, f)
            del doc
            code = (
                "from hta.trace_analysis import TraceAnalysis; "
                f"a = TraceAnalysis(trace_dir={str(hta_dir)!r}); "
                "a.get_temporal_breakdown(visualize=False); a.get_comm_comp_overlap(visualize=False)"
            )
            h = measure([sys.executable, "-c", code], args.timeout)
            h.update(
                ranks=args.hta_ranks,
                ranks_per_s=round(args.hta_ranks / h["wall_s"], 2),
                ranks_per_cpu_s=round(args.hta_ranks / h["cpu_s"], 2) if h["cpu_s"] else None,
            )
            results["hta"] = h
            print(f"HTA: {args.hta_ranks} ranks: {h}", flush=True)
            g = results["gpuprof"]
            results["ratios"] = {
                "ranks_per_s": round(g["ranks_per_s"] / h["ranks_per_s"], 1),
                "ranks_per_cpu_s": round(g["ranks_per_cpu_s"] / h["ranks_per_cpu_s"], 1),
                "rss_per_rank": round((h["peak_rss_mib"] / h["ranks"]) / (g["peak_rss_mib"] / g["ranks"]), 1),
            }
            print("gpuprof / HTA:", results["ratios"])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
