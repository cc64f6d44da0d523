"""Per-op cost of profiling on the CPU, side by side in one run.

    python bench/overhead.py [--ops 200000] [--rounds 7] [--no-shapes] [--json out.json]

Three ways to run the same loop of tiny torch ops, interleaved round by round so that machine noise
hits them alike: no profiler; gpuprof recording; torch.profiler with CPU activities (no shapes, no
stack). Each round runs the variants in a new random order. The figure is the median over rounds of
ns per op added to the unprofiled loop; collection only (the loop), and separately end to end
(start, loop, stop and producing the result the user reads: gpuprof's Report, torch.profiler's
key_averages()). A fourth variant runs the loop inside a gpuprof session in a `wait` step: hooks are
not installed there, so it should cost nothing. Both profilers run again with record_shapes=True
(unless --no-shapes). bench/overhead_callgrind.py counts instructions instead, which a loaded
machine does not disturb.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time

import torch

import gpuprof


def loop(x, n):
    # One RecordFunction per iteration: in-place add of two 1-element tensors.
    y = torch.ones_like(x)
    for _ in range(n):
        x.add_(y)


def run_none(x, n):
    t0 = time.perf_counter_ns()
    loop(x, n)
    t1 = time.perf_counter_ns()
    return t1 - t0, t1 - t0


def run_gpuprof(x, n, record_shapes=False):
    t0 = time.perf_counter_ns()
    with gpuprof.profile(max_events=2 * n, record_shapes=record_shapes) as prof:
        a = time.perf_counter_ns()
        loop(x, n)
        b = time.perf_counter_ns()
        prof.step()
    prof.report()
    t1 = time.perf_counter_ns()
    assert prof.report().counts["dropped"] == 0
    return b - a, t1 - t0


def run_torch_profiler(x, n, record_shapes=False):
    t0 = time.perf_counter_ns()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=record_shapes, with_stack=False
    ) as prof:
        a = time.perf_counter_ns()
        loop(x, n)
        b = time.perf_counter_ns()
    prof.key_averages()
    t1 = time.perf_counter_ns()
    return b - a, t1 - t0


def run_gpuprof_wait(x, n):
    # Step 0 is a `wait` step: the session exists but no hook is installed.
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=0, active=1, repeat=1)) as prof:
        a = time.perf_counter_ns()
        loop(x, n)
        b = time.perf_counter_ns()
        prof.step()
    return b - a, b - a


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--no-shapes", action="store_true", help="leave out the record_shapes=True variants")
    args = p.parse_args()
    torch.set_num_threads(1)
    x = torch.ones(1)
    variants = {
        "none": run_none,
        "gpuprof": run_gpuprof,
        "torch.profiler": run_torch_profiler,
        "gpuprof (wait step)": run_gpuprof_wait,
    }
    if not args.no_shapes:
        variants["gpuprof shapes"] = lambda x, n: run_gpuprof(x, n, record_shapes=True)
        variants["torch.profiler shapes"] = lambda x, n: run_torch_profiler(x, n, record_shapes=True)
    for fn in variants.values():  # warm every path once
        fn(x, 2000)
    loop_ns = {k: [] for k in variants}
    e2e_ns = {k: [] for k in variants}
    order = list(variants.items())
    for _ in range(args.rounds):
        random.shuffle(order)  # no variant always runs right after another (caches, frequency)
        for name, fn in order:
            a, b = fn(x, args.ops)
            loop_ns[name].append(a / args.ops)
            e2e_ns[name].append(b / args.ops)
    med = {k: statistics.median(v) for k, v in loop_ns.items()}
    med_e2e = {k: statistics.median(v) for k, v in e2e_ns.items()}
    base = med["none"]
    added = {k: med[k] - base for k in variants}
    added_e2e = {k: med_e2e[k] - med_e2e["none"] for k in variants}
    print(
        f"{args.ops} x Tensor.add_ on 1-element tensors (one op each), "
        f"{args.rounds} interleaved rounds, median; "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread"
    )
    print(f"{'variant':22} {'ns/op':>9} {'added':>9} {'added e2e':>10}")
    for k in variants:
        print(f"{k:22} {med[k]:9.1f} {added[k]:9.1f} {added_e2e[k]:10.1f}")
    ratio = added["gpuprof"] / added["torch.profiler"]
    ratio_e2e = added_e2e["gpuprof"] / added_e2e["torch.profiler"]
    wait_pct = 100.0 * (med["gpuprof (wait step)"] - base) / base
    print(
        f"gpuprof adds {ratio:.2f}x what torch.profiler adds per op while recording "
        f"({ratio_e2e:.2f}x end to end); a wait step costs {wait_pct:+.2f}% of an unprofiled one"
    )
    ratio_shapes = None
    if "gpuprof shapes" in added:
        ratio_shapes = added["gpuprof shapes"] / added["torch.profiler shapes"]
        print(f"with record_shapes=True: {ratio_shapes:.2f}x while recording")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "ops": args.ops,
                    "rounds": args.rounds,
                    "gpuprof_package": gpuprof.__file__,
                    "ns_per_op": med,
                    "added_ns": added,
                    "added_e2e_ns": added_e2e,
                    "ratio_recording": ratio,
                    "ratio_recording_record_shapes": ratio_shapes,
                    "ratio_e2e": ratio_e2e,
                    "wait_step_pct": wait_pct,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
