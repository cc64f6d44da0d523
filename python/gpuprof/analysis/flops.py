"""FLOPs, achieved TFLOPS, MFU and HFU, and each operator's place on the roofline.

The FLOPs of every operator call are counted in the native pass (cpp/src/analysis/flops.cpp, with
torch's FlopCounterMode rules); here they meet the step times and the peak (``peaks``: the
vendor table for a known device, an estimate for this machine's CPU, or the peak the user gave)
and become the report's ``flops`` section and ``roofline`` rows. docs/metrics.md ("FLOPs", "MFU
and HFU", "Roofline") defines every number. Pure Python over plain dicts: no torch.
"""

from __future__ import annotations

import time
from typing import Optional

from . import peaks

# The roofline rows a report keeps (the longest by time); the shares cover every row.
ROOFLINE_TOP = 20
# fp32 matrix work whose kernels run on tensor cores at least this share of their time is TF32.
TF32_TC_SHARE_PCT = 50.0
PEAK_HINT = "gpuprof.profile(peak_tflops=...) or gpuprof analyze --peak-tflops N"


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


# ---- the peak ---------------------------------------------------------------------------------------
class Peak:
    """The dense peak MFU and HFU divide by, and the memory bandwidth of the roofline: with where
    each came from. ``tflops`` None: unknown (``reason`` says why and how to give it)."""

    __slots__ = ("tflops", "source", "estimate", "bandwidth_gbps", "bandwidth_source", "reason")

    def __init__(
        self,
        tflops: Optional[float],
        source: Optional[str],
        *,
        estimate: bool = False,
        bandwidth_gbps: Optional[float] = None,
        bandwidth_source: Optional[str] = None,
        reason: str = "",
    ):
        self.tflops = tflops
        self.source = source
        self.estimate = estimate
        self.bandwidth_gbps = bandwidth_gbps
        self.bandwidth_source = bandwidth_source
        self.reason = reason


_CPU_BANDWIDTH: Optional[float] = None


def cpu_memory_bandwidth_gbps() -> Optional[float]:
    """This machine's memory bandwidth, measured once per process: the best of five copies of a
    64 MiB buffer (read and write: 128 MiB moved per copy), in GB/s. One thread, so an estimate
    below what all cores reach (STREAM's figure); labelled so wherever it is shown."""
    global _CPU_BANDWIDTH
    if _CPU_BANDWIDTH is None:
        size = 64 << 20
        try:
            src = bytearray(size)
            dst = bytearray(size)
            view = memoryview(dst)
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                view[:] = src
                best = min(best, time.perf_counter() - t0)
            _CPU_BANDWIDTH = 2 * size / best / 1e9 if best > 0 else 0.0
        except MemoryError:
            _CPU_BANDWIDTH = 0.0
    return _CPU_BANDWIDTH or None


def choose_peak(
    *,
    dtype: str,
    device_names: list[str],
    live_cpu: bool,
    user_peak_tflops: Optional[float] = None,
) -> Peak:
    """The peak for ``dtype`` ("bf16", "fp32", "tf32"... or "unknown") on the devices that ran the
    step's kernels (``device_names``, one per device), on this machine's CPU (``live_cpu``: a live
    session without GPU work), or the one the user gave."""
    want = "fp32" if dtype in ("unknown", "other") else dtype
    matches = [peaks.match_device(n) for n in device_names]
    bandwidth = bandwidth_source = None
    if matches and all(m.known for m in matches):
        bws = [m.memory_bandwidth_gbps for m in matches]
        if all(b is not None for b in bws):
            bandwidth = sum(bws)
            bandwidth_source = f"{matches[0].rows[0].source} ({matches[0].device})"
    if user_peak_tflops is not None:
        if not (user_peak_tflops > 0):
            raise ValueError(f"peak_tflops must be a positive number of TFLOPS, got {user_peak_tflops!r}")
        if bandwidth is None and live_cpu:
            bandwidth = cpu_memory_bandwidth_gbps()
            bandwidth_source = (
                "measured on this machine (one thread's copy; an estimate)" if bandwidth else None
            )
        return Peak(
            float(user_peak_tflops),
            f"given by the user (peak_tflops={user_peak_tflops:g})",
            bandwidth_gbps=bandwidth,
            bandwidth_source=bandwidth_source,
        )
    if matches:
        unknown = [m for m in matches if not m.known]
        if unknown:
            return Peak(
                None, None, reason=unknown[0].reason.replace(peaks.MANUAL_PEAK_HINT, f"pass it: {PEAK_HINT}")
            )
        rows = [m.dense_peak(want) for m in matches]
        if any(r is None for r in rows):
            return Peak(
                None,
                None,
                bandwidth_gbps=bandwidth,
                bandwidth_source=bandwidth_source,
                reason=f"the peak table has no dense {want} figure for the {matches[0].device} "
                f"(its vendor gives none); pass it: {PEAK_HINT}",
            )
        total = sum(r.per_device for r in rows)
        r0, m0 = rows[0], matches[0]
        per = f", one of {r0.devices_per_package} devices per package" if r0.devices_per_package > 1 else ""
        count = f"{len(rows)} x " if len(rows) > 1 else ""
        return Peak(
            total,
            f"{r0.source}: {count}{m0.device} {want} dense {r0.per_device:g} {r0.unit}{per}",
            bandwidth_gbps=bandwidth,
            bandwidth_source=bandwidth_source,
        )
    if live_cpu:
        cpu = peaks.cpu_peak()
        value = cpu.fp64_tflops if want == "fp64" else cpu.fp32_tflops
        if value is None:
            return Peak(None, None, estimate=True, reason=f"{cpu.derivation} Pass it: {PEAK_HINT}")
        as_fp32 = (
            f" ({want} work is measured against the fp32 figure)" if want not in ("fp32", "fp64") else ""
        )
        bw = cpu_memory_bandwidth_gbps()
        return Peak(
            value,
            f"{cpu.derivation}{as_fp32}",
            estimate=True,
            bandwidth_gbps=bw,
            bandwidth_source="measured on this machine (one thread's copy of 64 MiB; an estimate)"
            if bw
            else None,
        )
    return Peak(
        None,
        None,
        reason="the trace ran no GPU kernels and does not say which CPU ran it, so there is no peak to "
        f"divide by; pass it: {PEAK_HINT}",
    )


