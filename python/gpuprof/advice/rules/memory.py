"""Rules on occupancy and device memory: utilization, batch size, capacity, leaks, fragmentation,
out-of-memory."""

from __future__ import annotations

from typing import Optional

from .._facts import Facts
from .base import (
    FRAGMENTATION_MIN_BYTES,
    FRAGMENTATION_MIN_PCT,
    FRAGMENTATION_NEAR_FULL_PCT,
    LOW_SM_EFFICIENCY_PCT,
    LOW_UTILIZATION_PCT,
    MEMORY_HEADROOM_PCT,
    MEMORY_HIGH_PCT,
    MEMORY_LOW_PCT,
    UNEXPLAINED_IDLE_MIN_PCT,
    Recommendation,
    _bigger_batch,
    _mean_device,
    _unexplained_idle_pct,
    recommendation,
)


# ---- low_utilization / batch_size / memory_capacity ---------------------------------------------
def _memory_room(f: Facts) -> Optional[float]:
    """Peak allocated memory as a share of the device's; None when unknown, or above 100% (which
    cannot be: the report's warnings say so, and no rule reads it as a fact)."""
    peak, total = f.peak_allocated_bytes, f.memory_total_bytes
    if peak is None or not total or peak > total:
        return None
    return 100.0 * peak / total


def low_utilization(f: Facts) -> Optional[Recommendation]:
    util = _mean_device(f, "utilization_pct")
    if util is None or util >= LOW_UTILIZATION_PCT:
        return None
    mem_pct = _memory_room(f)
    if mem_pct is not None and mem_pct < MEMORY_LOW_PCT:
        return None  # memory_capacity says the same with the room for a larger batch
    idle = _unexplained_idle_pct(f)
    if idle < UNEXPLAINED_IDLE_MIN_PCT:
        return None  # the idle time is waiting for data: the dataloader rule covers it
    return recommendation(
        "low_utilization",
        f"The GPU runs kernels only {util:.0f}% of the time",
        summary=f"GPU utilization {util:.0f}% (< {LOW_UTILIZATION_PCT:.0f}%); {idle:.0f}% of the step the "
        "GPU idles for reasons other than input loading"
        + (f"; peak memory {mem_pct:.0f}% of the device" if mem_pct is not None else ""),
        numbers={"utilization_pct": util, "gpu_idle_not_dataloader_pct": idle, "peak_memory_pct": mem_pct},
        bound_pct=idle,
        confidence="low",
        confidence_reason="low utilization has several causes; fix host_sync/launch_bound first when "
        "they fire; a larger batch changes the optimisation (scale the learning rate)",
        fix=f"{_bigger_batch(f, 2)} if memory allows"
        + (f" (peak {mem_pct:.0f}% of device memory)" if mem_pct is not None else "")
        + ": more work per kernel launch and per step; bound is per sample",
    )


def _small_grids(f: Facts) -> bool:
    """Busy GPU whose kernels leave SMs empty: < 1 block per SM on average (kernel table), or, where
    the table has no block counts, Est. SM efficiency < 50% at utilization >= 50%."""
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    if util is None or sm is None or util < LOW_UTILIZATION_PCT:
        return False
    blocks = f.mean_blocks_per_sm()
    return blocks < 1.0 if blocks is not None else sm < LOW_SM_EFFICIENCY_PCT


def batch_size(f: Facts) -> Optional[Recommendation]:
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    blocks = f.mean_blocks_per_sm()
    if not _small_grids(f):
        return None
    mem_pct = _memory_room(f)
    if mem_pct is not None and mem_pct < MEMORY_LOW_PCT:
        return None  # memory_capacity says the same with the room for a larger batch
    fill = min(1.0, sm / util)  # mean share of the SMs busy while some kernel runs
    bound = f.pct("kernel") * (1.0 - fill)
    if bound < 1.0:
        return None
    return recommendation(
        "batch_size",
        "Kernels are too small to fill the GPU's SMs",
        summary=f"Est. SM efficiency {sm:.0f}% at {util:.0f}% utilization: while kernels run, about "
        f"{100 * fill:.0f}% of the SMs have work"
        + (f"; mean {blocks:.2f} blocks per SM" if blocks is not None else ""),
        numbers={
            "sm_efficiency_pct": sm,
            "utilization_pct": util,
            "mean_blocks_per_sm": blocks,
            "kernel_pct": f.pct("kernel"),
        },
        bound_pct=bound,
        confidence="medium",
        confidence_reason="grid sizes are measured; a larger batch fills SMs but changes the optimisation",
        fix=f"{_bigger_batch(f, 2)}, or several samples per kernel (torch.compile fuses small ops); "
        "bound is per sample",
    )


