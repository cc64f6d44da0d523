"""What every rule shares: the thresholds, the recommendation record, and small formatters.

The thresholds are the rules' triggers; docs/advice.md states each and where it came from (the
plugin's, where it had one). Keep the two in step.
"""

from __future__ import annotations

from typing import Callable, Optional

from .._facts import Facts

# Thresholds (docs/advice.md gives the plugin's: DataLoader > 5%, communication > 10%,
# utilization < 50%, memory > 90%).
DATALOADER_PCT = 5.0
COMMUNICATION_PCT = 10.0
# critical_path: the share of the steps' chains one fixable cause must take to be named
CRITICAL_PATH_MIN_PCT = 30.0
LOW_UTILIZATION_PCT = 50.0
MEMORY_HIGH_PCT = 90.0
MEMORY_LOW_PCT = 50.0  # peak below this share of capacity = room for a larger batch
LOW_SM_EFFICIENCY_PCT = 50.0
MEMORY_HEADROOM_PCT = 80.0  # a larger batch is sized to fill this share of device memory
FRAGMENTATION_MIN_PCT = 25.0  # reserved but unallocated at the peak, % of reserved
FRAGMENTATION_MIN_BYTES = 1 << 30
FRAGMENTATION_NEAR_FULL_PCT = 80.0  # reserved at the peak, % of device memory
COPY_MIN_PCT = 1.0  # pageable copies below 1% of the step are not worth a rule
SYNC_MIN_PER_STEP = 1.0
SYNC_MIN_BOUND_PCT = 1.0  # below this a logging .item() per step is not worth a rule
UNEXPLAINED_IDLE_MIN_PCT = 5.0
LAUNCH_MAX_MEAN_KERNEL_US = 20.0
LAUNCH_MIN_PER_STEP = 100.0
LAUNCH_MIN_HOST_PCT = 20.0
OPTIMIZER_MIN_PCT = 15.0
LAYOUT_MIN_PCT = 1.0
TENSOR_CORE_MIN_CC = 7.0
LOW_MFU_PCT = 30.0  # an accelerator's MFU below this: where is the gap
LOW_MFU_CPU_PCT = 10.0  # a CPU's (estimated peak): only when matrix work fills the step
LOW_MFU_CPU_MATMUL_PCT = 50.0
# torch.compile is named only where the work it fuses (pointwise and normalisation operators, outside
# the optimizer) takes this share of the step. On a CPU, more: inductor keeps convolutions and
# products as oneDNN calls and ATen's pointwise kernels are already vectorised (pytorch/examples
# mnist: 14% of the step in such work, and compiled, its steps were 18% slower).
FUSABLE_MIN_PCT = 10.0
FUSABLE_MIN_CPU_PCT = 25.0
SMALL_MATMUL_FLOPS = 2 * 256**3
# torch.compile: recompilations of one function inside the span from which it is a storm (Dynamo's
# own cache holds 8 per frame before it gives up and runs the frame eagerly).
RECOMPILE_MIN = 2  # a matrix-class call below a 256 x 256 x 256 product is small
# torch.compile: the operators Inductor left to eager kernels inside its graphs, as a share of the
# span's time, from which they are worth a rule (their calls outside the graphs count too: a bound).
FALLBACK_MIN_PCT = 5.0
# small_batch (a CPU run): the matrix operators' mean work per call below which the batch is too small
# to pay for each operator call's fixed cost. One CPU core multiplies at about 50-100 GFLOP/s, so
# 2 MFLOP is 20-40 us of work: about what the dispatch, autograd and Python around each matrix call
# of a training step cost (an MLP at batch 2: 48 us of step per matrix call, 12 of them in the call).
SMALL_BATCH_MATRIX_FLOPS = 2e6
# ... and the typical (median) step's Python time outside any operator, as a share of its time
# outside the DataLoader's wait, from which the per-call cost is worth a rule: an MLP measured
# 38-41% at batch 2 under loads up to 7, 37% at 8, 24% at 32, 6% at 256.
SMALL_BATCH_MIN_PYTHON_PCT = 20.0
# The suggested batch gives each matrix call this multiple of the threshold's work (at most 64x).
SMALL_BATCH_TARGET_FACTOR = 4.0

Recommendation = dict
Rule = Callable[[Facts], Optional[Recommendation]]


def recommendation(
    rule: str,
    title: str,
    *,
    summary: str,
    numbers: dict,
    bound_pct: float,
    confidence: str,
    confidence_reason: str,
    fix: str,
    change: Optional[dict] = None,
) -> Recommendation:
    evidence = {"summary": summary}
    evidence.update({k: (round(v, 2) if isinstance(v, float) else v) for k, v in numbers.items()})
    return {
        "rule": rule,
        "title": title,
        "evidence": evidence,
        "saving_bound_pct": round(max(0.0, min(100.0, bound_pct)), 1),
        "confidence": confidence,
        "confidence_reason": confidence_reason,
        "fix": fix,
        "docs": f"docs/advice.md#{rule}",
        # The fix's settings as data, for tools that apply it (the demo's second run does).
        **({"change": change} if change else {}),
    }


def _ms(us: float) -> str:
    return f"{us / 1000.0:.1f} ms" if us >= 1000 else f"{us:.0f} us"


def _unexplained_idle_pct(f: Facts) -> float:
    """GPU idle share of the step that waiting for the DataLoader does not explain."""
    return max(0.0, f.gpu_idle_pct - f.pct("dataloader"))


def _launch_thresholds(f: Facts, mean_us: float, per_step: float) -> Optional[tuple[float, float]]:
    """launch_bound's shape, which cuda_graphs shares: short kernels (mean under
    LAUNCH_MAX_MEAN_KERNEL_US), many a step, the host busy in launches and operators and the GPU idle
    for reasons input does not explain. (host %, unexplained GPU idle %) when met, else None."""
    host_pct = f.pct("runtime") + f.pct("cpu_exec")
    idle = _unexplained_idle_pct(f)
    if (
        mean_us >= LAUNCH_MAX_MEAN_KERNEL_US
        or per_step < LAUNCH_MIN_PER_STEP
        or host_pct < LAUNCH_MIN_HOST_PCT
        or idle < 2 * UNEXPLAINED_IDLE_MIN_PCT
    ):
        return None
    return host_pct, idle


def _mean_device(f: Facts, key: str) -> Optional[float]:
    vals = [f.device_num(d, key) for d in f.busy_devices]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def _num_or0(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _bigger_batch(f: Facts, factor: int) -> str:
    dl = f.dataloader
    batch = dl.get("batch_size") if dl else None
    if isinstance(batch, int) and batch:
        return f"DataLoader(..., batch_size={batch * factor}) (now {batch})"
    return f"a {factor}x larger batch"