# ---- the section ------------------------------------------------------------------------------------
def _dominant_dtype(steps: list[dict]) -> tuple[str, dict]:
    """The dtype that carries most matrix-class FLOPs, and each dtype's mean per step."""
    by: dict[str, int] = {}
    for s in steps:
        for k, v in (s.get("matmul_flops_by_dtype") or {}).items():
            by[k] = by.get(k, 0) + int(v)
    if not by:
        return "unknown", by
    per_step = {k: round(v / len(steps)) for k, v in by.items()}
    return max(by.items(), key=lambda kv: kv[1])[0], per_step


def _tensor_core_share(operators: list[dict]) -> Optional[float]:
    """Tensor-core kernels' share of the device time of the tensor-core-eligible operators (%)."""
    num = den = 0.0
    for r in operators:
        if not r.get("tc_eligible"):
            continue
        t = r.get("device_total_us") or 0.0
        pct = r.get("tc_total_pct")
        if t > 0 and isinstance(pct, (int, float)):
            num += pct * t
            den += t
    return num / den if den > 0 else None


def _step_rows(native_steps, steps) -> list[dict]:
    """The native per-step FLOPs rows of the analysed steps, in their order (a windowed read's on
    disk, as its steps are)."""
    from .spill import by_step, rows_like

    row_of = by_step(native_steps)
    return rows_like(
        (r for r in map(row_of, (s["step"] for s in steps)) if r is not None), steps, native_steps
    )


