"""Scaling study: reports of one training at different numbers of processes -> the table (nodes,
world size, global batch, time per step, samples/s, speed-up, parallel efficiency, and where NVML
measured it the job's energy per step and per sample) and the share of communication and load
imbalance in the step that explains the loss. Pure function over report dicts (rank 0's cross-rank
reports, docs/distributed.md)."""

from __future__ import annotations

from typing import Optional


def run_row(data: dict, *, batch_size: Optional[int] = None, label: str = "") -> dict:
    ranks = data.get("ranks") or []
    dist = data.get("distributed") or {}
    world = int((data.get("cross_rank") or {}).get("world_size") or dist.get("world_size") or len(ranks) or 1)
    hosts = {r.get("hostname") for r in ranks if r.get("hostname")}
    per_rank = (
        batch_size
        or dist.get("batch_size")
        or next(
            (
                d.get("batch_size")
                for d in data.get("dataloaders") or []
                if isinstance(d.get("batch_size"), int)
            ),
            None,
        )
    )
    steps = [r["average"]["total_us"] for r in ranks if (r.get("average") or {}).get("total_us")]
    # In a synchronous job every rank's step lasts as long as the slowest's: the job's step time.
    step_us = max(steps) if steps else float((data.get("average") or {}).get("total_us") or 0.0)
    comm = [r["average"].get("communication_pct", 0.0) for r in ranks if r.get("average")]
    global_batch = per_rank * world if per_rank else None
    energy = _job_energy_j(data, ranks, world)
    return {
        "run": label,
        "nodes": max(1, len(hosts)),
        "world_size": world,
        "global_batch": global_batch,
        "step_us": round(step_us, 3),
        "communication_pct": round(sum(comm) / len(comm), 2)
        if comm
        else float((data.get("average") or {}).get("communication_pct") or 0.0),
        "imbalance_pct": float((data.get("cross_rank") or {}).get("imbalance_pct") or 0.0),
        "energy_per_step_j": round(energy, 3) if energy is not None else None,
        "energy_per_sample_j": round(energy / global_batch, 6)
        if energy is not None and global_batch
        else None,
    }


def _job_energy_j(data: dict, ranks: list, world: int) -> Optional[float]:
    """The job's energy per step: every rank's (its GPUs', docs/metrics.md "Energy") summed; None
    unless every rank of the job measured it (a partial sum would read as the whole job's)."""
    if not ranks:
        value = (data.get("average") or {}).get("energy_j")
        return float(value) if isinstance(value, (int, float)) else None
    joules = [r.get("energy_j") for r in ranks]
    if len(ranks) < world or not all(isinstance(j, (int, float)) for j in joules):
        return None
    return float(sum(joules))


def scaling_table(rows: list[dict]) -> list[dict]:
    """Sorted by world size; speed-up and efficiency against the smallest run (throughput, so weak
    and strong scaling both read right: efficiency = speed-up / (world / base world))."""
    rows = sorted(rows, key=lambda r: (r["world_size"], r["nodes"]))
    for r in rows:
        r["samples_per_s"] = (
            round(r["global_batch"] / (r["step_us"] / 1e6), 2)
            if r["global_batch"] and r["step_us"] > 0
            else None
        )
    base = rows[0] if rows else None
    for r in rows:
        if base and base["samples_per_s"] and r["samples_per_s"]:
            r["speedup"] = round(r["samples_per_s"] / base["samples_per_s"], 3)
        elif base and r["step_us"] > 0 and r["global_batch"] is None:
            r["speedup"] = None
        else:
            r["speedup"] = None
        scale = r["world_size"] / base["world_size"] if base else 1
        r["efficiency_pct"] = round(100.0 * r["speedup"] / scale, 1) if r["speedup"] is not None else None
    return rows
