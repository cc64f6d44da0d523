"""FLOPs, MFU and the roofline (docs/metrics.md), as lines."""

from __future__ import annotations

from typing import Any

from ...analysis import section
from .tables import fmt_flops, printable


def flops(data: dict) -> dict:
    """The report's ``flops`` section; {} for a report made before gpuprof counted FLOPs."""
    f = data.get("flops")
    return f if isinstance(f, dict) else {}


def roofline(data: dict) -> list[dict]:
    return section(data, "roofline")


def _pct(v: Any) -> str:
    return f"{v:.1f}%" if isinstance(v, (int, float)) else "?"


def flops_lines(data: dict) -> list[str]:
    """The FLOPs section in sentences: FLOPs per step and achieved rate, MFU and HFU against which
    peak (or why there is none), and the roofline's memory-bound share. [] without the section."""
    f = flops(data)
    if not f:
        return []
    lines = []
    per_step = f.get("per_step_flops")
    if per_step is None:
        lines.append("FLOPs: not counted")
    else:
        parts = []
        if isinstance(f.get("matmul_flops_per_step"), (int, float)):
            parts.append(f"matrix {fmt_flops(f['matmul_flops_per_step'])}")
        if f.get("other_flops_per_step"):
            parts.append(f"other {fmt_flops(f['other_flops_per_step'])}")
        if f.get("recompute_flops_per_step"):
            parts.append(f"recomputed forward {fmt_flops(f['recompute_flops_per_step'])}")
        rate = f.get("tflops_per_s")
        lines.append(
            f"FLOPs per step: {fmt_flops(per_step)}"
            + (f" ({', '.join(parts)})" if parts else "")
            + (f"; achieved {rate:.4g} TFLOP/s" if isinstance(rate, (int, float)) else "")
        )
    peak = f.get("peak_tflops")
    if isinstance(peak, (int, float)) and isinstance(f.get("mfu_pct"), (int, float)):
        est = " (an estimate)" if f.get("peak_estimate") else ""
        lines.append(
            f"MFU {_pct(f['mfu_pct'])}, HFU {_pct(f.get('hfu_pct'))} of the "
            f"{printable(f.get('dtype'))} dense "
            f"peak {peak:.4g} TFLOP/s{est}: {printable(f.get('peak_source') or '')}"
        )
    ridge = f.get("ridge_flop_per_byte")
    if isinstance(ridge, (int, float)) and isinstance(f.get("memory_bound_pct"), (int, float)):
        bw = f.get("memory_bandwidth_gbps")
        lines.append(
            f"Roofline: {_pct(f['memory_bound_pct'])} of the time of operators with FLOPs is memory-bound "
            f"(ridge {ridge:.3g} FLOP/byte"
            + (f" = {peak:.4g} TFLOP/s / {bw:,.0f} GB/s" if isinstance(bw, (int, float)) else "")
            + ")"
        )
    if f.get("note"):
        lines.append(printable(f["note"]))
    return lines
