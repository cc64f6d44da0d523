"""Does a finished gpuprof session leave the training loop slower? Step time after a session against
a process never profiled (review item 9 in docs/gpu.md: CUPTI is not detached after a session).

    python bench/after_session.py [--rounds 4] [--steps 40] [--device cuda] [--out results.json]

gpuprof keeps its CUPTI subscription after a session ends (no ``cuptiFinalize``: calling it safely
needs a point where no CUDA call is in flight on any thread). Whether a lingering subscription costs
anything can only be measured: each measurement is a fresh process (a session, once it has run,
cannot be undone in a process) training the ResNet-18 layout of bench/gpu_overhead.py:

- ``never``: warm-up steps, then S steps unprofiled, then the measured steps;
- ``after``: the same warm-up, then S steps inside ``gpuprof.profile`` (GPU collection on: every
  step recorded), the session ended and its report built, then the measured steps.

glibc's allocator has two regimes for a loop that frees a step's large temporaries at the top of its
heap: it keeps that memory, or gives it back at every step and takes page faults to get it again
(on this project's 2-core CPU: 0 or ~4,600 minor faults per step of the CPU smoke model, 10-15%
slower). Which one a process lands in depends on its heap's layout: processes running the same
command start in either, whether gpuprof runs or not (docs/performance.md, "After a session"). The
children therefore run with glibc's thresholds fixed (``MALLOC_MMAP_THRESHOLD_`` 32 MiB,
``MALLOC_TRIM_THRESHOLD_`` 256 MiB: large blocks from the heap, never given back) so that the
comparison is of the session, not of the heap; ``--glibc-default`` leaves them, and each
condition's minor page faults per step are reported either way.

Rounds run both conditions in alternating order. Reported: each condition's median step time, each
round's median, the difference in %, and ``measurable``: true when every round's ``after`` median
lies above every round's ``never`` median. Processes differ from one another (placement, clocks,
allocator), so the rounds are what is compared: when a session changes nothing, all ``after``
rounds land above all ``never`` rounds by chance once in C(2R, R) (``chance_if_no_effect``: 1 in 70
with the default 4 rounds). Detaching CUPTI after a session is worth its risk only where this says
true. ``--device cpu`` is a smoke run of the same code (no CUPTI: its figures answer nothing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

CONDITIONS = ("never", "after")
SETTINGS = ("rounds", "steps", "warmup", "session_steps", "batch", "glibc_default")


def child(args) -> None:
    """One measurement, in this process: prints one JSON line."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    from gpu_overhead import Trainer, run_steps

    import gpuprof

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)
    trainer = Trainer(device, args.batch, args.image_size or (224 if device.type == "cuda" else 32))
    run_steps(trainer, 0, args.warmup, None)
    collection = ""
    if args.child == "after":
        sched = gpuprof.schedule(wait=0, warmup=0, active=args.session_steps, repeat=1)
        with gpuprof.profile(schedule=sched) as prof:
            run_steps(trainer, 0, args.session_steps, prof.step)
            prof.step()
        collection = prof.report().to_dict()["metadata"].get("gpu_collection", "")
    else:
        run_steps(trainer, 0, args.session_steps, None)
    trainer.sync()
    time.sleep(0.2)  # anything a session's end left running in the background has finished
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = run_steps(trainer, 0, args.steps, None)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / args.steps
    doc = {"condition": args.child, "step_s": times, "faults_per_step": faults, "gpu_collection": collection}
    print(json.dumps(doc), flush=True)


def measure(args, condition: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", condition, "--device", args.device]
    for name in ("steps", "warmup", "session_steps", "batch", "image_size"):
        value = getattr(args, name)
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    if not args.glibc_default:
        env.update(MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(256 << 20))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"the {condition} measurement failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke run)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=40, help="measured steps per process")
    p.add_argument("--warmup", type=int, default=10, help="steps before the session (or its stand-in)")
    p.add_argument("--session-steps", type=int, default=6, help="steps the session records")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=None, help="default 224 on cuda, 32 on cpu")
    p.add_argument(
        "--glibc-default", action="store_true", help="leave glibc's allocator thresholds as they are"
    )
    p.add_argument("--out", help="write the figures here as JSON")
    p.add_argument("--child", choices=CONDITIONS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    for name in ("rounds", "steps", "session_steps", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "after_session: no CUDA device visible to torch (torch.cuda.is_available() is False); "
                "run with --device cpu for a smoke run",
                file=sys.stderr,
            )
            return 2

    runs: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    for r in range(args.rounds):
        for condition in CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]:
            runs[condition].append(measure(args, condition))
    summary = {}
    for condition, rounds in runs.items():
        steps = [t for m in rounds for t in m["step_s"]]
        summary[condition] = {
            "median_ms": 1e3 * statistics.median(steps),
            "round_median_ms": [1e3 * statistics.median(m["step_s"]) for m in rounds],
            "round_faults_per_step": [m["faults_per_step"] for m in rounds],
        }
    never, after = summary["never"], summary["after"]
    difference = 100 * (after["median_ms"] - never["median_ms"]) / never["median_ms"]
    measurable = min(after["round_median_ms"]) > max(never["round_median_ms"])
    chance = 1 / math.comb(2 * args.rounds, args.rounds)
    collection = [m["gpu_collection"] for m in runs["after"]]
    rounds_text = ", ".join(
        f"{a:.2f}/{n:.2f}" for a, n in zip(after["round_median_ms"], never["round_median_ms"])
    )
    print(
        f"after a gpuprof session: median step {after['median_ms']:.3f} ms, never profiled "
        f"{never['median_ms']:.3f} ms ({difference:+.2f}%; per round after/never: {rounds_text} ms): "
        f"{'measurable' if measurable else 'not measurable'} (chance if no effect: {chance:.3f}); "
        f"minor page faults per step after/never: {after['round_faults_per_step']} / "
        f"{never['round_faults_per_step']}"
    )
    if args.device == "cuda" and not all(str(c).startswith("on") for c in collection):
        print(f"WARNING: GPU collection was not on in every session: {collection}", file=sys.stderr)
    doc = {
        "tool": "bench/after_session.py",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "device": args.device,
        "settings": {k: getattr(args, k) for k in SETTINGS},
        "summary": summary,
        "difference_pct": difference,
        "measurable": measurable,
        "chance_if_no_effect": chance,
        "gpu_collection": collection,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
