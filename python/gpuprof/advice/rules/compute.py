"""Rules on the arithmetic itself: precision, memory layout, the optimizer's kernels, MFU."""

from __future__ import annotations

import re
from typing import Optional

from .._facts import Facts, row_name
from .base import (
    FUSABLE_MIN_CPU_PCT,
    FUSABLE_MIN_PCT,
    LAYOUT_MIN_PCT,
    LOW_MFU_CPU_MATMUL_PCT,
    LOW_MFU_CPU_PCT,
    LOW_MFU_PCT,
    OPTIMIZER_MIN_PCT,
    SMALL_MATMUL_FLOPS,
    TENSOR_CORE_MIN_CC,
    Recommendation,
    _ms,
    _num_or0,
    recommendation,
)


# ---- mixed_precision / channels_last / optimizer --------------------------------------------------
def mixed_precision(f: Facts) -> Optional[Recommendation]:
    best = None
    for d in f.busy_devices:
        cc = f.compute_capability(d)
        eligible = f.device_num(d, "tc_eligible_pct")
        tc = f.device_num(d, "tensor_core_pct") or 0.0
        if cc is None or cc < TENSOR_CORE_MIN_CC or eligible is None or eligible <= 0:
            continue
        if tc >= 0.5 * eligible:
            continue  # already on tensor cores for most of the eligible work
        if best is None or eligible - tc > best[2] - best[3]:
            best = (d, cc, eligible, tc)
    if best is None:
        return None
    d, cc, eligible, tc = best
    bound = f.pct("kernel") * (eligible - tc) / 100.0
    name = d.get("name") or f"GPU {d.get('id', 0)}"
    if cc >= 8.0:
        fix = (
            "with torch.autocast('cuda', dtype=torch.bfloat16): loss = ... around the forward pass "
            "(bf16 needs no GradScaler); and torch.set_float32_matmul_precision('high') so the FP32 "
            f"matmuls that remain use TF32 ({name}, compute capability {cc:.1f}, has both)"
        )
    else:
        fix = (
            "with torch.autocast('cuda', dtype=torch.float16): loss = ... and scaler = "
            "torch.amp.GradScaler('cuda'); scaler.scale(loss).backward(); scaler.step(opt); "
            f"scaler.update() ({name}, compute capability {cc:.1f}, has FP16 tensor cores, no BF16/TF32)"
        )
    return recommendation(
        "mixed_precision",
        "Matrix and convolution work runs in FP32 on tensor-core hardware",
        summary=f"{eligible:.0f}% of kernel time is launched by tensor-core-eligible operators, "
        f"{tc:.0f}% runs on tensor cores ({name}, compute capability {cc:.1f})",
        numbers={
            "tc_eligible_pct": eligible,
            "tensor_core_pct": tc,
            "compute_capability": cc,
            "kernel_pct": f.pct("kernel"),
        },
        bound_pct=bound,
        confidence="high" if eligible >= 20 else "medium",
        confidence_reason="eligible operators and tensor-core kernels are measured; the gain depends on "
        "how compute-bound those kernels are",
        fix=fix,
    )


def channels_last(f: Facts) -> Optional[Recommendation]:
    if not f.has_convolutions or f.step_us <= 0:
        return None
    ccs = [f.compute_capability(d) for d in f.busy_devices]
    if not any(cc is not None and cc >= TENSOR_CORE_MIN_CC for cc in ccs):
        return None
    conv_us = f.per_step(f.layout_conversion_us)
    share = 100.0 * conv_us / f.step_us
    if share < LAYOUT_MIN_PCT:
        return None
    return recommendation(
        "channels_last",
        "Convolutions convert between NCHW and NHWC on every call",
        summary=f"layout-conversion kernels (nchwToNhwc/nhwcToNchw) take {_ms(conv_us)} per step, "
        f"{share:.1f}% of the step, in a convolution net on tensor-core hardware",
        numbers={"layout_conversion_us_per_step": conv_us, "layout_conversion_pct": share},
        bound_pct=share,
        confidence="medium",
        confidence_reason="the conversion kernels are measured; channels_last removes them when every "
        "layer supports it",
        fix="model = model.to(memory_format=torch.channels_last) and x = x.to(device, "
        "memory_format=torch.channels_last, non_blocking=True), with autocast on",
    )


