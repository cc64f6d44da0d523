"""Rules for multi-process jobs: data parallelism, the backend, stragglers and collectives."""

from __future__ import annotations

import re
from typing import Optional

from .._facts import Facts
from .base import COMMUNICATION_PCT, Recommendation, _ms, recommendation


# ---- distributed ----------------------------------------------------------------------------------
def data_parallel(f: Facts) -> Optional[Recommendation]:
    devices = f.busy_devices
    world = f.distributed.get("world_size")
    if len(devices) < 2 or (isinstance(world, int) and world > 1):
        return None
    utils = [f.device_num(d, "utilization_pct") for d in devices]
    utils = [u for u in utils if u is not None]
    mean_util = sum(utils) / len(utils) if utils else None
    bound = 100.0 - mean_util if mean_util is not None else f.gpu_idle_pct
    return recommendation(
        "data_parallel",
        f"One process drives {len(devices)} GPUs (DataParallel)",
        summary=f"{len(devices)} GPUs ran kernels from one process with no distributed job"
        + (f"; mean GPU utilization {mean_util:.0f}%" if mean_util is not None else ""),
        numbers={"gpus": len(devices), "mean_utilization_pct": mean_util},
        bound_pct=bound,
        confidence="medium",
        confidence_reason="several GPUs in one process is DataParallel's signature; its scatter/gather "
        "and single Python thread are what DDP removes",
        fix=f"torchrun --nproc_per_node={len(devices)} train.py with torch.distributed.init_process_group"
        "('nccl') and model = DistributedDataParallel(model, device_ids=[local_rank]) instead of "
        "nn.DataParallel(model), with a DistributedSampler",
    )


def nccl_backend(f: Facts) -> Optional[Recommendation]:
    info = f.distributed
    backend = str(info.get("backend") or "")
    world = info.get("world_size")
    if (
        not backend
        or backend.lower() == "nccl"
        or not (isinstance(world, int) and world > 1)
        or not f.ran_gpu_work
    ):
        return None
    return recommendation(
        "nccl_backend",
        f"Distributed training on GPUs uses the {backend} backend, not NCCL",
        summary=f"world size {world} with backend {backend!r} while the model runs on the GPU; "
        f"communication is {f.pct('communication'):.0f}% of the step",
        numbers={"backend": backend, "world_size": world, "communication_pct": f.pct("communication")},
        bound_pct=f.pct("communication"),
        confidence="high",
        confidence_reason="the backend is recorded in the trace's distributedInfo",
        fix="torch.distributed.init_process_group(backend='nccl') (or 'cuda:nccl,cpu:gloo' when CPU "
        "tensors are also reduced): NCCL moves GPU tensors GPU-to-GPU without host copies",
    )


def _stragglers(f: Facts) -> list:
    return [s for s in (f.data.get("stragglers") or []) if isinstance(s, dict)]


_STRAGGLER_FIX = {
    "dataloader_us": "data skew or a slower input pipeline on that rank: give every rank the same "
    "amount of data per step (DistributedSampler(dataset, drop_last=True), samples of "
    "similar size or a length-grouped sampler), and the same DataLoader num_workers",
    "cpu_exec_us": "extra host work on that rank: move logging, metrics, evaluation and checkpointing "
    "off the step (every N steps, or on a background thread: torch.distributed.checkpoint."
    "async_save), or do them on every rank at the same step; check for a slower host CPU",
    "other_us": "time outside any recorded operator on that rank (Python work, sleeps, I/O such as "
    "logging or checkpointing on rank 0): do it every N steps or in the background",
    "kernel_us": "a slower GPU or more device work on that rank: check its clocks and temperature "
    "(nvidia-smi -q -d CLOCK,TEMPERATURE), other jobs on it, and that every rank runs the "
    "same shapes",
}


def straggler(f: Facts) -> Optional[Recommendation]:
    found = _stragglers(f)
    if not found or f.step_us <= 0:
        return None
    s = found[0]
    cat = str(s.get("category", ""))
    excess = float(s.get("excess_us") or 0.0)
    share = 100.0 * excess / f.step_us
    waits = [
        r.get("collective_wait_us") or 0.0
        for r in (f.data.get("ranks") or [])
        if isinstance(r, dict) and r.get("rank") != s.get("rank")
    ]
    return recommendation(
        "straggler",
        f"Rank {s.get('rank')} is a straggler: every other rank waits for it",
        summary=f"rank {s.get('rank')} spends {_ms(excess)} more per step outside collectives than the "
        f"median rank ({s.get('excess_pct', 0):.0f}% more), mostly in {cat.removesuffix('_us')}; "
        f"the other ranks wait {_ms(sum(waits) / len(waits) if waits else 0.0)} per step in "
        "collectives for it",
        numbers={
            "rank": s.get("rank"),
            "excess_us": excess,
            "excess_pct": s.get("excess_pct"),
            "category": cat,
            "stragglers": len(found),
        },
        bound_pct=share,
        confidence="high",
        confidence_reason="measured on every rank over the same step numbers: the excess outside "
        "collectives on this rank matches the others' waiting inside them",
        fix=_STRAGGLER_FIX.get(
            cat,
            "find what that rank does more than the others in "
            f"{cat.removesuffix('_us')} (its report's tables) and even it out",
        ),
    )


