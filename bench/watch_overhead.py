"""What watching a run costs per step (gpuprof.watch(), `gpuprof run --watch`), side by side with the
same loop unwatched, in one run.

    python bench/watch_overhead.py [--steps 2000] [--rounds 6] [--callgrind] [--json out.json]

The loop: one training step of a small model on the CPU (a DataLoader batch of 8, Linear 64->64,
backward, SGD step), one thread. Wall clock: rounds of --steps steps, watched and unwatched in
turn, the per-step figure of each the median of its rounds; the difference is the cost (and its
noise on a loaded machine: the unwatched rounds' spread is printed beside it). --callgrind also
counts instructions per step under valgrind's callgrind (the 3N-step run less the N-step run, over
2N): repeatable on a shared box, but under callgrind the loop runs ~50x slower, so the once-a-second
write falls on ~50x fewer steps than it would: its share is measured apart, per write, below.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _loop():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(8 * 4096, 64))

    def steps(n: int) -> None:
        done = 0
        while done < n:
            for (x,) in DataLoader(data, batch_size=8):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
                done += 1
                if done == n:
                    return

    return steps


def _watched(steps, n: int, out: str) -> None:
    import gpuprof

    with gpuprof.watch(out=out):
        steps(n)


def wall_clock(n: int, rounds: int) -> dict:
    steps = _loop()
    out = tempfile.mkdtemp(prefix="gpuprof-watch-bench-")
    steps(200)
    _watched(steps, 200, out)  # warm both paths
    plain, watched = [], []
    # The loop thread's own CPU time beside the wall clock: time the scheduler gave to other
    # processes is not in it, so it resolves what the wall clock of a loaded box cannot.
    plain_cpu, watched_cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        steps(n)
        plain.append((time.perf_counter_ns() - t0) / n / 1e3)
        plain_cpu.append((time.thread_time_ns() - c0) / n / 1e3)
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        _watched(steps, n, out)
        watched.append((time.perf_counter_ns() - t0) / n / 1e3)
        watched_cpu.append((time.thread_time_ns() - c0) / n / 1e3)
    lines = sum(1 for _ in open(os.path.join(out, "rank0", "watch.jsonl")))
    # One write of a second's lines, timed apart: what a 10 ms step pays once a second.
    from gpuprof.session.watch import Watcher

    w = Watcher(os.path.join(out, "flush")).start()
    for _ in range(100):
        w.step()
    t0 = time.perf_counter_ns()
    w.flush()
    flush_us = (time.perf_counter_ns() - t0) / 1e3
    w.close()
    return {
        "steps_per_round": n,
        "rounds": rounds,
        "unwatched_us_per_step": statistics.median(plain),
        "watched_us_per_step": statistics.median(watched),
        "added_us_per_step": statistics.median(watched) - statistics.median(plain),
        "unwatched_spread_us": max(plain) - min(plain),
        "unwatched_thread_cpu_us_per_step": statistics.median(plain_cpu),
        "watched_thread_cpu_us_per_step": statistics.median(watched_cpu),
        "added_thread_cpu_us_per_step": statistics.median(watched_cpu) - statistics.median(plain_cpu),
        "unwatched_thread_cpu_spread_us": max(plain_cpu) - min(plain_cpu),
        "write_of_100_steps_us": flush_us,
        "lines_written": lines,
    }


def child(n: int) -> None:
    steps = _loop()
    out = tempfile.mkdtemp(prefix="gpuprof-watch-bench-")
    steps(100)
    _watched(steps, 100, out)
    os.getppid()
    os.getpgrp()
    print("MEASURED discard", flush=True)
    for name in ("unwatched", "watched"):
        for k in (n, 3 * n):
            os.getppid()  # callgrind: --zero-before=getppid
            if name == "watched":
                _watched(steps, k, out)
            else:
                steps(k)
            os.getpgrp()  # callgrind: --dump-before=getpgrp
            print(f"MEASURED {name}@{k}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--callgrind-steps", type=int, default=200)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.steps)
        return
    result = {"wall_clock": wall_clock(args.steps, args.rounds)}
    wc = result["wall_clock"]
    print(
        f"wall clock, median of {args.rounds} rounds of {args.steps} steps: unwatched "
        f"{wc['unwatched_us_per_step']:.1f} us/step, watched {wc['watched_us_per_step']:.1f} us/step, "
        f"added {wc['added_us_per_step']:+.1f} us "
        f"(unwatched rounds spread {wc['unwatched_spread_us']:.1f} us); "
        f"one write of 100 steps' lines {wc['write_of_100_steps_us']:.0f} us"
    )
    print(
        f"the loop thread's CPU time, median of the same rounds: unwatched "
        f"{wc['unwatched_thread_cpu_us_per_step']:.1f} us/step, watched "
        f"{wc['watched_thread_cpu_us_per_step']:.1f} us/step, added "
        f"{wc['added_thread_cpu_us_per_step']:+.1f} us "
        f"(unwatched rounds spread {wc['unwatched_thread_cpu_spread_us']:.1f} us)"
    )
    if args.callgrind:
        from _callgrind import callgrind_counts, per_unit

        counts, _ = callgrind_counts(__file__, ["--steps", args.callgrind_steps])
        per = per_unit(counts, ("unwatched", "watched"), args.callgrind_steps)
        result["callgrind"] = {
            "steps": args.callgrind_steps,
            "instructions_per_step": per,
            "added_instructions_per_step": per["watched"] - per["unwatched"],
        }
        print(
            f"callgrind, instructions per step: unwatched {per['unwatched']:.0f}, watched "
            f"{per['watched']:.0f}, added {per['watched'] - per['unwatched']:+.0f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
