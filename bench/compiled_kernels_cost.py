"""What ``compiled_kernels=True`` costs: the first step's time (Dynamo and Inductor compiling the
forward and backward graphs) and the later steps' median, for a small model compiled with
Inductor's C++ backend, under ``gpuprof.profile`` with and without the opt-in.

    python bench/compiled_kernels_cost.py [--rounds 3] [--steps 20] [--out FILE.json]

Each (condition, round) runs in a fresh process with its own Inductor cache folder, conditions
alternating round by round:

* ``default``: the opt-in off, a cold cache (Inductor compiles and fills the cache);
* ``default_warm``: the opt-in off, the cache the ``default`` run of the same round filled (what a
  second run of the same script costs);
* ``opt_in``: ``compiled_kernels=True`` (kernel profiling and provenance on, caches off).

Figures go in docs/performance.md ("Compiled kernels (opt-in)").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONDITIONS = ("default", "default_warm", "opt_in")


def _child(opt_in: bool, steps: int) -> dict:
    import torch

    import gpuprof

    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.bn1 = torch.nn.BatchNorm2d(16)
            self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.bn2 = torch.nn.BatchNorm2d(16)
            self.norm = torch.nn.LayerNorm(256)
            self.head = torch.nn.Linear(256, 10)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)) + x)  # the residual
            y = torch.nn.functional.adaptive_avg_pool2d(y, 4).flatten(1)
            return self.head(torch.nn.functional.gelu(self.norm(y)))

    model = torch.compile(Block())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, target = torch.randn(8, 16, 16, 16), torch.randint(0, 10, (8,))
    times = []
    with gpuprof.profile(gpu=False, compiled_kernels=opt_in) as prof:
        for _ in range(steps + 1):
            started = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - started)
            prof.step()
    rows = prof.report().data.get("compiled", {}).get("compiled_kernels") or []
    return {
        "first_step_s": times[0],
        "step_median_ms": 1000 * statistics.median(times[1:]),
        "kernels": len(rows),
        "kernels_with_ops": sum(1 for r in rows if r.get("ops")),
    }


def _run(condition: str, cache: str, steps: int) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
    cmd = [sys.executable, __file__, "--child", condition, "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{condition}: the child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default="")
    p.add_argument("--child", choices=CONDITIONS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(_child(args.child == "opt_in", args.steps)))
        return
    runs: dict = {c: [] for c in CONDITIONS}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="gpuprof-inductor-") as cache:
            for condition in CONDITIONS:  # default fills the cache default_warm reads
                runs[condition].append(_run(condition, cache, args.steps))
    doc = {"rounds": args.rounds, "steps": args.steps, "conditions": {}}
    for condition, rows in runs.items():
        doc["conditions"][condition] = {
            "first_step_s_median": statistics.median(r["first_step_s"] for r in rows),
            "step_ms_median": statistics.median(r["step_median_ms"] for r in rows),
            "kernels": rows[-1]["kernels"],
            "kernels_with_ops": rows[-1]["kernels_with_ops"],
            "runs": rows,
        }
    print(f"{'condition':<14} {'first step (s)':>15} {'later steps (ms)':>17} {'kernels':>8} {'with ops':>9}")
    for condition, row in doc["conditions"].items():
        print(
            f"{condition:<14} {row['first_step_s_median']:>15.2f} {row['step_ms_median']:>17.3f} "
            f"{row['kernels']:>8} {row['kernels_with_ops']:>9}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
