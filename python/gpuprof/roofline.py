"""Roofline sweep with the polynomial kernel: ``python -m gpuprof.roofline``.

``b[i] = a[i] + a[i]^2 + ... + a[i]^k`` does k fused multiply-adds (2k flop) per 8 bytes moved, so
its arithmetic intensity is k/4 flop/byte: small k is bound by memory bandwidth, large k by FP32
throughput. For each k the kernel is warmed up, then timed with CUDA events over repeated runs; the
table gives the median run's GFLOP/s and GB/s against the device's theoretical peaks, and flags a k
whose run-to-run spread exceeds 5% (the figures are then not trustworthy: another process on the
GPU, clocks still ramping, thermal throttling).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from dataclasses import dataclass

SPREAD_WARN_PCT = 5.0
DEFAULT_KS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)


def fp32_lanes_per_sm(major: int, minor: int) -> int:
    """FP32 units per SM (CUDA C Programming Guide, arithmetic instruction throughput table)."""
    if (major, minor) in ((6, 0), (7, 0), (7, 2), (7, 5), (8, 0)):
        return 64  # P100, Volta, Turing, A100
    if major >= 5:
        return 128  # Maxwell, other Pascal, GA10x, Ada, Hopper, Blackwell
    return 192  # Kepler


def peak_gflops(info: dict) -> float:
    major, minor = info["compute_capability"]
    return info["sm_count"] * fp32_lanes_per_sm(major, minor) * 2 * info["clock_khz"] * 1e3 / 1e9


def peak_gbps(info: dict) -> float:
    # Double data rate: two transfers per memory clock over the whole bus.
    return 2 * info["memory_clock_khz"] * 1e3 * info["memory_bus_bits"] / 8 / 1e9


def datasheet_line(name: str) -> str:
    """The vendor's FP32 (vector units: this kernel's FMAs) and bandwidth figures for the device, from
    gpuprof's peak table (docs/metrics.md, "Peaks"), beside the peaks computed from its clocks, and the
    ridge point the reports' roofline uses for fp32 work on it (the same table, the same function)."""
    from .analysis import peaks

    m = peaks.match_device(name)
    fp32 = [r for r in m.rows if r.dtype == "fp32" and r.engine == "vector" and r.sparsity == "dense"]
    if not fp32:
        what = "no FP32 figure" if m.known else "no row"
        return f"datasheet: {what} for {name!r} in gpuprof's peak table (gpuprof/analysis/peaks.csv)"
    # The reports take a dtype's highest dense figure over both engines (peaks.DeviceMatch.peak_tflops)
    ridge = peaks.ridge_flop_per_byte(m.peak_tflops("fp32"), m.memory_bandwidth_gbps)
    return (
        f"datasheet ({fp32[0].source}): FP32 {fp32[0].per_device * 1e3:,.0f} GFLOP/s, "
        f"memory bandwidth {m.memory_bandwidth_gbps:,.0f} GB/s, ridge at AI {ridge:.1f} (the roofline "
        "gpuprof's reports place fp32 operators against on this device)"
    )


@dataclass
class Row:
    k: int
    ai: float  # flop / byte
    median_ms: float
    spread_pct: float  # (max - min) / median over the timed runs
    gflops: float
    gbps: float
    pct_of_roof: float  # attained GFLOP/s / min(peak compute, AI x peak bandwidth)

    @property
    def unstable(self) -> bool:
        return self.spread_pct > SPREAD_WARN_PCT


def summarize(k: int, n: int, runs_ms: list[float], peak_flops: float, peak_bw: float) -> Row:
    med = statistics.median(runs_ms)
    spread = (max(runs_ms) - min(runs_ms)) / med * 100.0 if med > 0 else 0.0
    seconds = med / 1e3
    gflops = 2.0 * k * n / seconds / 1e9
    gbps = 8.0 * n / seconds / 1e9
    ai = k / 4.0
    roof = min(peak_flops, ai * peak_bw)
    return Row(k, ai, med, spread, gflops, gbps, 100.0 * gflops / roof if roof > 0 else 0.0)


def format_table(rows: list[Row], info: dict, peak_flops: float, peak_bw: float) -> str:
    lines = [
        f"{info['name']}: {info['sm_count']} SMs, peak FP32 {peak_flops:,.0f} GFLOP/s, "
        f"peak memory bandwidth {peak_bw:,.0f} GB/s (ridge at AI {peak_flops / peak_bw:.1f})",
        f"{'k':>5} {'AI flop/B':>10} {'ms':>9} {'GFLOP/s':>10} {'GB/s':>9} {'% of roof':>10} {'spread %':>9}",
    ]
    for r in rows:
        warn = "  <- spread > 5%: rerun on an idle GPU" if r.unstable else ""
        lines.append(
            f"{r.k:>5} {r.ai:>10.2f} {r.median_ms:>9.3f} {r.gflops:>10,.0f} {r.gbps:>9,.0f} "
            f"{r.pct_of_roof:>10.1f} {r.spread_pct:>9.1f}{warn}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuprof.roofline", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1 << 25, help="elements (default 32M floats, 256 MB moved)")
    p.add_argument("--k", type=int, nargs="*", default=list(DEFAULT_KS), help="polynomial degrees, 1..1000")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per k")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs per k")
    p.add_argument("--device", type=int, default=0)
    args = p.parse_args(argv)
    if any(k < 1 or k > 1000 for k in args.k) or args.repeats < 2 or args.n < 1:
        p.error("k must be in 1..1000, --repeats at least 2, --n positive")
    try:
        from . import _kernels
    except ImportError:
        print(
            "gpuprof roofline: this gpuprof was built without its CUDA validation kernels (they are "
            "off by default, and need nvcc at build time); rebuild it from its source checkout where "
            "nvcc is on PATH: `pip install -C cmake.define.GPUPROF_BUILD_KERNELS=ON .` in that folder",
            file=sys.stderr,
        )
        return 2
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        print(
            "gpuprof roofline: no NVIDIA driver (libcuda.so.1 not found); run it on a machine with "
            "an NVIDIA GPU and its driver",
            file=sys.stderr,
        )
        return 1
    try:
        info = _kernels.device_info(args.device)
    except RuntimeError as e:
        print(
            f"gpuprof roofline: no usable NVIDIA GPU ({e}); run it on a machine with a GPU and driver",
            file=sys.stderr,
        )
        return 1
    pf, pb = peak_gflops(info), peak_gbps(info)
    rows = []
    for k in args.k:
        _kernels.polynomial(args.n, k, args.warmup)
        rows.append(summarize(k, args.n, _kernels.polynomial(args.n, k, args.repeats), pf, pb))
    print(format_table(rows, info, pf, pb))
    print(datasheet_line(info["name"]))
    unstable = [r.k for r in rows if r.unstable]
    if unstable:
        print(f"warning: run-to-run spread above {SPREAD_WARN_PCT:.0f}% for k = {unstable}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