_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step|optimizer\.step", re.IGNORECASE)
_FUSED_KERNEL = re.compile(r"fused_adam|fused_sgd|_fused_|FusedAdam|fused_adamw", re.IGNORECASE)
_FUSED_OP = re.compile(r"^aten::_fused_(adam|adamw|sgd|adagrad)", re.IGNORECASE)
_FOREACH_KERNEL = r"(?i)multi_tensor_apply"


def optimizer(f: Facts) -> Optional[Recommendation]:
    # torch's Optimizer.step#<Class>.step is a user range (the "ranges" table); reports and
    # hand-made tables that list it as an operator are read too.
    ranges = f.ranges_matching(_OPTIMIZER_STEP)
    rows = ranges or f.operators_matching(_OPTIMIZER_STEP)
    if (
        not rows
        or f.step_us <= 0
        or f.kernel_time_matching(_FUSED_KERNEL) > 0
        or f.operators_matching(_FUSED_OP)
    ):  # already fused (on the CPU: no kernels, the op)
        return None
    own = f.range_own_us if ranges else f.operator_time_us
    opt_us = f.per_step(sum(own(r) for r in rows))
    share = 100.0 * opt_us / f.step_us
    if share < OPTIMIZER_MIN_PCT:
        return None
    m = re.search(r"#(\w+)\.step", row_name(rows[0]))
    cls = m.group(1) if m else "YourOptimizer"
    foreach = f.kernel_time_matching(_FOREACH_KERNEL) > 0
    on_gpu = f.ran_gpu_work
    if cls in ("Adam", "AdamW", "SGD", "Adagrad") and (on_gpu or foreach):
        change = f"torch.optim.{cls}(params, ..., fused=True)"
        how = "one fused kernel per parameter group instead of several per parameter"
    else:
        change = f"torch.optim.{cls}(params, ..., foreach=True)"
        how = "one multi-tensor kernel per step over all parameters instead of a loop per parameter"
    return recommendation(
        "optimizer",
        f"The optimizer step ({cls}) takes {share:.0f}% of the step",
        summary=f"{cls}.step takes {_ms(opt_us)} per step ({share:.1f}%)"
        + ("; it already uses foreach (multi_tensor_apply) kernels" if foreach else ""),
        numbers={
            "optimizer": cls,
            "optimizer_us_per_step": opt_us,
            "optimizer_pct": share,
            "foreach_kernels": foreach,
        },
        bound_pct=share,
        confidence="medium" if f.live or foreach else "low",
        confidence_reason="the optimizer's time is measured; fused/foreach removes its per-parameter "
        "overhead, not its arithmetic"
        + (
            ""
            if f.live or foreach
            else "; measured from a torch.profiler trace, which adds its own recording cost to each of "
            "the many small operators a per-parameter loop runs: a live gpuprof run of the same loop "
            "can measure less (pytorch/examples mnist on a CPU: Adadelta.step 9.8 ms per step in the "
            "trace, 5.4 ms live), and this rule fires at 15%"
        ),
        fix=f"{change}: {how}",
    )


