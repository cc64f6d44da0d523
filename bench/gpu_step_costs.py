"""What gpuprof costs the training thread on a GPU, piece by piece.

    python bench/gpu_step_costs.py [--device cuda] [--rounds 3] [--out results.json]

- ``prof_step_us``: one ``prof.step()`` call (the step boundary: the allocator's statistics, the
  host's RSS, the step's record, an energy reading asked of NVML's thread), GPU collection on and
  host-only, over a loop whose steps each run 50 small kernels and synchronize.
- ``allocator_stats_us``: one ``torch.cuda.memory_stats()`` (flattened in Python into some 200 keys)
  against one ``torch.cuda.memory_stats_as_nested_dict()`` (what the boundary reads).
- ``energy_read_us``: NVML's total-energy counter read on the calling thread
  (``_core.gpu_read_energy``, what a span's first step starts with) against asked of the sampler's
  thread (``_core.gpu_sample_energy``, what every other boundary does).
- ``op_host_us``: the host time of one small CUDA operator (``x.add_(1)``: an operator, a launch, a
  kernel) with no profiler, gpuprof host-only, gpuprof, and torch.profiler, interleaved over rounds.

``--device cpu`` is a smoke run of the same code (no CUDA: the allocator and NVML figures are null,
and the rest answer nothing about a GPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time


def _stats(us: list) -> dict:
    us = sorted(us)
    return {"median": statistics.median(us), "p90": us[int(0.9 * (len(us) - 1))], "max": us[-1], "n": len(us)}


def _timed(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def prof_step_costs(torch, gpuprof, device: str, steps: int) -> dict:
    x = torch.zeros(1 << 20, device=device)

    def work():
        for _ in range(50):
            x.add_(1)
        if device == "cuda":
            torch.cuda.synchronize()

    out = {}
    for name, gpu in (("gpu_collection", True), ("host_only", False)):
        calls = []
        with gpuprof.profile(gpu=gpu) as prof:
            for _ in range(steps):
                work()
                t = time.perf_counter()
                prof.step()
                calls.append((time.perf_counter() - t) * 1e6)
        out[name] = _stats(calls)
    return out


def op_host_costs(torch, gpuprof, device: str, rounds: int, n: int) -> dict:
    x = torch.zeros(1, device=device)

    def loop() -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        us = _timed(lambda: x.add_(1), n)
        if device == "cuda":
            torch.cuda.synchronize()
        return us

    def torch_profiler():
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return torch.profiler.profile(activities=acts)

    conditions = {
        "none": None,
        "gpuprof_host_only": lambda: gpuprof.profile(gpu=False),
        "gpuprof": lambda: gpuprof.profile(),
        "torch.profiler": torch_profiler,
    }
    out: dict = {name: [] for name in conditions}
    for r in range(rounds):
        names = list(conditions)
        names = names[r % len(names) :] + names[: r % len(names)]  # rotated round by round
        for name in names:
            make = conditions[name]
            if make is None:
                loop()  # warm-up, as inside the profilers
                out[name].append(loop())
                continue
            with make() as prof:
                loop()
                out[name].append(loop())
                prof.step()  # one step: the timed operators
            if name == "torch.profiler" and device == "cuda":
                for _ in range(10):  # let Kineto's deferred CUPTI teardown run (TEARDOWN_CUPTI=1)
                    torch.cuda.synchronize()
                    time.sleep(0.01)
    return {name: {"rounds_us": us, "median_us": statistics.median(us)} for name, us in out.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40, help="prof.step() calls timed per condition")
    p.add_argument("--ops", type=int, default=3000, help="operators timed per condition and round")
    p.add_argument("--out", help="write the figures here as JSON")
    args = p.parse_args()

    import os

    os.environ.setdefault("TEARDOWN_CUPTI", "1")  # torch.profiler gives CUPTI back (docs/gpu.md)
    import torch

    import gpuprof
    from gpuprof._native import _core

    smoke = args.device != "cuda"
    if not smoke and not torch.cuda.is_available():
        print("no CUDA device visible to torch: use a GPU, or --device cpu for a smoke run", file=sys.stderr)
        return 2
    doc: dict = {
        "benchmark": "gpu_step_costs",
        "smoke": smoke,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device_name": torch.cuda.get_device_name(0) if not smoke else "cpu",
        "torch": torch.__version__,
        "gpuprof": gpuprof.__version__,
    }
    doc["prof_step_us"] = prof_step_costs(torch, gpuprof, args.device, args.steps)
    if not smoke:
        doc["allocator_stats_us"] = {
            "memory_stats": _timed(lambda: torch.cuda.memory_stats(0), 200),
            "memory_stats_as_nested_dict": _timed(lambda: torch.cuda.memory_stats_as_nested_dict(0), 200),
        }
        reads: dict = {}
        with gpuprof.profile() as prof:
            for name in ("gpu_read_energy", "gpu_sample_energy"):
                fn = getattr(_core, name)
                reads[name] = _stats([_timed(fn, 1) for _ in range(20)])
                time.sleep(0.05)  # the sampler's thread serves what was asked
            prof.step()
        doc["energy_read_us"] = reads
    else:
        doc["allocator_stats_us"] = doc["energy_read_us"] = None
    doc["op_host_us"] = op_host_costs(torch, gpuprof, args.device, args.rounds, args.ops)

    if smoke:
        print("SMOKE RUN on the CPU: these figures say nothing about a GPU")
    print(f"{doc['device_name']}, torch {doc['torch']}, gpuprof {doc['gpuprof']}")
    for name, s in doc["prof_step_us"].items():
        print(f"prof.step() {name:15} median {s['median']:9.1f} us  p90 {s['p90']:9.1f}  max {s['max']:9.1f}")
    if doc["allocator_stats_us"]:
        for name, us in doc["allocator_stats_us"].items():
            print(f"torch.cuda.{name}(0): {us:.1f} us")
        for name, s in doc["energy_read_us"].items():
            print(f"_core.{name}(): median {s['median']:.1f} us, max {s['max']:.1f} us")
    for name, row in doc["op_host_us"].items():
        rounds = ", ".join(f"{u:.2f}" for u in row["rounds_us"])
        print(f"x.add_(1) {name:18} median {row['median_us']:6.2f} us per operator (rounds: {rounds})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
