"""What the module view costs a real training step, in wall-clock time, side by side in one run.

    python bench/modules_overhead.py [--steps 20] [--rounds 9] [--width 8] [--json out.json]

A small ResNet (a stem, two stages of two basic blocks, pooling, a classifier: 36 modules, 36 module
calls per step counting the loss module) trains on the CPU with SGD, one intra-op thread. Four ways
to run the same steps, each round in a new random order so that machine noise hits them alike:
unprofiled; gpuprof without the module view (``with_modules=False``, the default); gpuprof with it;
torch.profiler (CPU activity) with ``with_stack=True``, which is what it needs to record module
calls in eager mode. The figure is the median over rounds of the time per step inside the profiled
loop (the report's building after it is not counted), and each variant's cost over the unprofiled
step. bench/modules_callgrind.py counts instructions per module call instead, which load does not
move.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import statistics
import time

import torch
from torch import nn

import gpuprof


def tiny_resnet(width: int) -> nn.Module:
    class Block(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.downsample = None
            if stride != 1 or c_in != c_out:
                self.downsample = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
                )

        def forward(self, x):
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Sequential(Block(width, width, 1), Block(width, width, 1)),
        nn.Sequential(Block(width, 2 * width, 2), Block(2 * width, 2 * width, 1)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, 10),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tiny_resnet(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(args.batch, 3, 16, 16), torch.randint(0, 10, (args.batch,))
    module_calls = sum(1 for _ in model.modules()) + 4 + 1  # each block's ReLU twice; the loss

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    def timed(after_step=None) -> float:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
            if after_step is not None:
                after_step()
        return (time.perf_counter() - t0) / args.steps * 1e3

    def run(variant: str) -> float:
        if variant == "none":
            return timed()
        if variant == "torch.profiler with_stack":
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True
            ) as prof:
                return timed(prof.step)
        with gpuprof.profile(gpu=False, with_modules=variant.endswith("modules")) as prof:
            ms = timed(prof.step)
        if variant.endswith("modules"):
            assert len(prof.report().data["modules"]) > 30
        return ms

    variants = ["none", "gpuprof", "gpuprof modules", "torch.profiler with_stack"]
    for v in variants:  # warm every path
        run(v)
    per_step = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in random.sample(variants, len(variants)):
            per_step[v].append(run(v))
    median = {v: statistics.median(ms) for v, ms in per_step.items()}
    base = median["none"]
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "steps": args.steps,
        "rounds": args.rounds,
        "module_calls_per_step": module_calls,
        "median_ms_per_step": median,
        "added_pct": {v: 100.0 * (m - base) / base for v, m in median.items() if v != "none"},
        "module_view_added_us_per_module_call": 1000.0
        * (median["gpuprof modules"] - median["gpuprof"])
        / module_calls,
        "per_round_ms": per_step,
    }
    print(f"{'variant':28} {'ms/step':>9} {'added':>8}")
    for v in variants:
        added = "" if v == "none" else f"{out['added_pct'][v]:+7.1f}%"
        print(f"{v:28} {median[v]:9.3f} {added:>8}")
    print(
        f"the module view adds {out['module_view_added_us_per_module_call']:.1f} us per module call "
        f"({module_calls} per step) to gpuprof's recording"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