# ---- low_mfu --------------------------------------------------------------------------------------
_LOW_PRECISION = ("bf16", "fp16", "tf32", "fp8", "int8")
# What a compiler fuses: pointwise operators (activations, dropout, arithmetic) and normalisations,
# forward and backward. Matrix products and convolutions stay calls into cuBLAS/cuDNN/oneDNN.
_FUSABLE_OP = (
    r"^aten::(relu|gelu|silu|sigmoid|tanh|hardtanh|leaky_relu|elu|threshold|clamp|clamp_min|clamp_max|"
    r"(native_)?dropout|bernoulli|add|sub|rsub|mul|div|neg|exp|log|pow|sqrt|rsqrt|where|masked_fill|"
    r"(native_|cudnn_|miopen_)?(layer|batch|group)_norm|_batch_norm_impl_index|(_fused_)?rms_norm|"
    r"_?(log_)?softmax)(_backward(_data)?)?_?$"
)
_MATRIX_OP = r"conv|^aten::(_?(add)?b?mm|addmv|mv|matmul|linear|dot|vdot|_?scaled_|.*attention)"


def _fusable_pct(f: Facts) -> float:
    """The share of the step in operators a compiler would fuse, outside the optimizer (which
    torch.compile(model) does not compile): their own time, on the device where the work ran there,
    else on the host less the optimizer's own time (a for-loop optimizer's updates are pointwise too)."""
    device = f.ran_gpu_work
    key = "device_self_us" if device else "host_self_us"
    us = sum(_num_or0(r.get(key)) for r in f.operators_matching(_FUSABLE_OP))
    if not device:
        us -= sum(f.range_own_us(r) for r in f.ranges_matching(_OPTIMIZER_STEP))
    total = f.step_us * max(f.num_steps, 1)
    return max(0.0, 100.0 * us / total) if total > 0 else 0.0


def _outside_text(f: Facts) -> str:
    """The three longest operators outside matrix-class work, by their own time, as shares of the step."""
    key = "device_self_us" if f.ran_gpu_work else "host_self_us"
    total = f.step_us * max(f.num_steps, 1)
    rows = sorted(
        (r for r in f.operators if not re.search(_MATRIX_OP, row_name(r)) and _num_or0(r.get(key)) > 0),
        key=lambda r: -_num_or0(r.get(key)),
    )[:3]
    if not rows or total <= 0:
        return "other operators"
    return ", ".join(f"{row_name(r)} {100.0 * _num_or0(r.get(key)) / total:.0f}%" for r in rows)


