"""What timing the input pipeline costs per batch (docs/performance.md, "Input pipeline"), side by side.

    python bench/pipeline_overhead.py [--batches 2000] [--rounds 7] [--callgrind] [--json out.json]

The cost a span adds falls in three places, each measured here against what runs without it:

- **in a worker, per batch**: torch's ``_MapDatasetFetcher.fetch`` against gpuprof's timed copy of
  it, as a worker runs it while a span records (each sample and the collate timed, the batch's CPU
  time and CPU wait read, one record pickled and written to a pipe that a thread drains), for
  batches of 1, 32 and 256 samples of a dataset whose samples cost nothing (so that the difference
  is all gpuprof's), with and without a transform attribute to time;
- **in the training process, per batch**: ``next()`` on a DataLoader with ``num_workers=0`` with and
  without a span's hooks (the ``__next__`` wrap, the wait and queue look-up, the timed fetch);
- **in the training process, per worker record**: the session's reader thread unpickling a record.

While no span records, a worker runs torch's own fetch (tests/python/collect/test_input_pipeline.py counts
gpuprof's frames to show it): nothing is added, by construction, so there is no variant for it.

Wall time: each variant's loop is timed ``--rounds`` times, interleaved with the others, and the
fastest round kept (the least disturbed by the machine's other work). ``--callgrind`` counts CPU
instructions instead (valgrind; repeatable on a shared machine): each loop with N and 3N batches
between callgrind's zero and dump markers, the difference over 2N.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts, per_unit  # noqa: E402

SIZES = (1, 32, 256)


class Free:
    """Samples that cost nothing: an int per index."""

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        return i


class FreeWithTransform(Free):
    def __init__(self):
        self.transform = int  # a torchvision-style attribute: called on each sample

    def __getitem__(self, i):
        return self.transform(i)


def keep(samples):
    return samples


def _drained_pipe():
    """A pipe that another process empties, as the session's reader thread does from the training
    process (a thread here would take the worker's GIL): (write fd, stop)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    reader = subprocess.Popen(["cat"], stdin=r, stdout=subprocess.DEVNULL)
    os.close(r)

    def stop():
        os.close(w)
        reader.wait(5)

    return w, stop


def fetch_variants(batches: int):
    """name -> a function running `n` batches (of the size in the name); setup and teardown apart."""
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    from gpuprof.collect import input_records as p

    p._remember_originals()
    torch_fetch = p._ORIGINALS["map_fetch"]
    out = {}
    for size in SIZES:
        for transform in (False, True):
            ds = FreeWithTransform() if transform else Free()
            fetcher = _MapDatasetFetcher(ds, True, keep, False)
            idx = list(range(size))
            tag = f"{size} samples" + (" + transform" if transform else "")

            def run_torch(n, fetcher=fetcher, idx=idx):
                for _ in range(n):
                    torch_fetch(fetcher, idx)

            def run_timed(n, fetcher=fetcher, idx=idx):
                for _ in range(n):
                    p.timed_map_fetch(fetcher, idx)

            out[f"torch, {tag}"] = (run_torch, None)
            out[f"gpuprof, {tag}"] = (run_timed, ds)
    return out


def as_worker(ds):
    """Put this process in a timing worker's state (records to a drained pipe); returns the undo."""
    from gpuprof.collect import input_records as p

    w, stop = _drained_pipe()
    p._worker = p._WorkerState(0, 0, w, ds)
    p._worker.wrapped = p.wrap_transforms(ds)

    def undo():
        p.unwrap_transforms(p._worker.wrapped)
        p._worker = None
        stop()

    return undo


def wall(batches: int, rounds: int) -> dict:
    import torch

    import gpuprof

    torch.set_num_threads(1)
    variants = fetch_variants(batches)
    best: dict = {}
    for _ in range(rounds):
        for name, (run, ds) in variants.items():
            undo = as_worker(ds) if ds is not None else None
            try:
                run(50)  # warm
                t = time.perf_counter_ns()
                run(batches)
                ns = (time.perf_counter_ns() - t) / batches
            finally:
                if undo:
                    undo()
            best[name] = min(best.get(name, float("inf")), ns)
    # next() with num_workers=0: without a session, and inside a recording span.
    for _ in range(rounds):
        for label in ("next(), no session", "next(), span recording"):
            loader = torch.utils.data.DataLoader(Free(), batch_size=32, collate_fn=keep)
            if label.endswith("no session"):
                it = iter(loader)
                for _ in range(50):
                    next(it)
                t = time.perf_counter_ns()
                for _ in range(batches):
                    next(it)
                ns = (time.perf_counter_ns() - t) / batches
            else:
                with gpuprof.profile(max_events=10 * batches + 10_000, gpu=False) as prof:
                    it = iter(loader)
                    for _ in range(50):
                        next(it)
                    t = time.perf_counter_ns()
                    for _ in range(batches):
                        next(it)
                    ns = (time.perf_counter_ns() - t) / batches
                    prof.step()
            best[label] = min(best.get(label, float("inf")), ns)
    # The session's reader, per record: unpickling one batch record and keeping it.
    from gpuprof.collect.input_reader import PipelineCapture

    rec = pickle.dumps(
        (
            "b",
            0,
            1,
            4242,
            4242,
            7,
            10**12,
            5000,
            10**7,
            10**6,
            10**5,
            10**6,
            0,
            32,
            10**7,
            1e12,
            tuple((10**5, i) for i in range(8)),
        ),
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    cap = PipelineCapture()
    for _ in range(rounds):
        t = time.perf_counter_ns()
        for _ in range(batches):
            cap.add(pickle.loads(rec))
        best["reader, per record"] = min(
            best.get("reader, per record", float("inf")), (time.perf_counter_ns() - t) / batches
        )
        cap.take()
    return {"ns_per_batch": best, "record_bytes": len(rec) + 4}


def added(ns: dict) -> dict:
    out = {}
    for size in SIZES:
        for tr in ("", " + transform"):
            base, ours = ns[f"torch, {size} samples{tr}"], ns[f"gpuprof, {size} samples{tr}"]
            out[f"{size} samples{tr}"] = {"torch_ns": base, "gpuprof_ns": ours, "added_ns": ours - base}
    if "next(), no session" in ns:
        out["next(), 32 samples, num_workers=0"] = {
            "torch_ns": ns["next(), no session"],
            "gpuprof_ns": ns["next(), span recording"],
            "added_ns": ns["next(), span recording"] - ns["next(), no session"],
        }
    return out


# ---- callgrind ---------------------------------------------------------------------------------
def child(batches: int) -> None:
    """Runs under callgrind: each fetch variant between the zero and dump markers, N and 3N batches."""
    import torch

    torch.set_num_threads(1)
    for name, (run, ds) in fetch_variants(batches).items():
        undo = as_worker(ds) if ds is not None else None
        try:
            run(100)
            for n in (batches, 3 * batches):
                os.getppid()  # callgrind: --zero-before=getppid
                run(n)
                os.getpgrp()  # callgrind: --dump-before=getpgrp
                print(f"MEASURED {name}@{n}", flush=True)
        finally:
            if undo:
                undo()


def callgrind(batches: int) -> dict:
    counts, _ = callgrind_counts(__file__, ["--batches", batches])
    names = list(dict.fromkeys(label.rsplit("@", 1)[0] for label in counts))
    return per_unit(counts, names, batches)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--callgrind", action="store_true", help="count instructions instead (valgrind)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.batches)
        return
    import torch

    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "batches": args.batches,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    if args.callgrind:
        ins = callgrind(args.batches)
        results["tool"] = "valgrind --tool=callgrind"
        results["instructions_per_batch"] = ins
        results["added"] = added(ins)
        unit = "instructions"
    else:
        w = wall(args.batches, args.rounds)
        results["tool"] = f"wall time, fastest of {args.rounds} interleaved rounds"
        results.update(w)
        results["added"] = added(w["ns_per_batch"])
        unit = "ns"
    print(f"{'per batch':40} {'torch':>12} {'gpuprof':>12} {'added':>12}  ({unit})")
    for k, v in results["added"].items():
        print(f"{k:40} {v['torch_ns']:12.0f} {v['gpuprof_ns']:12.0f} {v['added_ns']:12.0f}")
    if "ns_per_batch" in results:
        print(
            f"reader, per record: {results['ns_per_batch']['reader, per record']:.0f} ns "
            f"({results['record_bytes']} bytes through the pipe)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
