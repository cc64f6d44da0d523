"""Per-step cost of the step journal, side by side in one run.

    python bench/journal_overhead.py [--steps 2000] [--rounds 9] [--ops 1] [--json out.json]

The same loop of near-empty steps (``--ops`` tiny torch ops each, then prof.step()) inside a recording
gpuprof session, with the journal off and on (``gpuprof.profile(journal=DIR)``, a folder on the
local disk), interleaved round by round in a new random order so machine noise hits both alike.
The figure is the median over rounds of ns per prof.step(), and the difference: what journaling one
step adds: the step's summary (the native drain of the step's events, its breakdown and operator
table, ``_core.StepSummarizer``) and one JSON line written and flushed. ``--ops 40`` is about a small
MLP's forward, backward and optimizer step. The span closes once per round (its report building
is outside the timed loop).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time

import torch

import gpuprof


def one_round(steps: int, journal, ops: int = 1) -> float:
    x, y = torch.ones(1), torch.ones(1)
    sched = gpuprof.schedule(wait=0, warmup=1, active=steps + 10, repeat=1)
    with gpuprof.profile(schedule=sched, gpu=False, journal=journal) as prof:
        x.add_(y)
        prof.step()  # the warmup step
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            for _ in range(ops):
                x.add_(y)
            prof.step()
        t1 = time.perf_counter_ns()
    return (t1 - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--ops", type=int, default=1, help="tiny torch ops per step")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        one_round(200, None)  # hooks loaded, first-call costs paid
        one_round(200, folder)
        off, on = [], []
        for _ in range(args.rounds):
            order = [("off", None), ("on", folder)]
            random.shuffle(order)
            for name, journal in order:
                (off if name == "off" else on).append(one_round(args.steps, journal, args.ops))
    result = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "steps": args.steps,
        "rounds": args.rounds,
        "ops_per_step": args.ops,
        "step_ns_journal_off": statistics.median(off),
        "step_ns_journal_on": statistics.median(on),
        "journal_ns_per_step": statistics.median(b - a for a, b in zip(off, on)),
    }
    for k, v in result.items():
        print(f"{k}: {v:,.0f}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
