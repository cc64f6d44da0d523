"""Step-time cost of profiling a real CNN training step on the GPU.

    python bench/gpu_overhead.py [--steps 30] [--rounds 5] [--batch 64] [--image-size 224]
                                 [--out results.json]

A ResNet-18-shaped CNN (written here, no torchvision) trains on a fixed random batch with SGD
(momentum): real forward, backward and optimizer step. Five conditions, interleaved in one run so
that clock boosts, thermals and allocator state hit them alike:

- ``none``: no profiler;
- ``gpuprof``: ``gpuprof.profile`` with a schedule that records every measured step
  (``schedule(wait=0, warmup=W, active=N, repeat=1)``: GPU collection on, CUPTI activities included);
- ``torch.profiler``: ``torch.profiler.profile(activities=[CPU, CUDA])`` with the same schedule;
- ``gpuprof+memory``: ``gpuprof.profile(profile_memory=True)``, every allocation of the caching
  allocator recorded too (its own line; the targets compare ``gpuprof`` with ``torch.profiler``);
- ``gpuprof-nvml``: ``gpuprof`` without its NVML sampler (``collect.gpu.NVML_INTERVAL_MS = 0``: no
  utilization, power or energy): on an H200 one NVML call took milliseconds, and gpuprof's steps
  were longer than torch.profiler's by more than its recorded work; this line says how much of that
  the sampler's calls, made beside the training loop, cost it.

Each round runs every condition once, in an order rotated round by round: W warm-up steps (inside
the profiler, as its warmup phase), then N measured steps. A step is timed from before the forward
pass to after ``torch.cuda.synchronize()`` following the optimizer step and the profiler's
``step()`` call, so device time and the profiler's per-step work are both in it. The profilers'
end-of-span work (gpuprof: flush, drain and building the Report; torch.profiler: stopping the trace
and ``key_averages()``) happens after the last measured step and is timed separately: torch.profiler
pays most of its cost there.

Reported per condition: median, p10 and p90 of the step time over all measured steps of all rounds;
each profiler's overhead as % of the unprofiled median; the ratio gpuprof / torch.profiler of the
overheads, against the targets (gpuprof at most half of torch.profiler's overhead, and under 3% of
the step). ``--device cpu`` runs the same code on the CPU as a smoke test (small default images,
torch.profiler with CPU activities only): its figures are not the GPU result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

# Stock torch.profiler (Kineto) keeps CUPTI's one subscriber from its first use until the process
# exits, so every gpuprof round after the first torch.profiler round would run host-only. With
# TEARDOWN_CUPTI=1, read by Kineto, it unsubscribes (cuptiFinalize) at the first CUDA runtime call
# after its trace. Set before torch is imported; its cost falls outside the measured steps.
os.environ.setdefault("TEARDOWN_CUPTI", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gpuprof  # noqa: E402

CONDITIONS = ("none", "gpuprof", "torch.profiler", "gpuprof+memory", "gpuprof-nvml")
TARGET_RATIO = 0.5  # gpuprof's overhead at most half of torch.profiler's
TARGET_OVERHEAD_PCT = 3.0  # and under 3% of the unprofiled step


# ---- the model: ResNet-18 layout (BasicBlock x [2, 2, 2, 2]) -------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---- one training step and its timing ---------------------------------------------------------------
class Trainer:
    def __init__(self, device: torch.device, batch: int, image_size: int) -> None:
        torch.manual_seed(0)
        self.device = device
        self.model = ResNet18().to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(batch, 3, image_size, image_size, device=device)
        self.y = torch.randint(0, 1000, (batch,), device=device)

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def run_steps(trainer: Trainer, warmup: int, steps: int, prof_step) -> list[float]:
    """warmup + steps training steps; returns the measured steps' times (s). `prof_step` is called
    after every step but the last (the profiler's step boundary; the last one ends the span and is
    timed by the caller as end-of-span work)."""
    times = []
    total = warmup + steps
    for i in range(total):
        trainer.sync()
        t0 = time.perf_counter()
        trainer.step()
        if prof_step is not None and i < total - 1:
            prof_step()
        trainer.sync()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    return times


def cond_none(trainer: Trainer, warmup: int, steps: int) -> dict:
    return {"step_s": run_steps(trainer, warmup, steps, None), "end_of_span_s": 0.0}


def settle_cupti(trainer: Trainer) -> None:
    """Lets a torch.profiler round that just ended give CUPTI back before gpuprof subscribes (as
    the profile starts): Kineto's teardown (TEARDOWN_CUPTI above) is prepared on a thread of its
    own and then runs inside the next CUDA runtime or driver call."""
    if trainer.device.type != "cuda":
        return
    for _ in range(10):
        trainer.sync()  # cudaDeviceSynchronize: a runtime call
        time.sleep(0.01)


def cond_gpuprof(
    trainer: Trainer, warmup: int, steps: int, retry: bool = True, profile_memory: bool = False
) -> dict:
    settle_cupti(trainer)
    sched = gpuprof.schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    with gpuprof.profile(schedule=sched, profile_memory=profile_memory) as prof:
        times = run_steps(trainer, warmup, steps, prof.step)
        t0 = time.perf_counter()
        prof.step()  # the last active step ends: flush CUPTI, drain, build the Report
    report = prof.report()
    end = time.perf_counter() - t0
    md = report.to_dict()["metadata"]
    if retry and "another CUDA profiler" in md.get("gpu_collection", ""):
        # Kineto's teardown had not run yet: once more, after it has had its runtime calls.
        return cond_gpuprof(trainer, warmup, steps, retry=False, profile_memory=profile_memory)
    return {
        "step_s": times,
        "end_of_span_s": end,
        "gpu_collection": md.get("gpu_collection", ""),
        "dropped": int(report.counts["dropped"]),
        "events": int(report.counts["events"]),
        "steps_recorded": int(report.counts["steps"]),
    }


def cond_torch_profiler(trainer: Trainer, warmup: int, steps: int) -> dict:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if trainer.device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sched = torch.profiler.schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    with torch.profiler.profile(activities=acts, schedule=sched) as prof:
        times = run_steps(trainer, warmup, steps, prof.step)
        t0 = time.perf_counter()
        prof.step()  # the last active step ends: the trace stops and is processed
    averages = prof.key_averages()
    end = time.perf_counter() - t0
    return {"step_s": times, "end_of_span_s": end, "ops": len(averages)}


def cond_gpuprof_memory(trainer: Trainer, warmup: int, steps: int) -> dict:
    # profile_memory=True: every allocation and free of the caching allocator recorded as well.
    return cond_gpuprof(trainer, warmup, steps, profile_memory=True)


def cond_gpuprof_no_nvml(trainer: Trainer, warmup: int, steps: int) -> dict:
    from gpuprof.collect import gpu

    before, gpu.NVML_INTERVAL_MS = gpu.NVML_INTERVAL_MS, 0
    try:
        return cond_gpuprof(trainer, warmup, steps)
    finally:
        gpu.NVML_INTERVAL_MS = before


RUNNERS = {
    "none": cond_none,
    "gpuprof": cond_gpuprof,
    "torch.profiler": cond_torch_profiler,
    "gpuprof+memory": cond_gpuprof_memory,
    "gpuprof-nvml": cond_gpuprof_no_nvml,
}


# ---- statistics -----------------------------------------------------------------------------------
def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]); one value is its own quantile."""
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(runs: dict[str, list[dict]]) -> dict:
    out: dict = {}
    for name, rounds in runs.items():
        steps = [t for r in rounds for t in r["step_s"]]
        ends = [r["end_of_span_s"] for r in rounds]
        row = {
            "median_ms": 1e3 * statistics.median(steps),
            "p10_ms": 1e3 * quantile(steps, 0.1),
            "p90_ms": 1e3 * quantile(steps, 0.9),
            "steps": len(steps),
            "round_median_ms": [1e3 * statistics.median(r["step_s"]) for r in rounds],
            "end_of_span_ms": [1e3 * e for e in ends],
            "end_of_span_median_ms": 1e3 * statistics.median(ends),
        }
        for key in ("gpu_collection", "dropped", "events", "steps_recorded", "ops"):
            if key in rounds[0]:
                row[key] = [r[key] for r in rounds]
        out[name] = row
    base = out["none"]["median_ms"]
    for name in CONDITIONS[1:]:
        row = out[name]
        row["overhead_pct"] = 100.0 * (row["median_ms"] - base) / base
        # Paired by round: each round's profiled median against that round's unprofiled median.
        row["round_overhead_pct"] = [
            100.0 * (p - b) / b for p, b in zip(row["round_median_ms"], out["none"]["round_median_ms"])
        ]
    return out