def communication(f: Facts) -> Optional[Recommendation]:
    share = f.pct("communication")
    if share <= COMMUNICATION_PCT:
        return None
    if _stragglers(f):
        return None  # the collectives wait for a slow rank: the straggler rule says which
    info = f.distributed
    world = info.get("world_size")
    on_gpu = f.ran_gpu_work or f.cuda_available is True
    return recommendation(
        "communication",
        "Gradient communication is exposed, not hidden behind compute",
        summary=f"communication not overlapped by compute kernels is {share:.0f}% of the step "
        f"({_ms(f.us('communication'))})" + (f", world size {world}" if world else ""),
        numbers={
            "communication_pct": share,
            "communication_us": f.us("communication"),
            "world_size": world,
            "backend": info.get("backend"),
        },
        bound_pct=share,
        confidence="medium",
        confidence_reason="the exposed communication time is measured (kernels take priority in the "
        "breakdown, so this is time no compute overlapped)",
        fix="accumulate gradients over k steps with `with model.no_sync():` on all but the last, "
        f"a larger per-{'GPU' if on_gpu else 'process'} batch, "
        "DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True), or "
        "compress gradients: model.register_comm_hook(None, torch.distributed.algorithms."
        "ddp_comm_hooks.default_hooks.bf16_compress_hook)",
    )


# Many small collectives: a call moves too little to amortise its fixed cost (NCCL's all_reduce is
# latency-bound below about 1 MiB; gloo's per-call cost on the CPU is larger still).
SMALL_COLLECTIVE_BYTES = 1 << 20
SMALL_COLLECTIVE_MIN_PER_STEP = 8.0
SMALL_COLLECTIVE_MIN_PCT = 5.0  # of the step, in those calls
# Bus bandwidth far below the link's: large enough calls (bandwidth-bound), one node's GPUs joined
# by NVLink, and a bus bandwidth below this share of the link's one-way bandwidth per GPU.
LOW_BUSBW_MIN_MEAN_BYTES = 16 << 20
LOW_BUSBW_PCT = 25.0
# NVLink bandwidth per GPU, one way (what nccl-tests' bus bandwidth is compared with), by the
# device's name: NVIDIA's data sheets (V100 SXM2: 6 links x 25 GB/s; A100 SXM4: 12 x 25; H100 and
# H200 SXM5: 18 x 25; B200: 18 x 50). PCIe parts are not here: their link depends on the slot.
NVLINK_GBPS = (
    (re.compile(r"\bB200\b"), 900.0, "B200 NVLink 5 (18 links x 50 GB/s)"),
    (re.compile(r"\bH200\b(?!\s*NVL)|\bH100\b.*\b(HBM3|SXM)"), 450.0, "H100/H200 NVLink 4 (18 x 25 GB/s)"),
    (re.compile(r"\bA100[- ]SXM"), 300.0, "A100 SXM4 NVLink 3 (12 links x 25 GB/s)"),
    (re.compile(r"\bV100[- ]SXM2"), 150.0, "V100 SXM2 NVLink 2 (6 links x 25 GB/s)"),
)


