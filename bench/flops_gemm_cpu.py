"""A GEMM-only loop on this CPU: the fraction of the estimated peak it reaches, as gpuprof reports it.

    python bench/flops_gemm_cpu.py [--n 1024] [--steps 5] [--reps 4] [--json out.json]

Each step is `reps` products torch.mm of two [n, n] fp32 matrices (2 n^3 FLOPs each) and nothing
else, with torch's threads set to the CPUs this process may use. gpuprof profiles the steps and
reports their FLOPs, the achieved TFLOP/s and HFU against its estimate of this CPU's fp32 peak
(gpuprof/analysis/peaks.py: flop per cycle from the ISA x clock x cores); a step is forward-only
matrix work, so MFU = HFU. The same loop is also timed without gpuprof, so the achieved rate can be
checked against a count made by hand (2 n^3 x reps / the step's time). Figures go to
docs/performance.md; nothing is asserted (timings on a shared machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    import torch

    import gpuprof
    from gpuprof.analysis import peaks

    cpus = len(os.sched_getaffinity(0))
    torch.set_num_threads(cpus)
    a = torch.randn(args.n, args.n)
    b = torch.randn(args.n, args.n)

    def step():
        for _ in range(args.reps):
            torch.mm(a, b)

    for _ in range(3):  # warm up (the thread pool, the allocator)
        step()
    plain = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t0)
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(args.steps):
            step()
            prof.step()
    report = prof.report().to_dict()
    f = report["flops"]
    flops_per_step = 2 * args.n**3 * args.reps
    by_hand = flops_per_step / statistics.median(plain) / 1e12
    cpu = peaks.cpu_peak()
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": cpus,
        "n": args.n,
        "reps_per_step": args.reps,
        "steps": args.steps,
        "flops_per_step_by_hand": flops_per_step,
        "per_step_flops": f["per_step_flops"],
        "tflops_per_s": f["tflops_per_s"],
        "tflops_per_s_without_gpuprof": by_hand,
        "peak_tflops": f["peak_tflops"],
        "peak_source": f["peak_source"],
        "mfu_pct": f["mfu_pct"],
        "hfu_pct": f["hfu_pct"],
        "cpu_isa": cpu.isa,
        "cpu_clock_ghz": cpu.clock_ghz,
        "cpu_clock_source": cpu.clock_source,
        "memory_bandwidth_gbps": f["memory_bandwidth_gbps"],
        "roofline": report["roofline"][:1],
    }
    print(
        f"{args.reps} x mm [{args.n}, {args.n}] fp32 per step on {cpus} threads: gpuprof counts "
        f"{f['per_step_flops']:,} FLOPs per step (by hand {flops_per_step:,}), "
        f"{f['tflops_per_s'] * 1e3:,.1f} GFLOP/s achieved ({by_hand * 1e3:,.1f} without gpuprof), "
        f"{f['mfu_pct']:.1f}% of the estimated peak {f['peak_tflops'] * 1e3:,.1f} GFLOP/s"
    )
    print(f"peak: {f['peak_source']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