def verdict(summary: dict) -> dict:
    g = summary["gpuprof"]["overhead_pct"]
    t = summary["torch.profiler"]["overhead_pct"]
    ratio = g / t if t > 0 else None  # torch.profiler within noise of none: no ratio to speak of
    return {
        "ratio_gpuprof_to_torch": ratio,
        "meets_half_of_torch": (ratio is not None and ratio <= TARGET_RATIO) or (t > 0 and g <= 0),
        "meets_under_3pct": g < TARGET_OVERHEAD_PCT,
    }


# ---- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a smoke run)")
    p.add_argument("--steps", type=int, default=30, help="measured steps per condition per round")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up steps per condition per round (default 10 on cuda, 1 on cpu)",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=None, help="default 224 on cuda, 64 on cpu")
    p.add_argument("--out", help="write the figures here as JSON")
    args = p.parse_args(argv)
    for name in ("steps", "rounds", "batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_overhead: no CUDA device visible to torch (torch.cuda.is_available() is False); "
            "run with --device cpu for a smoke run",
            file=sys.stderr,
        )
        return 2
    warmup = args.warmup if args.warmup is not None else (10 if device.type == "cuda" else 1)
    image = args.image_size or (224 if device.type == "cuda" else 64)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))

    trainer = Trainer(device, args.batch, image)
    # Untimed: first-call costs (cuDNN autotuning, allocator growth, lazy module loading, first
    # CUPTI use) for every condition before any round counts.
    for name in CONDITIONS:
        RUNNERS[name](trainer, 1, 1)

    runs: dict[str, list[dict]] = {name: [] for name in CONDITIONS}
    for r in range(args.rounds):
        k = r % len(CONDITIONS)
        order = CONDITIONS[k:] + CONDITIONS[:k]  # rotated: none first, then second, ...
        for name in order:
            runs[name].append(RUNNERS[name](trainer, warmup, args.steps))
    summary = summarize(runs)
    result = verdict(summary)

    dev_name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else (platform.processor() or platform.machine())
    )
    print(
        f"ResNet-18 layout, batch {args.batch}, 3x{image}x{image}, SGD; {args.rounds} interleaved rounds x "
        f"{args.steps} measured steps (+{warmup} warm-up) per condition; {dev_name}, "
        f"torch {torch.__version__}, "
        f"gpuprof {gpuprof.__version__}"
    )
    if device.type != "cuda":
        print("SMOKE RUN on the CPU (torch.profiler with CPU activities only): not the GPU result")
    print(
        f"{'condition':16} {'median ms':>10} {'p10 ms':>9} {'p90 ms':>9} {'overhead':>9} "
        f"{'end of span ms':>15}"
    )
    for name in CONDITIONS:
        row = summary[name]
        ov = f"{row['overhead_pct']:+8.2f}%" if "overhead_pct" in row else f"{'':>9}"
        print(
            f"{name:16} {row['median_ms']:10.2f} {row['p10_ms']:9.2f} {row['p90_ms']:9.2f} {ov} "
            f"{row['end_of_span_median_ms']:15.1f}"
        )
    ratio = result["ratio_gpuprof_to_torch"]
    g = summary["gpuprof"]
    print(
        f"gpuprof overhead / torch.profiler overhead: {'n/a' if ratio is None else f'{ratio:.2f}'} "
        f"(target <= {TARGET_RATIO}: {'met' if result['meets_half_of_torch'] else 'NOT met'}); "
        f"gpuprof overhead {g['overhead_pct']:+.2f}% of the step (target < {TARGET_OVERHEAD_PCT}%: "
        f"{'met' if result['meets_under_3pct'] else 'NOT met'})"
    )
    collection = g.get("gpu_collection", [])
    gpu_on_all = bool(collection) and all(str(c).startswith("on") for c in collection)
    result["gpuprof_gpu_collection_on_all_rounds"] = gpu_on_all
    print(
        f"gpuprof GPU collection: {collection[-1] if collection else '?'}; on in "
        f"{sum(str(c).startswith('on') for c in collection)}/{len(collection)} rounds; "
        f"dropped records per round: {g.get('dropped')}"
    )
    if device.type == "cuda" and not gpu_on_all:
        print(
            "WARNING: gpuprof's GPU collection was off in some rounds (see gpu_collection in the "
            "JSON), so those compare host-only gpuprof with torch.profiler's CPU+CUDA tracing",
            file=sys.stderr,
        )

    if args.out:
        doc = {
            "benchmark": "gpu_overhead",
            "smoke": device.type != "cuda",
            "device": str(device),
            "device_name": dev_name,
            "torch": torch.__version__,
            "gpuprof": gpuprof.__version__,
            "python": platform.python_version(),
            "config": {
                "batch": args.batch,
                "image_size": image,
                "steps": args.steps,
                "warmup": warmup,
                "rounds": args.rounds,
                "model": "ResNet-18 layout",
                "optimizer": "SGD momentum 0.9",
            },
            "targets": {"ratio_max": TARGET_RATIO, "overhead_pct_max": TARGET_OVERHEAD_PCT},
            "conditions": summary,
            **result,
        }
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