def memory_capacity(f: Facts) -> Optional[Recommendation]:
    mem_pct = _memory_room(f)
    if mem_pct is None:
        return None
    peak, total = f.peak_allocated_bytes, f.memory_total_bytes
    numbers = {"peak_allocated_bytes": peak, "memory_total_bytes": total, "peak_memory_pct": mem_pct}
    if mem_pct > MEMORY_HIGH_PCT:
        return recommendation(
            "memory_capacity",
            f"Peak device memory is {mem_pct:.0f}% of the GPU's",
            summary=f"peak allocated {peak / 2**30:.1f} GiB of {total / 2**30:.1f} GiB "
            f"(> {MEMORY_HIGH_PCT:.0f}%): "
            "one larger batch or sequence away from out-of-memory, and the allocator may be "
            "freeing and retrying",
            numbers=numbers,
            bound_pct=0.0,
            confidence="high",
            confidence_reason="allocator peak against device capacity; this rule prevents failures, "
            "it does not promise speed",
            fix="torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) on the largest blocks, "
            "autocast to bf16/fp16 (halves activations), or a smaller batch with gradient accumulation",
        )
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    underused = (util is not None and util < LOW_UTILIZATION_PCT) or _small_grids(f)
    if mem_pct >= MEMORY_LOW_PCT or not underused:
        return None
    factor = max(2, min(8, int(0.8 * 100.0 / max(mem_pct, 1.0))))
    fits = _batch_that_fits(f, MEMORY_HEADROOM_PCT / 100.0 * total)
    if fits is not None and fits[0] >= 2 * fits[1]:
        factor = max(2, min(8, fits[0] // fits[1]))
    idle = (
        _unexplained_idle_pct(f)
        if util is not None and util < LOW_UTILIZATION_PCT
        else f.pct("kernel") * (1.0 - min(1.0, (sm or 0.0) / max(util or 1.0, 1.0)))
    )
    return recommendation(
        "memory_capacity",
        f"Only {mem_pct:.0f}% of device memory used while the GPU is underused",
        summary=f"peak allocated {peak / 2**30:.2f} GiB of {total / 2**30:.1f} GiB; GPU utilization "
        + (f"{util:.0f}%" if util is not None else "unknown")
        + (f", Est. SM efficiency {sm:.0f}%" if sm is not None else ""),
        numbers={
            **numbers,
            "utilization_pct": util,
            "sm_efficiency_pct": sm,
            "batch_factor": factor,
            **(
                {"per_sample_activation_bytes": fits[2], "batch_that_fits_80pct": fits[0]}
                if fits is not None
                else {}
            ),
        },
        bound_pct=idle,
        confidence="medium",
        confidence_reason="memory headroom is measured; activations grow about linearly with the batch"
        + (" (measured per sample at the peak)" if fits is not None else ""),
        fix=f"{_bigger_batch(f, factor)}: about {factor}x the batch still fits in 80% of device memory"
        + (
            f" ({_gib(fits[2] * fits[1])} of activations at batch {fits[1]}: {_mib(fits[2])} a sample)"
            if fits is not None
            else ""
        )
        + "; scale the learning rate with it; bound is per sample",
    )


def _gib(n: float) -> str:
    """A size in the unit that reads best: GiB from 1 GiB (two decimals), else MiB or KiB."""
    if abs(n) >= 2**40:
        return f"{n / 2**40:.2f} TiB"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else _mib(n)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if abs(n) >= 2**20 else f"{n / 2**10:.1f} KiB"


def _batch_that_fits(f: Facts, budget: float) -> Optional[tuple[int, int, int]]:
    """(batch that fits in ``budget`` bytes, the batch now, activation bytes per sample) on the
    busiest GPU, from its peak's composition: activations and temporaries grow with the batch, the
    rest does not. None without a composition or a batch size."""
    batch = f.batch_size
    if not batch:
        return None
    best = None
    for device, c in f.memory_compositions.items():
        if device == "-1":
            continue
        scaled = (c.get("activations") or 0) + (c.get("temporary") or 0)
        if scaled <= 0:
            continue
        fixed = sum(c.get(k) or 0 for k in ("parameters", "gradients", "optimizer_state", "unknown"))
        per_sample = scaled // batch
        if per_sample <= 0:
            continue
        fits = int(max(0, budget - fixed) // per_sample)
        if best is None or fits < best[0]:
            best = (fits, batch, per_sample)
    return best


# ---- memory_leak / memory_fragmentation / out_of_memory --------------------------------------------
def memory_leak(f: Facts) -> Optional[Recommendation]:
    flagged = {d: g for d, g in f.memory_growth.items() if g.get("flagged")}
    if not flagged:
        return None
    device, g = max(flagged.items(), key=lambda kv: kv[1].get("bytes_per_step") or 0.0)
    where = "the host" if device == "-1" else f"GPU {device}"
    rate = float(g.get("bytes_per_step") or 0.0)
    steps = g.get("steps") or []
    ends = g.get("end_bytes") or []
    ops = g.get("ops") or []
    peak = (f.memory_peaks.get(device) or {}).get("bytes")
    capacity = f.device_capacity(device)
    left = (capacity - peak) / rate if capacity and isinstance(peak, (int, float)) and rate > 0 else None
    owners = ", ".join(
        f"{o.get('name') or '(outside any operator)'} {_mib(o.get('bytes_per_step') or 0)}/step"
        for o in ops[:3]
    )
    lossy = any("loss" in str(o.get("name", "")).lower() for o in ops[:3])
    return recommendation(
        "memory_leak",
        f"Memory on {where} grows by {rate / 1e6:.3g} MB every step",
        summary=f"allocated memory at step ends rose from {_mib(ends[0])} (step {steps[0]}) to "
        f"{_mib(ends[-1])} (step {steps[-1]}), higher at {g.get('rising_steps')} of {len(steps) - 1} "
        "step ends"
        + (f"; allocations left live across steps: {owners}" if owners else "")
        + (f"; at this rate the device is full in about {left:,.0f} steps" if left is not None else ""),
        numbers={
            "device": int(device),
            "mb_per_step": rate / 1e6,
            "steps": len(steps),
            "first_end_bytes": ends[0],
            "last_end_bytes": ends[-1],
            "steps_to_full": round(left) if left is not None else None,
            "top_op": ops[0].get("name") if ops else None,
        },
        bound_pct=0.0,
        confidence="high" if ops else "medium",
        confidence_reason="allocator levels at step ends, least-squares rate"
        + ("; the allocations that outlived their steps were matched to their operators" if ops else ""),
        fix=(
            "keep Python numbers, not tensors, for what you log or accumulate: losses.append(loss.item()) "
            "or total += loss.detach() instead of the tensor (which keeps its storage, and its graph)"
            if lossy
            else "find what keeps the tensors the named operators make alive across steps: a list or dict "
            "appended to every step (log loss.item(), keep .detach().cpu() copies), a cache keyed by the "
            "step (clear it), outputs kept with their graph (.detach())"
        ),
    )


def memory_fragmentation(f: Facts) -> Optional[Recommendation]:
    worst = None
    for device, p in f.memory_peaks.items():
        reserved, allocated = p.get("reserved_bytes"), p.get("bytes")
        capacity = f.device_capacity(device)
        if not isinstance(reserved, (int, float)) or not isinstance(allocated, (int, float)) or not capacity:
            continue
        idle = reserved - allocated
        if (
            idle >= FRAGMENTATION_MIN_BYTES
            and 100.0 * idle / reserved >= FRAGMENTATION_MIN_PCT
            and 100.0 * reserved / capacity >= FRAGMENTATION_NEAR_FULL_PCT
            and (worst is None or idle > worst[1])
        ):
            worst = (device, idle, reserved, allocated, capacity)
    if worst is None:
        return None
    device, idle, reserved, allocated, capacity = worst
    return recommendation(
        "memory_fragmentation",
        f"{100.0 * idle / reserved:.0f}% of the memory reserved on GPU {device} is unused at its peak",
        summary=f"at the peak {_gib(allocated)} allocated in {_gib(reserved)} reserved by the caching "
        f"allocator ({_gib(idle)} cached but unallocated) of {_gib(capacity)}: blocks split by other sizes "
        "cannot serve a large request, which then fails or makes the allocator free and retry",
        numbers={
            "device": int(device),
            "reserved_bytes": reserved,
            "allocated_bytes": allocated,
            "reserved_unallocated_bytes": idle,
            "memory_total_bytes": capacity,
        },
        bound_pct=0.0,
        confidence="medium",
        confidence_reason="allocated and reserved levels at the peak are measured; whether the cached "
        "blocks are too fragmented for the next request is not",
        fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before the first CUDA allocation: in "
        "the job's environment) lets segments grow instead of splitting fixed ones",
    )


def out_of_memory(f: Facts) -> Optional[Recommendation]:
    oom = f.out_of_memory
    if oom is None:
        return None
    where = "the host" if oom.get("device") == -1 else f"GPU {oom.get('device')}"
    c = oom.get("composition") or {}
    acts = (c.get("activations") or 0) + (c.get("temporary") or 0)
    held = sum(v for v in c.values() if isinstance(v, (int, float)))
    batch, fits = oom.get("batch_size"), oom.get("largest_batch_that_fits")
    per_sample, fixed, budget = oom.get("per_sample_bytes"), oom.get("fixed_bytes"), oom.get("budget_bytes")
    fixes = []
    if isinstance(fits, int) and isinstance(batch, int):
        if fits < batch:
            fixes.append(
                f"batch_size={max(fits, 1)} (now {batch}): {_mib(per_sample)} of activations a sample, "
                f"{_gib(fixed)} that does not grow with the batch, {_gib(budget)} for the allocator"
                + ("; keep the global batch with gradient accumulation" if fits >= 1 else "")
            )
        else:
            fixes.append(
                f"the measured {_mib(per_sample)} a sample fits {fits} samples, more than the {batch} that "
                "failed: the failing step needed more than a typical one (a longer sequence, a larger "
                "image): cap or bucket the input sizes"
            )
    if acts:
        # The modules (by path in the module view) whose allocations held the most at the failure;
        # the model itself ("") is no block to checkpoint.
        biggest = [m for m in oom.get("top_modules") or [] if m.get("name")][:3]
        modules = ", ".join(f"{m['name']} {_mib(m.get('bytes') or 0)}" for m in biggest)
        if modules:
            modules = f", those around the modules that made most of it ({modules}),"
        elif not f.module_view:
            modules = " (gpuprof.profile(with_modules=True) names the modules that made it)"
        fixes.append(
            f"activation checkpointing: {_gib(acts)} of activations"
            + (f" ({100.0 * acts / held:.0f}% of what was held)" if held else "")
            + ": torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) on the largest blocks"
            + modules
            + " keeps only their inputs, for about a third more compute"
        )
        half = None
        if (
            isinstance(per_sample, int)
            and per_sample > 0
            and isinstance(budget, int)
            and isinstance(fixed, int)
        ):
            half = max(0, (budget - fixed) // max(1, per_sample // 2))
        fixes.append(
            f"mixed precision (torch.autocast('cuda', dtype=torch.bfloat16)) if the run is in float32: "
            f"activations in 2 bytes instead of 4, about {_gib(acts / 2)} less"
            + (f"; about batch {half} would fit" if half is not None else "")
        )
    idle = oom.get("reserved_unallocated_bytes")
    requested = oom.get("requested_bytes")
    capacity = oom.get("capacity_bytes")
    if (
        isinstance(idle, int)
        and idle > 0
        and ((isinstance(requested, int) and idle >= requested) or (capacity and idle >= 0.05 * capacity))
    ):
        fixes.append(
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {_gib(idle)} was reserved but unallocated"
            + (
                f", more than the {_gib(requested)} requested"
                if isinstance(requested, int) and idle >= requested
                else ""
            )
        )
    state = c.get("optimizer_state") or 0
    if held and state >= 0.25 * held:
        fixes.append(
            f"optimizer state is {_gib(state)} ({100.0 * state / held:.0f}%): shard it across ranks "
            "(FSDP, ZeRO) or keep it in 8 bits (bitsandbytes' Adam8bit)"
        )
    if not fixes:
        fixes.append("a smaller batch, activation checkpointing or mixed precision")
    return recommendation(
        "out_of_memory",
        f"Out of memory on {where}"
        + (f": {_gib(requested)} requested" if isinstance(requested, int) else "")
        + (
            f" with {_gib(oom['allocated_bytes'])} allocated"
            if isinstance(oom.get("allocated_bytes"), int)
            else ""
        )
        + (f" of {_gib(capacity)}" if capacity else ""),
        summary=f"{oom.get('error') or 'error'} on {where}"
        + (f"; held at the failure: {', '.join(f'{k} {_gib(v)}' for k, v in c.items() if v)}" if c else ""),
        numbers={
            "device": oom.get("device"),
            "requested_bytes": requested,
            "allocated_bytes": oom.get("allocated_bytes"),
            "capacity_bytes": capacity,
            "batch_size": batch,
            "largest_batch_that_fits": fits,
            "per_sample_bytes": per_sample,
        },
        bound_pct=0.0,
        confidence="high" if oom.get("composition") else "medium",
        confidence_reason="what was held at the failure is measured"
        + (
            "; the batch that fits assumes activations grow linearly with the batch"
            if fits is not None
            else ""
        ),
        fix="; ".join(f"({i}) {x}" for i, x in enumerate(fixes, 1)),
    )
