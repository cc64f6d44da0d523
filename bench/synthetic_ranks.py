"""A synthetic folder of per-rank Kineto traces of one data-parallel job, for `gpuprof analyze DIR` at
any number of ranks (bench/ranks10k.py runs it at 10,000; tests/python/report/test_many_ranks.py at
200).

Each rank's trace is what torch.profiler writes for a small DDP step loop on one GPU: `ProfilerStep#N`
ranges on the main thread holding a host-to-device copy, forward operators (`aten::linear` over
`aten::addmm`, each launching a GEMM through `cudaLaunchKernel`), backward operators on the autograd
thread, gradient all-reduces (`record_param_comms` with torch's collective arguments, an
`nccl:all_reduce` range and the NCCL kernel on its own stream) and the optimizer step; kernels carry
their device, stream and correlation id; `distributedInfo` names the rank and the world size.

The timing is that of a synchronous job. Every rank's host work of a step is its own (a seeded
per-rank jitter of a few per cent); `--slow RANK` makes that rank's forward and backward host work
`--slow-factor` times longer. Each bucket's all-reduce ends on every rank at the same moment: the
last rank's arrival plus the transfer, so the other ranks show the difference as a longer NCCL
kernel (waiting), and every rank's next step starts together. `expected(...)` gives, without reading
the files, what the cross-rank report must find: the ranks, the step count and the slow rank.

    python bench/synthetic_ranks.py OUT --ranks 10000 [--steps 5] [--layers 8] [--buckets 4]
                                        [--slow 7] [--slow-factor 1.5] [--plain]

Files are gzip (`rank<N>.pt.trace.json.gz`, about 9 KB each at the defaults); `--plain` writes
`.json`. Nothing here imports torch or gpuprof.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from pathlib import Path

T0_US = 1_700_000_000_000_000.0
COPY_US = 400.0  # the batch's host-to-device copy
FWD_HOST_US = 600.0  # one forward operator's host time (aten::linear), before the slow factor
BWD_HOST_US = 900.0  # one backward operator's host time
FWD_KERNEL_US = 450.0
BWD_KERNEL_US = 700.0
TRANSFER_US = 3000.0  # one bucket's all-reduce: the data moved once every rank has arrived
OPT_HOST_US = 1500.0
GAP_US = 200.0  # between steps
JITTER = 0.03  # a rank's host time varies by up to +-3 % per step


def host_factors(ranks: int, steps: int, slow: int, slow_factor: float, seed: int = 0) -> list[list[float]]:
    """Per rank and step, the factor on its forward and backward host time."""
    out = []
    for r in range(ranks):
        rng = random.Random(seed * 1_000_003 + r)
        base = slow_factor if r == slow else 1.0
        out.append([base * (1.0 + rng.uniform(-JITTER, JITTER)) for _ in range(steps)])
    return out


def _bwd_part(layers: int, buckets: int, b: int) -> int:
    """The backward operators before bucket b's all-reduce is launched (buckets split the layers)."""
    return (b + 1) * layers // buckets


class _Writer:
    """One rank's events, appended in time order."""

    def __init__(self, rank: int):
        self.pid = 10_000 + rank
        self.main, self.bwd = self.pid, self.pid + 1
        self.events: list[dict] = []
        self.corr = 1000
        self.ext = 1

    def x(self, cat: str, name: str, tid, ts: float, dur: float, **args) -> None:
        args = {"External id": self.ext, **args}
        self.ext += 1
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": round(ts, 3),
                "dur": round(dur, 3),
                "args": args,
            }
        )

    def launch(
        self,
        tid,
        ts: float,
        kernel: str,
        k_start: float,
        k_dur: float,
        stream: int,
        runtime: str = "cudaLaunchKernel",
    ) -> None:
        self.corr += 1
        self.x("cuda_runtime", runtime, tid, ts, 5.0, correlation=self.corr)
        cat = "gpu_memcpy" if runtime == "cudaMemcpyAsync" else "kernel"
        extra = (
            {"grid": [108, 1, 1], "block": [256, 1, 1], "registers per thread": 64, "shared memory": 16384}
            if cat == "kernel"
            else {"bytes": 4 << 20}
        )
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": 0,
                "tid": stream,
                "ts": round(k_start, 3),
                "dur": round(k_dur, 3),
                "args": {"device": 0, "stream": stream, "correlation": self.corr, **extra},
            }
        )


def _arrival_us(f: float, layers: int, buckets: int, b: int) -> float:
    """From its step's start, when a rank whose host factor is f launches bucket b's all-reduce."""
    return (
        5.0
        + COPY_US
        + 5.0
        + layers * (FWD_HOST_US * f + 2.0)
        + _bwd_part(layers, buckets, b) * (BWD_HOST_US * f + 2.0)
        + b * 32.0
    )


