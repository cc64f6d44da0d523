"""Per-op cost of profiling in CPU instructions (valgrind callgrind), side by side in one run.

    python bench/overhead_callgrind.py [--ops 20000] [--before DIR] [--json out.json]

Instruction counts do not move with the load on the machine, so this companion of overhead.py gives
repeatable figures on a shared box. One process under callgrind runs the same loop of one-op
iterations (`x.add_(y)` on 1-element tensors: one RecordFunction each) in each variant: unprofiled;
gpuprof recording; torch.profiler recording (CPU activity, no stack), each with and without
record_shapes; the loop inside a gpuprof session during a `wait` step; and, for scale, with a
RecordFunction callback that does nothing installed (LibTorch's own cost of calling any callback,
without and with the inputs boxed for it, as record_shapes needs). Only the loop is counted, on its
own thread (callgrind --separate-threads: other threads' work, OpenBLAS workers spinning or the
previous variant's report analysis, is not an op's cost and used to leak into the counts):
callgrind's counters are zeroed right before it (at a getppid() call) and dumped right after it (at
a getpgrp() call). Each loop runs with N and with 3N ops, and the per-op figure is the difference
divided by 2N, so that costs paid once per loop cancel. "Added" is instructions per op over the
unprofiled loop.

--before DIR runs the same measurement a second time with the gpuprof package found in DIR (a copy
of an earlier installed `gpuprof` folder, prebuilt hooks included) first on sys.path, so a change is
compared with what it replaces in one run of the bench.

Caveat: an instruction is not a nanosecond. A TSC read is one instruction but costs tens of cycles,
and cache misses are not counted; overhead.py measures the time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts, per_unit  # noqa: E402

VARIANTS = (
    "none",
    "gpuprof",
    "gpuprof shapes",
    "torch.profiler",
    "torch.profiler shapes",
    "gpuprof (wait step)",
    "idle callback",
    "idle callback inputs",
)


def _load_hooks():
    """The hooks module of the gpuprof being measured (an earlier one, --before, loads it from
    gpuprof._native)."""
    try:
        from gpuprof.collect.hooks import hooks
    except ImportError:
        from gpuprof._native import hooks
    return hooks()


def child(ops: int, variants: list[str]) -> None:
    """Runs under callgrind: each variant's loop between the zero and dump markers."""
    import torch

    import gpuprof

    torch.set_num_threads(1)
    x = torch.ones(1)
    y = torch.ones_like(x)

    def loop(n):
        for _ in range(n):
            x.add_(y)

    def measured(n):
        os.getppid()  # callgrind: --zero-before=getppid
        loop(n)
        os.getpgrp()  # callgrind: --dump-before=getpgrp

    def run(name, n, measure):
        body = measured if measure else loop
        if name == "none":
            body(n)
        elif name.startswith("idle"):  # LibTorch's own cost of running a callback that does nothing
            hooks = _load_hooks()
            hooks._install_idle(name.endswith("inputs"))
            try:
                body(n)
            finally:
                hooks._remove_idle()
        elif name.startswith("gpuprof (wait"):
            with gpuprof.profile(
                schedule=gpuprof.schedule(wait=1, warmup=0, active=1, repeat=1), gpu=False
            ) as prof:
                body(n)
                prof.step()
        elif name.startswith("gpuprof"):
            with gpuprof.profile(
                record_shapes=name.endswith("shapes"), max_events=4 * n + 1000, gpu=False
            ) as prof:
                body(n)
                prof.step()
            assert prof.report().counts["dropped"] == 0
        else:
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                record_shapes=name.endswith("shapes"),
                with_stack=False,
            ):
                body(n)

    if not hasattr(_load_hooks(), "_install_idle"):  # an earlier gpuprof (--before) has no idle hooks
        variants = [v for v in variants if not v.startswith("idle")]
    for name in variants:  # warm every path (first-use allocations, lazy imports)
        run(name, 2000, measure=False)
    measured(ops)  # the first counted segment carries a one-off cost (~1e7 instructions): not a variant's
    print("MEASURED discard", flush=True)
    for name in variants:
        for n in (ops, 3 * ops):
            run(name, n, measure=True)
            print(f"MEASURED {name}@{n}", flush=True)


def measure(ops: int, before_dir: str | None) -> dict:
    counts, package = callgrind_counts(__file__, ["--ops", ops], before_dir)
    # Per op: the difference between the 3N and the N loop, so that nothing paid once per loop
    # (its first iteration, a lazily grown buffer, a stray background thread's burst) counts.
    per_op = per_unit(counts, VARIANTS, ops)
    base = per_op["none"]
    added = {k: v - base for k, v in per_op.items()}
    variants = [v for v in VARIANTS if f"{v}@{ops}" in counts]
    per_op = {name: per_op[name] for name in variants}
    ratio = {
        "no shapes": added["gpuprof"] / added["torch.profiler"],
        "record_shapes": added["gpuprof shapes"] / added["torch.profiler shapes"],
    }
    return {
        "gpuprof_package": package,
        "instructions_per_op": per_op,
        "added_instructions_per_op": added,
        "ratio_gpuprof_to_torch_profiler": ratio,
        "wait_step_added_pct": 100.0 * added["gpuprof (wait step)"] / base,
    }


def show(label: str, r: dict) -> None:
    print(f"{label}: gpuprof from {r['gpuprof_package']}")
    print(f"  {'variant':24} {'instr/op':>10} {'added':>10}")
    for k, v in r["instructions_per_op"].items():
        print(f"  {k:24} {v:10.0f} {r['added_instructions_per_op'][k]:10.0f}")
    ratio = r["ratio_gpuprof_to_torch_profiler"]
    print(
        f"  gpuprof adds {ratio['no shapes']:.3f}x torch.profiler's instructions per op "
        f"({ratio['record_shapes']:.3f}x with record_shapes); a wait step adds "
        f"{r['wait_step_added_pct']:+.2f}% to an unprofiled op"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=5_000)
    p.add_argument("--before", help="a folder holding an earlier `gpuprof` package to compare with")
    p.add_argument("--json", help="write the figures here")
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated subset, in this order (none is always measured first)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.ops, args.variants.split(","))
        return
    import torch

    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ops": args.ops,
        "op": "Tensor.add_ on 1-element tensors",
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "tool": "valgrind --tool=callgrind",
    }
    if args.before:
        results["before"] = measure(args.ops, args.before)
        show("before", results["before"])
    results["after" if args.before else "current"] = measure(args.ops, None)
    show("after" if args.before else "current", results["after" if args.before else "current"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
