"""Rules on the host holding the device back: syncs that block it (on a CPU: the `.item()` habit),
launch-bound steps, and on a CPU a batch too small to pay for each operator call."""

from __future__ import annotations

import re
from typing import Optional

from .._facts import Facts
from .base import (
    SMALL_BATCH_MATRIX_FLOPS,
    SMALL_BATCH_MIN_PYTHON_PCT,
    SMALL_BATCH_TARGET_FACTOR,
    SYNC_MIN_BOUND_PCT,
    SYNC_MIN_PER_STEP,
    Recommendation,
    _bigger_batch,
    _launch_thresholds,
    _ms,
    _num_or0,
    _unexplained_idle_pct,
    recommendation,
)


# ---- host_sync ------------------------------------------------------------------------------------
def _sync_fix(op: str, call: str) -> str:
    if not op:  # made outside any host op: only the runtime call is known
        if "event" in call.lower():
            return (
                f"{call} outside any op: a CUDA event waited on in the loop (torch.cuda.Event.synchronize(), "
                "elapsed_time(), or timing code in a library): wait on events only outside the step"
            )
        op = call
    o = op.lower()
    if "item" in o or "local_scalar" in o:
        return (
            "`.item()` (aten::_local_scalar_dense) waits for the GPU: accumulate on the GPU "
            "(running_loss += loss.detach()) and call .item() once every N steps for logging"
        )
    if "nonzero" in o or "masked_select" in o or "unique" in o or "index" in o:
        return (
            f"{op} has a data-dependent output size, so the host waits for the GPU: use fixed-size "
            "ops (torch.where, a multiplied mask) inside the step"
        )
    if "synchron" in o:
        return "torch.cuda.synchronize() in the loop: remove it (keep it only around timing code)"
    if "to" in o or "copy" in o or "cpu" in o:
        return (
            f"{op} copies to the host and waits: keep the tensor on the GPU, or copy with "
            "non_blocking=True into a pinned buffer and read it a step later"
        )
    return (
        f"{op} blocks the host until the GPU finishes: avoid .item(), .cpu(), .tolist(), printing or "
        "`if tensor:` on CUDA tensors inside the step"
    )


_SCALAR_OP = r"^aten::(_local_scalar_dense|item)$"


def _times(n: float) -> str:
    return "once" if round(n) == 1 else f"{n:.0f} times"


def _cpu_only(f: Facts) -> bool:
    return not f.devices and not f.ran_gpu_work and f.cuda_available is not True


def _scalar_reads_per_step(f: Facts) -> float:
    """`.item()` calls per step (aten::item runs aten::_local_scalar_dense: the larger of the two)."""
    return f.per_step(max([_num_or0(r.get("calls")) for r in f.operators_matching(_SCALAR_OP)] + [0.0]))


def _cpu_scalar_reads(f: Facts) -> Optional[Recommendation]:
    """On a CPU `.item()` waits for nothing, but it is the habit that stalls a GPU: named, with the
    little it costs here as the bound."""
    per_step = _scalar_reads_per_step(f)
    if per_step < SYNC_MIN_PER_STEP or f.step_us <= 0:
        return None
    us = f.per_step(
        sum(_num_or0(r.get("host_total_us")) for r in f.operators_matching(re.compile(r"^aten::item$")))
        or sum(_num_or0(r.get("host_total_us")) for r in f.operators_matching(_SCALAR_OP))
    )
    return recommendation(
        "host_sync",
        f"`.item()` {_times(per_step)} per step: free on the CPU, a wait for the GPU on one",
        summary=f"{per_step:.1f} reads of a tensor's value per step (aten::_local_scalar_dense), "
        f"{_ms(us)} per step here; on a CPU nothing is queued, so it costs only that, but on a GPU each "
        "one waits until every kernel queued before it has finished",
        numbers={
            "syncs_per_step": per_step,
            "top_op": "aten::_local_scalar_dense",
            "blocked_us_per_step": us,
            "blocked_pct": 100.0 * us / f.step_us,
        },
        bound_pct=100.0 * us / f.step_us,
        confidence="low",
        confidence_reason="the calls are measured; on this CPU run they cost only their own time, the "
        "wait they cause on a GPU is not measured here",
        fix=_sync_fix("aten::_local_scalar_dense", ""),
    )