def rank_trace(
    rank: int,
    world: int,
    *,
    steps: int,
    layers: int,
    buckets: int,
    factors: list[float],
    slowest: list[float],
) -> dict:
    """The trace dict of one rank: its host `factors` per step, and the slowest rank's (which
    decides when every all-reduce ends)."""
    w = _Writer(rank)
    start = T0_US
    group = json.dumps(list(range(world))) if world <= 64 else None  # torch lists small groups only
    for s in range(steps):
        f = factors[s]
        step_len = _step_len_us(slowest[s], layers, buckets)
        t = start + 5.0
        w.x("user_annotation", f"ProfilerStep#{s + 1}", w.main, start, step_len)
        w.x("cpu_op", "aten::copy_", w.main, t, COPY_US)
        w.launch(
            w.main, t + 10.0, "Memcpy HtoD (Pageable -> Device)", t + 15.0, COPY_US, 7, "cudaMemcpyAsync"
        )
        t += COPY_US + 5.0
        gpu = t
        for _layer in range(layers):
            host = FWD_HOST_US * f
            w.x("cpu_op", "aten::linear", w.main, t, host)
            w.x("cpu_op", "aten::addmm", w.main, t + 2.0, host - 4.0)
            gpu = max(gpu, t + host - 10.0)
            w.launch(w.main, t + host - 12.0, "ampere_sgemm_128x64_tn", gpu, FWD_KERNEL_US, 7)
            gpu += FWD_KERNEL_US
            t += host + 2.0
        # Backward on the autograd thread; bucket b's all-reduce ends when the slowest rank's
        # backward reaches it, plus the transfer.
        for b in range(buckets):
            lo, hi = _bwd_part(layers, buckets, b - 1) if b else 0, _bwd_part(layers, buckets, b)
            for _layer in range(lo, hi):
                host = BWD_HOST_US * f
                w.x("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", w.bwd, t, host)
                gpu = max(gpu, t + host - 10.0)
                w.launch(w.bwd, t + host - 12.0, "ampere_sgemm_64x64_nn", gpu, BWD_KERNEL_US, 7)
                gpu += BWD_KERNEL_US
                t += host + 2.0
            args = {
                "Collective name": "allreduce",
                "Process Group Name": "0",
                "Process Group Description": "default_pg",
                "Group size": world,
                "In msg nelems": 1 << 20,
                "Out msg nelems": 1 << 20,
                "dtype": "Float",
            }
            if group is not None:
                args["Process Group Ranks"] = group
            w.x("cpu_op", "record_param_comms", w.bwd, t, 30.0, **args)
            w.x("user_annotation", "nccl:all_reduce", w.bwd, t + 2.0, 25.0)
            arrive = max(t + 20.0, gpu)
            last = start + _arrival_us(slowest[s], layers, buckets, b) + 20.0  # the slowest rank's
            ends = max(last, arrive) + TRANSFER_US
            w.launch(w.bwd, t + 18.0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrive, ends - arrive, 20)
            t += 32.0
            gpu = max(gpu, ends) if b == buckets - 1 else gpu
        t = max(t, gpu)
        w.x("user_annotation", "Optimizer.step#SGD.step", w.main, t, OPT_HOST_US)
        for i in range(4):
            w.x("cpu_op", "aten::_foreach_add_", w.main, t + 5.0 + i * 35.0, 30.0)
            w.launch(w.main, t + 10.0 + i * 35.0, "multi_tensor_apply_kernel", t + 20.0 + i * 35.0, 25.0, 7)
        start += step_len + GAP_US
    w.events.append({"ph": "M", "name": "process_name", "pid": w.pid, "args": {"name": f"rank {rank}"}})
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA A100-SXM4-80GB",
                "totalGlobalMem": 85899345920,
                "computeMajor": 8,
                "computeMinor": 0,
                "numSms": 108,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerMultiprocessor": 65536,
                "sharedMemPerMultiprocessor": 167936,
                "warpSize": 32,
                "maxThreadsPerBlock": 1024,
            }
        ],
        "traceEvents": w.events,
        "displayTimeUnit": "ms",
    }


def _step_len_us(slowest: float, layers: int, buckets: int) -> float:
    """Every rank's step length (the same on all: the slowest rank's host work sets it)."""
    end = _arrival_us(slowest, layers, buckets, buckets - 1) + 20.0 + TRANSFER_US + 32.0
    return round(end + OPT_HOST_US + 50.0, 3)


def expected(ranks: int, *, steps: int = 5, slow: int = 7) -> dict:
    """What a cross-rank report of the folder must say: its ranks, matched steps and straggler."""
    return {"ranks": ranks, "steps": steps, "slow": slow if 0 <= slow < ranks else None}


def write_folder(
    out: Path,
    ranks: int,
    *,
    steps: int = 5,
    layers: int = 8,
    buckets: int = 4,
    slow: int = 7,
    slow_factor: float = 1.5,
    plain: bool = False,
) -> list[Path]:
    """Writes the folder; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    factors = host_factors(ranks, steps, slow, slow_factor)
    slowest = [max(f[s] for f in factors) for s in range(steps)]
    files = []
    for r in range(ranks):
        doc = rank_trace(
            r, ranks, steps=steps, layers=layers, buckets=buckets, factors=factors[r], slowest=slowest
        )
        text = json.dumps(doc, separators=(",", ":")).encode()
        p = out / f"rank{r}.pt.trace.json{'' if plain else '.gz'}"
        p.write_bytes(text if plain else gzip.compress(text, 6, mtime=0))
        files.append(p)
    return files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--slow", type=int, default=7)
    ap.add_argument("--slow-factor", type=float, default=1.5)
    ap.add_argument("--plain", action="store_true", help="write .json, not .json.gz")
    a = ap.parse_args()
    files = write_folder(
        a.out,
        a.ranks,
        steps=a.steps,
        layers=a.layers,
        buckets=a.buckets,
        slow=a.slow,
        slow_factor=a.slow_factor,
        plain=a.plain,
    )
    size = sum(p.stat().st_size for p in files)
    print(f"{len(files)} rank traces, {size / 1e6:.1f} MB, in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