def flops_section(
    native_flops: dict,
    steps: list[dict],
    operators: list[dict],
    *,
    device_names: list[str],
    live: bool,
    tf32_capable: bool = False,
    user_peak_tflops: Optional[float] = None,
    float32_matmul_precision: Optional[str] = None,
) -> tuple[dict, list[dict]]:
    """The report's ``flops`` section and ``roofline`` rows, from the native pass's per-step FLOPs
    (``native_flops``: gpu_tables(...)["flops"]), the analysed steps (their times) and operator rows,
    and what the peak is chosen from (``choose_peak``): ``live`` for a live session (its CPU is this
    machine's), ``tf32_capable`` when the devices have TF32 tensor cores (NVIDIA, compute
    capability 8.0 and later)."""
    rows = _step_rows(native_flops.get("steps", []), steps)
    step_us = _mean([s["total_us"] for s in steps])
    n = len(rows)

    def mean_of(key: str) -> float:
        return _mean([r[key] for r in rows]) if rows else 0.0

    dtype, by_dtype = _dominant_dtype(rows)
    tc_share = _tensor_core_share(operators)
    if dtype == "fp32" and tf32_capable:
        # fp32 matrix work on tensor cores is TF32 (torch.backends.cuda.matmul.allow_tf32, or
        # set_float32_matmul_precision('high')): its peak is the tf32 row.
        if float32_matmul_precision in ("high", "medium") or (
            float32_matmul_precision is None and tc_share is not None and tc_share >= TF32_TC_SHARE_PCT
        ):
            dtype = "tf32"
    peak = choose_peak(
        dtype=dtype,
        device_names=device_names,
        live_cpu=live and not device_names,
        user_peak_tflops=user_peak_tflops,
    )

    counted = native_flops.get("counted_calls", 0)
    uncounted = native_flops.get("uncounted_calls", 0)
    uncounted_matmul = sum(r["uncounted_matmul_calls"] for r in rows)
    measured = n > 0 and (counted > 0 or uncounted == 0)
    per_step_flops = round(mean_of("flops")) if measured else None
    training = n > 0 and sum(1 for r in rows if r["backward_ran"]) * 2 > n
    fwd = mean_of("matmul_forward_flops")
    model = round((3 if training else 1) * fwd) if measured else None
    seconds = step_us / 1e6
    tflops = per_step_flops / seconds / 1e12 if per_step_flops is not None and seconds > 0 else None
    mfu = hfu = None
    if peak.tflops and seconds > 0 and measured:
        mfu = 100.0 * model / seconds / (peak.tflops * 1e12)
        hfu = 100.0 * per_step_flops / seconds / (peak.tflops * 1e12)

    # The roofline: each row memory- or compute-bound against the ridge point.
    ridge = None
    if peak.tflops and peak.bandwidth_gbps:
        ridge = peaks.ridge_flop_per_byte(peak.tflops, peak.bandwidth_gbps)
    all_rows = list(native_flops.get("roofline", []))
    memory_us = compute_us = unknown_us = matmul_us = 0.0
    for r in all_rows:
        i = r.get("intensity_flop_per_byte")
        r["bound"] = None if ridge is None or i is None else ("memory" if i < ridge else "compute")
        t = r.get("time_us") or 0.0
        if r["bound"] == "memory":
            memory_us += t
        elif r["bound"] == "compute":
            compute_us += t
        else:
            unknown_us += t
        if r.get("flop_class") == "matmul":
            matmul_us += t
    roofline_us = memory_us + compute_us + unknown_us
    span_us = step_us * len(steps)

    notes = []
    shapes_hint = (
        "gpuprof.profile(record_shapes=True)" if live else "torch.profiler.profile(record_shapes=True, ...)"
    )
    if not measured:
        notes.append(
            f"no FLOPs: {uncounted} calls of operators whose FLOPs gpuprof counts have no recorded input "
            f"shapes; record them with {shapes_hint}"
        )
    elif uncounted_matmul:
        notes.append(
            f"{uncounted_matmul} calls of matrix-class operators had no recorded inputs and are not counted"
        )
    uncounted_other = sum(r["uncounted_calls"] - r["uncounted_matmul_calls"] for r in rows)
    if measured and uncounted_other:
        notes.append(
            f"{uncounted_other} calls of elementwise and reduction operators have no recorded input shapes, "
            f"so their FLOPs are not counted: {shapes_hint} counts them"
        )
    if peak.tflops is None:
        notes.append(f"no peak, so no MFU: {peak.reason}")
    elif peak.estimate:
        notes.append("the peak is an estimate (this machine's CPU), and so are MFU and HFU")
        if hfu is not None and hfu > 100.0:
            # The estimate's clock is the one the machine reports; a virtual machine often reports
            # its base clock while the cores run faster (a GEMM loop here reached 103%).
            fix = "gpuprof.profile(peak_tflops=N)" if live else "gpuprof analyze PATH --peak-tflops N"
            notes.append(
                f"HFU is above 100%: the cores ran faster than the estimate's clock ({peak.source}); "
                f"give the peak you know with {fix}"
            )
    section = {
        "per_step_flops": per_step_flops,
        "tflops_per_s": tflops,
        "peak_tflops": peak.tflops,
        "peak_source": peak.source,
        "peak_estimate": peak.estimate,
        "dtype": dtype,
        "mfu_pct": mfu,
        "hfu_pct": hfu,
        "model_flops_per_step": model,
        "training": training,
        "matmul_flops_per_step": round(mean_of("matmul_flops")) if measured else None,
        "matmul_forward_flops_per_step": round(fwd) if measured else None,
        "other_flops_per_step": round(mean_of("other_flops")) if measured else None,
        "forward_flops_per_step": round(mean_of("forward_flops")) if measured else None,
        "backward_flops_per_step": round(mean_of("backward_flops")) if measured else None,
        "recompute_flops_per_step": round(mean_of("recompute_flops")) if measured else None,
        "matmul_flops_by_dtype": by_dtype,
        "counted_calls": counted,
        "uncounted_calls": uncounted,
        "uncounted_by_op": dict(
            sorted((native_flops.get("uncounted_by_op") or {}).items(), key=lambda kv: -kv[1])[:10]
        ),
        "trace_flops_checked": native_flops.get("trace_flops_checked", 0),
        "trace_flops_differ": native_flops.get("trace_flops_differ", 0),
        "memory_bandwidth_gbps": peak.bandwidth_gbps,
        "bandwidth_source": peak.bandwidth_source,
        "ridge_flop_per_byte": ridge,
        "memory_bound_pct": 100.0 * memory_us / roofline_us if ridge and roofline_us > 0 else None,
        "compute_bound_pct": 100.0 * compute_us / roofline_us if ridge and roofline_us > 0 else None,
        "matmul_time_pct": 100.0 * matmul_us / span_us if span_us > 0 and measured else None,
        "tensor_core_pct": tc_share,
        "note": "; ".join(notes),
    }
    for k in ("mfu_pct", "hfu_pct", "memory_bound_pct", "compute_bound_pct", "matmul_time_pct"):
        if isinstance(section[k], float):
            section[k] = float(f"{section[k]:.6g}")  # six significant digits: a CPU's MFU can be 0.02%
    if isinstance(ridge, float):
        section["ridge_flop_per_byte"] = round(ridge, 3)
    return section, all_rows[:ROOFLINE_TOP]