def host_sync(f: Facts) -> Optional[Recommendation]:
    rows = f.syncs
    if not rows and f.num_steps and _cpu_only(f):
        return _cpu_scalar_reads(f)
    if not rows or f.num_steps == 0:
        return None
    per_step = f.per_step(sum(f.sync_count(r) for r in rows))
    idle = _unexplained_idle_pct(f)
    if per_step < SYNC_MIN_PER_STEP:
        return None
    by_op: dict[tuple, list[float]] = {}
    for r in rows:
        acc = by_op.setdefault((f.sync_op(r), f.sync_kind(r)), [0.0, 0.0])
        acc[0] += f.sync_count(r)
        acc[1] += f.sync_total_us(r)
    (op, call), (top_count, _) = max(by_op.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    top_op = op or call or "unknown call"
    wait_us = f.per_step(sum(f.sync_total_us(r) for r in rows))
    # Without the syncs the step cannot be shorter than the host's own work (the step minus the
    # time it sat blocked) nor than the GPU's: the saving is at most min(blocked, GPU idle).
    bound = min(100.0 * wait_us / f.step_us, idle) if f.step_us > 0 else 0.0
    if bound < SYNC_MIN_BOUND_PCT:
        return None
    return recommendation(
        "host_sync",
        f"The host waits for the GPU {per_step:.0f} times per step (mostly in {top_op})",
        summary=f"{per_step:.1f} host-blocking synchronisations per step ({f.per_step(top_count):.1f} in "
        f"{top_op}), {_ms(wait_us)} blocked per step; the GPU idles {idle:.0f}% of the step for "
        "reasons other than input loading",
        numbers={
            "syncs_per_step": per_step,
            "top_op": top_op,
            "top_op_syncs_per_step": f.per_step(top_count),
            "blocked_us_per_step": wait_us,
            "blocked_pct": 100.0 * wait_us / f.step_us,
            "gpu_idle_not_dataloader_pct": idle,
        },
        bound_pct=bound,
        confidence="high" if per_step >= 10 else "medium",
        confidence_reason="each sync drains the GPU's queue; the gain is bounded by both the host's "
        "blocked time and the GPU's idle time, both measured",
        fix=_sync_fix(op, call),
    )


# ---- launch_bound ---------------------------------------------------------------------------------
def launch_bound(f: Facts) -> Optional[Recommendation]:
    calls = f.kernel_calls
    if calls <= 0 or f.num_steps == 0:
        return None
    from .compiled import cuda_graphs

    if cuda_graphs(f) is not None:
        return None  # a compiled model: cuda_graphs says it with the compiled model's fix
    per_step = f.per_step(calls)
    mean_us = f.kernel_total_us / calls
    met = _launch_thresholds(f, mean_us, per_step)
    if met is None:
        return None
    host_pct, idle = met
    dl = f.dataloader
    batch = dl.get("batch_size") if dl else None
    bigger = f"batch_size={2 * batch} (now {batch})" if isinstance(batch, int) and batch else "a larger batch"
    return recommendation(
        "launch_bound",
        "Many short kernels: the GPU waits for the host to launch them",
        summary=f"{per_step:.0f} kernel launches per step averaging {mean_us:.1f} us each; the host spends "
        f"{host_pct:.0f}% of the step in launches and operators while the GPU idles {idle:.0f}%",
        numbers={
            "launches_per_step": per_step,
            "mean_kernel_us": mean_us,
            "runtime_pct": f.pct("runtime"),
            "cpu_exec_pct": f.pct("cpu_exec"),
            "gpu_idle_not_dataloader_pct": idle,
        },
        bound_pct=idle,
        confidence="medium",
        confidence_reason="short kernels and a busy host are measured; graphs remove launch cost, not "
        "the kernels' own time",
        fix="model = torch.compile(model, mode='reduce-overhead') (fuses kernels and replays them as a CUDA "
        f"graph), or capture the step with torch.cuda.graphs; or {bigger} so the same launches do "
        "more work each",
    )


# ---- small_batch ----------------------------------------------------------------------------------
def small_batch(f: Facts) -> Optional[Recommendation]:
    """A CPU run whose matrix operators do too little work per call for the fixed cost around each:
    Python, dispatch, autograd and the small operators between them take most of the step, and a
    larger batch spreads that cost over more samples (docs/advice.md#small_batch)."""
    if not _cpu_only(f) or f.num_steps == 0 or f.step_us <= 0:
        return None
    from .compute import _MATRIX_OP

    rows = [r for r in f.operators_matching(_MATRIX_OP) if _num_or0(r.get("flops")) > 0]
    calls = sum(_num_or0(r.get("calls")) for r in rows)
    if calls <= 0:
        return None  # no matrix work counted (a trace without shapes): nothing to size it by
    flops_per_call = sum(_num_or0(r.get("flops")) for r in rows) / calls
    python = f.median_own_share("other")
    step = f.median_step_us
    if flops_per_call >= SMALL_BATCH_MATRIX_FLOPS or python is None or not step:
        return None
    if 100.0 * python < SMALL_BATCH_MIN_PYTHON_PCT:
        return None  # the time is inside operators: not the per-call cost a batch amortizes
    # The saving per sample is at most what the step spends beyond its counted FLOPs at the CPU's
    # peak (the least a sample's work can take); without a peak, its time outside the loader's wait.
    peak, step_flops = f.flops_num("peak_tflops"), f.flops_num("per_step_flops")
    if peak and step_flops:
        least_us = step_flops / (peak * 1e6)
        bound = 100.0 * max(0.0, 1.0 - least_us / step)
    else:
        bound = 100.0 - f.pct("dataloader")
    factor = 2
    while factor < 64 and flops_per_call * factor < SMALL_BATCH_TARGET_FACTOR * SMALL_BATCH_MATRIX_FLOPS:
        factor *= 2
    batch = f.batch_size
    loader_batch = (f.dataloader or {}).get("batch_size")
    loader_batch = loader_batch if isinstance(loader_batch, int) and loader_batch > 0 else None
    op_calls = f.per_step(sum(_num_or0(r.get("calls")) for r in f.operators))
    mfu = f.flops_num("mfu_pct")
    numbers = {
        "matrix_flops_per_call": flops_per_call,
        "matrix_calls_per_step": f.per_step(calls),
        "operator_calls_per_step": op_calls,
        "python_pct": 100.0 * python,
        "median_step_us": step,
        "mfu_pct": mfu,
        "batch_size": batch,
        "samples_per_s": 1e6 * batch / step if batch else None,
        "batch_factor": factor,
    }
    return recommendation(
        "small_batch",
        "The batch is too small for the CPU: each operator call's fixed cost outweighs its work",
        summary=f"the matrix operators do {flops_per_call / 1e6:.2f} MFLOP per call on average "
        f"({f.per_step(calls):.0f} calls per step), while {100 * python:.0f}% of the typical step's own "
        f"time is Python outside any operator, around {op_calls:.0f} operator calls per step: costs per "
        "call, the same whatever the batch"
        + (f"; the step runs at {mfu:.1f}% of the CPU's estimated peak" if mfu is not None else "")
        + (f" (batch {batch}: {numbers['samples_per_s']:.0f} samples/s in the median step)" if batch else ""),
        numbers=numbers,
        bound_pct=bound,
        confidence="medium",
        confidence_reason="the matrix calls' work and the Python time around them are measured; how the "
        "per-sample time and the training's convergence change with a larger batch are not: compare "
        "samples/s (gpuprof diff) before keeping it",
        fix=f"{_bigger_batch(f, factor)}, so that each matrix call does about "
        f"{flops_per_call * factor / 1e6:.0f} MFLOP for the same per-call cost; scale the learning rate "
        "with the batch (linearly, with a warm-up) and watch the loss; then `gpuprof diff` the two runs' "
        "reports: it compares the time per sample when the batch size changed. The bound is per sample",
        change={"DataLoader": {"batch_size": loader_batch * factor}} if loader_batch else None,
    )
