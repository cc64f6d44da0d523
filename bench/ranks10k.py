"""`gpuprof analyze DIR` over a folder of 10,000 rank traces (bench/synthetic_ranks.py: a synchronous
DDP job, rank 7 slowed 1.5x), through local worker processes and through a dask.distributed
LocalCluster, with the peak resident memory of each process measured on its own (docs/performance.md,
"Folders of many ranks").

    python bench/ranks10k.py [--ranks 10000] [--workers 2] [--dask-workers 2] [--folder DIR]
                             [--json OUT]

The folder is written into a temporary directory unless --folder names one (reused when it holds
the files). Each run is one `gpuprof analyze DIR --json OUT` subprocess; a sampler (psutil, every
20 ms) keeps each process's own peak RSS: the command's main process, its worker processes, and,
for dask, the cluster's worker processes (children of this script). The report is checked: every
rank present, 5 matched steps, rank 7 the one straggler. Run by hand (not in CI); needs psutil and,
for the dask run, distributed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_ranks import expected, write_folder  # noqa: E402


class PeakRss:
    """Each process's own peak RSS among `roots` and their descendants, sampled every 20 ms."""

    def __init__(self, roots: list):
        import psutil

        self.psutil, self.roots, self.peak, self.role = psutil, roots, {}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for role, root in self.roots:
                try:
                    tree = [(role, root)] + [(role + "-child", c) for c in root.children(recursive=True)]
                except self.psutil.Error:
                    continue
                for r, p in tree:
                    try:
                        if p.pid not in self.role and "resource_tracker" in " ".join(p.cmdline()):
                            self.role[p.pid] = "tracker"  # multiprocessing's helper, not a worker
                        rss = p.memory_info().rss
                    except self.psutil.Error:
                        continue
                    self.role.setdefault(p.pid, r)
                    self.peak[p.pid] = max(self.peak.get(p.pid, 0), rss)
            self.stop.wait(0.02)

    def done(self) -> dict:
        self.stop.set()
        self.thread.join()
        by_role: dict = {}
        for pid, rss in self.peak.items():
            by_role.setdefault(self.role[pid], []).append(rss)
        return {role: sorted(v) for role, v in by_role.items()}


def mib(n: float) -> float:
    return round(n / 2**20, 1)


def run(cmd: list[str], extra_roots: list, timeout: float) -> dict:
    import psutil

    t0 = time.monotonic()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = PeakRss([("main", proc)] + extra_roots)
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        by_role = peaks.done()
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:5]} failed ({proc.returncode}): {err[-3000:]}")
    workers = sorted(by_role.get("main-child", []) + by_role.get("dask", []) + by_role.get("dask-child", []))
    return {
        "wall_s": round(wall, 1),
        "main_peak_rss_mib": mib(max(by_role.get("main", [0]))),
        "worker_processes": len(workers),
        "worker_peak_rss_mib_max": mib(max(workers)) if workers else None,
        "worker_peak_rss_mib_median": mib(workers[len(workers) // 2]) if workers else None,
    }


def check(report_path: Path, ranks: int) -> dict:
    data = json.loads(report_path.read_text())
    want = expected(ranks)
    got = {
        "ranks": len(data["ranks"]),
        "matched_steps": data["cross_rank"]["matched_steps"],
        "stragglers": [s["rank"] for s in data["stragglers"]],
        "imbalance_pct": data["cross_rank"]["imbalance_pct"],
    }
    ok = (
        got["ranks"] == ranks
        and [r["rank"] for r in data["ranks"]] == list(range(ranks))
        and got["matched_steps"] == want["steps"]
        and got["stragglers"] == [want["slow"]]
    )
    got["correct"] = ok
    return got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dask-workers", type=int, default=2, help="0 skips the dask run")
    ap.add_argument("--folder", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    results: dict = {"ranks": args.ranks, "cores": os.cpu_count(), "python": platform.python_version()}
    with tempfile.TemporaryDirectory(prefix="gpuprof-ranks10k-") as tmp:
        folder = args.folder or Path(tmp) / "ranks"
        if not folder.exists() or len(list(folder.glob("rank*.pt.trace.json.gz"))) != args.ranks:
            t0 = time.monotonic()
            files = write_folder(folder, args.ranks)
            results["generate_s"] = round(time.monotonic() - t0, 1)
        else:
            files = sorted(folder.glob("rank*.pt.trace.json.gz"))
        results["folder_mb"] = round(sum(f.stat().st_size for f in files) / 1e6, 1)
        base = [sys.executable, "-m", "gpuprof", "analyze", str(folder)]
        out = Path(tmp) / "local.json"
        r = run(base + ["--workers", str(args.workers), "--json", str(out)], [], args.timeout)
        r.update(workers=args.workers, report=check(out, args.ranks))
        results["local"] = r
        print(f"local, {args.workers} workers: {r}", flush=True)
        if args.dask_workers:
            import psutil
            from distributed import LocalCluster

            with LocalCluster(
                n_workers=args.dask_workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster:
                me = psutil.Process()
                before = {p.pid for p in me.children(recursive=True)}
                dask_roots = [("dask", p) for p in me.children(recursive=False) if p.pid in before]
                out = Path(tmp) / "dask.json"
                cmd = base + ["--dask", cluster.scheduler_address, "--json", str(out)]
                r = run(cmd, dask_roots, args.timeout)
                r.update(dask_workers=args.dask_workers, report=check(out, args.ranks))
                results["dask"] = r
                print(f"dask, {args.dask_workers} workers: {r}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(results[k]["report"]["correct"] for k in ("local", "dask") if k in results) else 1


if __name__ == "__main__":
    sys.exit(main())