def low_mfu(f: Facts) -> Optional[Recommendation]:
    mfu = f.flops_num("mfu_pct")
    peak = f.flops_num("peak_tflops")
    if mfu is None or peak is None:
        return None  # no peak known (the report's note says how to give it): no MFU to judge
    estimate = f.flops.get("peak_estimate") is True
    matmul_pct = f.flops_num("matmul_time_pct") or 0.0
    if estimate:
        # A CPU's peak is an estimate from its ISA and clock; small training loops never near it.
        # The rule speaks only where matrix work fills most of the step and still runs far below.
        if mfu >= LOW_MFU_CPU_PCT or matmul_pct < LOW_MFU_CPU_MATMUL_PCT:
            return None
    elif mfu >= LOW_MFU_PCT:
        return None
    dtype = str(f.flops.get("dtype") or "unknown")
    rows = [r for r in f.roofline if r.get("flop_class") == "matmul"]
    mm_us = sum(_num_or0(r.get("time_us")) for r in rows)

    def share(pred) -> float:
        return 100.0 * sum(_num_or0(r.get("time_us")) for r in rows if pred(r)) / mm_us if mm_us > 0 else 0.0

    memory_bound = share(lambda r: r.get("bound") == "memory")
    small = share(
        lambda r: _num_or0(r.get("flops")) / max(_num_or0(r.get("calls")), 1.0) < SMALL_MATMUL_FLOPS
    )
    tc = f.flops_num("tensor_core_pct")
    # Each gap as a share of the step: the most that closing it could give back. Waiting for the
    # input pipeline and for communication is the dataloader and communication rules' own.
    waits = f.pct("dataloader") + f.pct("communication")
    gaps = {
        "outside": max(0.0, 100.0 - matmul_pct - waits),
        "memory_bound": matmul_pct * memory_bound / 100.0,
        "small": matmul_pct * small / 100.0,
        "tensor_cores": matmul_pct * (100.0 - tc) / 100.0
        if tc is not None and dtype in _LOW_PRECISION and tc < 50.0
        else 0.0,
    }
    where = max(gaps, key=lambda k: gaps[k])
    fusable = _fusable_pct(f)
    compile_helps = fusable >= (FUSABLE_MIN_CPU_PCT if estimate else FUSABLE_MIN_PCT)
    peak_text = f"the {dtype} dense peak {peak:.4g} TFLOP/s" + (
        " (an estimate: this machine's CPU, from its ISA, clock and cores)" if estimate else ""
    )
    said = {
        "outside": f"{gaps['outside']:.0f}% of the step runs outside matrix-class operators (products, "
        "convolutions, attention: what the peak is for), beside the input pipeline and communication",
        "memory_bound": f"{memory_bound:.0f}% of the matrix operators' time is in operators below the ridge "
        "point (memory-bound: too few FLOPs per byte moved)",
        "small": f"{small:.0f}% of the matrix operators' time is in calls smaller than a 256-cube product",
        "tensor_cores": f"{dtype} matrix work, but only {tc or 0:.0f}% of it runs on tensor cores",
    }
    fixes = {
        "outside": f"fuse the elementwise and normalization work around the matrix operators ({fusable:.0f}% "
        "of the step): model = torch.compile(model); host synchronisations and launch gaps, where the other "
        "recommendations name them, count here too"
        if compile_helps
        else f"only {fusable:.0f}% of the step is work a compiler fuses (pointwise and normalisation "
        "operators), so torch.compile has little to remove here; the time goes to "
        + _outside_text(f)
        + "; host synchronisations, launch gaps and the optimizer, where the other recommendations name "
        "them, are part of it",
        "memory_bound": "give the matrix operators more work per byte: a larger batch (or sequence) per "
        "step, wider layers, bf16 inputs (half the bytes)"
        + (", and fuse what surrounds them: torch.compile(model)" if compile_helps else ""),
        "small": "batch the small products: a larger batch per step, one torch.bmm over many small "
        "matrices"
        + (
            ""
            if estimate
            else ", and torch.compile(model, mode='reduce-overhead') (CUDA graphs) against launch gaps"
        ),
        "tensor_cores": "align the matrix sizes to multiples of 8 (16 for fp8) so cuBLAS/cuDNN pick "
        "tensor-core kernels, and check torch.backends.cudnn.allow_tf32 / "
        "torch.set_float32_matmul_precision('high') for fp32 work",
    }
    fix = fixes[where]
    if estimate and (where != "outside" or compile_helps):
        fix += (
            "; the gain is an estimate: profile the changed run too and keep the change only if "
            "`gpuprof diff <this run> <changed run>` shows faster steps"
        )
    return recommendation(
        "low_mfu",
        f"Model FLOPs utilization is {mfu:.1f}% of the peak" + (" (estimated)" if estimate else ""),
        summary=f"MFU {mfu:.1f}% against {peak_text}; the largest gap: {said[where]}",
        numbers={
            "mfu_pct": mfu,
            "hfu_pct": f.flops_num("hfu_pct"),
            "peak_tflops": peak,
            "peak_estimate": estimate,
            "dtype": dtype,
            "matmul_time_pct": matmul_pct,
            "outside_matmul_pct": gaps["outside"],
            "memory_bound_matmul_pct": memory_bound,
            "small_matmul_pct": small,
            "tensor_core_pct": tc,
            "fusable_pct": fusable,
        },
        bound_pct=gaps[where],
        confidence="low" if estimate else "medium",
        confidence_reason="the peak is an estimate (this CPU's ISA, clock and cores), so is MFU"
        if estimate
        else "FLOPs, times and the peak are measured or from the vendor's table; the roofline shares come "
        "from the 20 longest operators with FLOPs",
        fix=fix,
    )