def _kb(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n < (1 << 20) else f"{n / (1 << 20):.1f} MiB"


def small_collectives(f: Facts) -> Optional[Recommendation]:
    rows = [
        r
        for r in f.collectives
        if r.get("name") in ("all_reduce", "reduce_scatter", "all_gather")
        and isinstance(r.get("bytes"), (int, float))
        and r.get("calls")
    ]
    if not rows or f.step_us <= 0 or not f.num_steps:
        return None
    row = max(rows, key=lambda r: float(r.get("total_us") or 0.0))
    calls = f.per_step(float(row["calls"]))
    mean_bytes = float(row["bytes"]) / float(row["calls"])
    share = 100.0 * f.per_step(float(row.get("total_us") or 0.0)) / f.step_us
    small = mean_bytes < SMALL_COLLECTIVE_BYTES
    if calls < SMALL_COLLECTIVE_MIN_PER_STEP or not small or share < SMALL_COLLECTIVE_MIN_PCT:
        return None
    group = row.get("process_group") or "?"
    desc = f" ({row['pg_desc']})" if row.get("pg_desc") else ""
    # The calls' time can go at best; no more than the communication the breakdown shows exposed.
    exposed = f.pct("communication")
    bound = min(share, exposed) if exposed > 0 else share
    return recommendation(
        "small_collectives",
        f"Many small {row['name']} calls: each moves too little to pay for itself",
        summary=f"{calls:.0f} {row['name']} calls per step in process group {group}{desc}, "
        f"{_kb(mean_bytes)} each on average, {_ms(f.per_step(float(row['total_us'])))} per step "
        f"({share:.0f}% of the step)",
        numbers={
            "collective": row["name"],
            "process_group": row.get("process_group"),
            "calls_per_step": round(calls, 2),
            "mean_bytes": round(mean_bytes),
            "collective_pct": round(share, 2),
            "busbw_gbps": row.get("busbw_gbps"),
        },
        bound_pct=bound,
        confidence="medium",
        confidence_reason="the calls, their sizes and times are measured; how much merging them saves "
        "depends on the fixed cost per call of the backend and the link",
        fix="put more gradient in each call: DDP(model, bucket_cap_mb=100) (the default is 25; FSDP: "
        "wrap larger modules, FullyShardedDataParallel(..., auto_wrap_policy=size_based_auto_wrap_policy "
        "with a larger min_num_params)); gradients reduced by hand: flatten them "
        "(torch._utils._flatten_dense_tensors) and all_reduce once",
    )


def _link(device_name: str) -> Optional[tuple[float, str]]:
    for pattern, gbps, what in NVLINK_GBPS:
        if pattern.search(device_name):
            return gbps, what
    return None


def low_bus_bandwidth(f: Facts) -> Optional[Recommendation]:
    # Only over transfer time (the cross-rank report): a rank's own time includes waiting for the
    # slowest rank, which is not the link's fault.
    ranks = f.ranks
    hosts = {r.get("hostname") for r in ranks}
    if len(ranks) < 2 or len(hosts) != 1 or f.step_us <= 0 or not f.num_steps:
        return None
    names = [str(d.get("name") or "") for d in f.devices]
    link = _link(names[0]) if names else None
    if link is None:
        return None
    peak, what = link
    rows = [
        r
        for r in f.collectives
        if r.get("timed_by") == "device"
        and isinstance(r.get("busbw_gbps"), (int, float))
        and r.get("transfer_us")
        and r.get("calls")
        and isinstance(r.get("bytes"), (int, float))
        and float(r["bytes"]) / float(r["calls"]) >= LOW_BUSBW_MIN_MEAN_BYTES
    ]
    if not rows:
        return None
    row = max(rows, key=lambda r: float(r["transfer_us"]))
    busbw = float(row["busbw_gbps"])
    pct_of_link = 100.0 * busbw / peak
    if pct_of_link >= LOW_BUSBW_PCT:
        return None
    transfer = f.per_step(float(row["transfer_us"]))
    # At the link's speed the transfer would take busbw/peak of its time: the rest can go, at best.
    bound = 100.0 * transfer * (1.0 - busbw / peak) / f.step_us
    exposed = f.pct("communication")
    bound = min(bound, exposed) if exposed > 0 else bound
    return recommendation(
        "low_bus_bandwidth",
        f"{row['name']} runs far below the GPUs' NVLink bandwidth",
        summary=f"{row['name']} in process group {row.get('process_group') or '?'}: bus bandwidth "
        f"{busbw:.1f} GB/s over its transfer time, {pct_of_link:.0f}% of the {peak:.0f} GB/s of {what}",
        numbers={
            "collective": row["name"],
            "busbw_gbps": round(busbw, 2),
            "link_gbps": peak,
            "link_pct": round(pct_of_link, 1),
            "mean_bytes": round(float(row["bytes"]) / float(row["calls"])),
            "transfer_us_per_step": round(transfer, 1),
        },
        bound_pct=bound,
        confidence="low",
        confidence_reason="the bus bandwidth is measured (nccl-tests' definition, over the transfer "
        "time); the link is inferred from the GPU's model, and the topology NCCL chose is not recorded",
        fix="run nccl-tests (all_reduce_perf -b 64M -e 1G -g <GPUs>) on the node to see what the link "
        "gives; check `nvidia-smi topo -m` (NV# between the GPUs, not PIX/SYS), NCCL_P2P_DISABLE and "
        "NCCL_P2P_LEVEL unset, NCCL_DEBUG=INFO naming NVLink (P2P/IPC) rather than SHM or NET; a "
        "container needs --ipc=host (or a large /dev/shm)",
    )
