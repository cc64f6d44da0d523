"""Peak throughput: the checked table of accelerator peaks (``peaks.csv``), device matching by the
name CUDA/ROCm/NVML report, and an estimate of the CPU's peak from its ISA, clock and cores.

The foundation MFU and the roofline read (docs/metrics.md, "Peaks"). Pure Python, no torch.

- ``table()``: every row of ``peaks.csv``: one per device, dtype, engine (``tensor``: NVIDIA Tensor
  Cores / AMD Matrix Cores; ``vector``: CUDA cores / AMD stream processors) and sparsity, each with
  its vendor document. Dense and sparse rows are kept apart; MFU uses dense rows only.
- ``match_device(name)``: the rows of the device a reported name denotes, or an "unknown device"
  result whose ``reason`` says why and how to pass the peak by hand.
- ``cpu_peak()``: the CPU's fp32/fp64 peak for the cores this process may use, always an estimate,
  with a sentence saying how it was derived.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple, Optional

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
ENGINES = ("tensor", "vector")
SPARSITIES = ("dense", "sparse")
MANUAL_PEAK_HINT = "pass the device's dense peak by hand: gpuprof.profile(peak_tflops=...)"


class PeakRow(NamedTuple):
    """One row of peaks.csv, as the vendor prints it. ``peak`` is TFLOPS (TOPS for int8) for the
    whole package; ``per_device`` divides by the devices one package shows as (two GCDs for an
    MI250X), which is what one CUDA/ROCm device can reach."""

    device: str
    dtype: str
    engine: str
    sparsity: str
    peak: float
    unit: str
    memory_bandwidth_gbps: float
    memory_gb: float
    devices_per_package: int
    source: str
    note: str

    @property
    def per_device(self) -> float:
        return self.peak / self.devices_per_package

    @property
    def bandwidth_per_device_gbps(self) -> float:
        return self.memory_bandwidth_gbps / self.devices_per_package


_TABLE: Optional[tuple[PeakRow, ...]] = None
# peaks.csv's columns that hold numbers; the others are text.
_NUMERIC_COLUMNS = {
    "peak": float,
    "memory_bandwidth_gbps": float,
    "memory_gb": float,
    "devices_per_package": int,
}


def table() -> tuple[PeakRow, ...]:
    """Every row of the packaged peaks.csv, in file order."""
    global _TABLE
    if _TABLE is None:
        import csv

        with open(os.path.join(os.path.dirname(__file__), "peaks.csv"), encoding="utf-8", newline="") as f:
            rows = csv.reader(f)
            # Columns found by their header's names, as csv.DictReader would, without its dict a row.
            at = {name: i for i, name in enumerate(next(rows))}
            columns = [(at[name], _NUMERIC_COLUMNS.get(name, str)) for name in PeakRow._fields]
            _TABLE = tuple(PeakRow._make([read(r[i]) for i, read in columns]) for r in rows if r)
    return _TABLE


def devices() -> list[str]:
    """The table's device keys, in file order."""
    return list(dict.fromkeys(r.device for r in table()))


# ---------------------------------------------------------------------------------------------------
# Matching a reported device name


class DeviceMatch(NamedTuple):
    """What ``match_device`` found: ``device`` is the table's key (None when unknown), ``rows`` its
    rows, ``reason`` a sentence (how it matched, or why not and what to do)."""

    name: str
    device: Optional[str]
    rows: tuple[PeakRow, ...] = ()
    reason: str = ""

    @property
    def known(self) -> bool:
        return self.device is not None

    def dense_peak(self, dtype: str) -> Optional[PeakRow]:
        """The highest dense row for ``dtype`` over both engines (on an A100, fp64 is 19.5 on the
        tensor cores, not the 9.7 of the FP64 units; GEMM libraries use the faster one), or None
        where the vendor gives no figure. Sparse rows are never returned."""
        rows = [r for r in self.rows if r.dtype == dtype and r.sparsity == "dense"]
        return max(rows, key=lambda r: r.peak) if rows else None

    def peak_tflops(self, dtype: str) -> Optional[float]:
        """Dense peak of one visible device for ``dtype`` (TFLOPS, TOPS for int8), or None."""
        row = self.dense_peak(dtype)
        return row.per_device if row else None

    @property
    def memory_bandwidth_gbps(self) -> Optional[float]:
        """Memory bandwidth of one visible device (GB/s), or None when unknown."""
        return self.rows[0].bandwidth_per_device_gbps if self.rows else None


_B = r"(?<![A-Z0-9])"  # no letter or digit before
_E = r"(?![A-Z0-9])"  # none after


def _has(token: str, name: str) -> bool:
    return re.search(_B + token + _E, name) is not None


def _memory_gb(name: str) -> Optional[int]:
    m = re.search(_B + r"(\d+)\s*GB" + _E, name)
    return int(m.group(1)) if m else None


def _device_key(n: str) -> tuple[Optional[str], str]:
    """(table key, how) for a normalised name (upper case, single spaces), or (None, why not)."""
    mem = _memory_gb(n)
    if _has("V100", n):  # not V100S (other clocks and bandwidth)
        form = "SXM2" if (_has("SXM2", n) or _has("DGXS", n)) else "PCIe" if _has("PCIE", n) else None
        if form and mem in (16, 32):
            how = " (DGX Station: an SXM2 part)" if _has("DGXS", n) else ""
            return f"V100 {form} {mem}GB", f"a V100 {form} {mem} GB{how}"
        return None, "a V100 variant the table has no row for (it has SXM2/DGXS and PCIe, 16 or 32 GB)"
    if _has("A100", n):
        form = "SXM" if re.search(_B + r"SXM\d?" + _E, n) else "PCIe" if _has("PCIE", n) else None
        if form and mem in (40, 80):
            return f"A100 {form} {mem}GB", f"an A100 {form} {mem} GB"
        return None, "an A100 whose name does not say SXM or PCIe and 40 or 80 GB"
    if _has("H100", n):
        if _has("NVL", n):
            return "H100 NVL", "an H100 NVL"
        if _has("PCIE", n):
            return "H100 PCIe", "an H100 PCIe"
        if (re.search(_B + r"SXM\d?" + _E, n) or _has("HBM3", n)) and mem in (None, 80):
            return "H100 SXM", "an H100 SXM (80 GB HBM3)"
        return None, "an H100 variant the table has no row for (it has SXM 80 GB, PCIe and NVL)"
    if _has("H200", n):  # not GH200: the Grace Hopper superchip's figures differ
        return ("H200 NVL", "an H200 NVL") if _has("NVL", n) else ("H200 SXM", "an H200 SXM")
    if _has("B200", n):  # not GB200
        return "B200", "a B200"
    if _has("L40S", n):
        return "L40S", "an L40S"
    if _has("L4", n):
        return "L4", "an L4"
    if _has("A10", n):  # not A10G / A100
        return "A10", "an A10"
    if _has("T4", n):  # not T4000
        return "T4", "a T4"
    if re.search(_B + r"RTX 4090" + _E + r"(?! (D|LAPTOP)" + _E + ")", n):
        return "RTX 4090", "a GeForce RTX 4090"
    if _has("MI250X", n):
        if _has("MI250", n):  # "MI250X/MI250": ROCm's name for both parts, whose peaks differ
            return None, "the name covers both the MI250X and the MI250, whose peaks differ"
        return "MI250X", "an MI250X (one GCD: half the module's figures)"
    if _has("MI300X", n):
        return "MI300X", "an MI300X"
    return None, "not in the table"


def match_device(name: str) -> DeviceMatch:
    """The table's rows for a device name as CUDA, ROCm or NVML report it ("NVIDIA H100 80GB
    HBM3", "Tesla V100-SXM2-32GB", "AMD Instinct MI300X", ...). Unknown or ambiguous names give a
    DeviceMatch with ``known`` False and a reason that says how to pass the peak by hand."""
    n = " ".join(name.upper().replace("_", " ").split())
    key, how = _device_key(n)
    if key is None:
        reason = (
            f"unknown device {name!r} ({how}): gpuprof's peak table (gpuprof/analysis/peaks.csv) "
            f"has no row for it; {MANUAL_PEAK_HINT}"
        )
        return DeviceMatch(name, None, (), reason)
    rows = tuple(r for r in table() if r.device == key)
    return DeviceMatch(name, key, rows, f"{name!r} is {how}: table row {key!r}")


def ridge_flop_per_byte(peak_tflops: float, bandwidth_gbps: float) -> float:
    """The roofline's ridge point: where the memory roof (bandwidth x intensity) meets the compute
    roof (the peak), in FLOP/byte. Operators of lower arithmetic intensity are memory-bound."""
    if not (peak_tflops > 0 and bandwidth_gbps > 0):
        raise ValueError("the peak and the bandwidth must be positive")
    return peak_tflops * 1e12 / (bandwidth_gbps * 1e9)


# ---------------------------------------------------------------------------------------------------
# The CPU's peak (an estimate)


class CpuPeak(NamedTuple):
    """The CPU's peak for the cores this process may use: always an estimate (``estimate`` is
    True; ``derivation`` says how it was reached). TFLOPS are None when the clock or the ISA could
    not be read (``derivation`` says which)."""

    fp32_tflops: Optional[float]
    fp64_tflops: Optional[float]
    fp32_flops_per_cycle: Optional[int]  # per core
    fp64_flops_per_cycle: Optional[int]
    isa: str
    clock_ghz: Optional[float]
    clock_source: str
    cores: int
    derivation: str
    estimate: bool = True


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    blocks, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
            cur = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            cur[key.strip()] = value.strip()
    if cur:
        blocks.append(cur)
    return [b for b in blocks if "processor" in b]


def _x86_flops_per_cycle(flags: set[str], vendor: str, family: int, model: int) -> tuple[int, int, str]:
    """(fp32, fp64 flop per cycle per core, the ISA and unit assumption)."""
    if "avx512f" in flags:
        if vendor == "AuthenticAMD" and family == 0x19:
            return 32, 16, "AVX-512 on Zen 4's two 256-bit FMA units"
        return 64, 32, "AVX-512 FMA, assumed 2 units of 512 bits"
    if "avx2" in flags and "fma" in flags:
        if vendor == "AuthenticAMD" and family == 0x17 and model < 0x30:
            return 16, 8, "AVX2 FMA on Zen/Zen+'s two 128-bit FMA units"
        return 32, 16, "AVX2 FMA, assumed 2 units of 256 bits"
    if "avx" in flags:
        return 16, 8, "AVX without FMA, one 256-bit add and one 256-bit multiply unit"
    if "sse2" in flags:
        return 8, 4, "SSE2, one 128-bit add and one 128-bit multiply unit"
    return 2, 2, "no SIMD flags: one scalar add and one multiply"


def _arm_flops_per_cycle(features: set[str]) -> Optional[tuple[int, int, str]]:
    if "sve" in features:
        return 32, 16, "SVE, assumed 512 bits of FMA per cycle (Neoverse V1: 2x256, V2: 4x128)"
    if "asimd" in features:
        return 16, 8, "NEON (ASIMD), assumed 2 FMA units of 128 bits (Cortex-A7x, Neoverse N1)"
    return None


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _cpufreq_max_khz(cpus: Iterable[int]) -> dict[int, int]:
    out = {}
    for cpu in cpus:
        text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq")
        if text and text.strip().isdigit():
            out[cpu] = int(text.strip())
    return out


def cpu_peak(
    *,
    cpuinfo: Optional[str] = None,
    cpus: Optional[Iterable[int]] = None,
    machine: Optional[str] = None,
    cpufreq_max_khz: Optional[dict[int, int]] = None,
) -> CpuPeak:
    """Estimated fp32/fp64 peak of the cores this process may use:
    ``flop/cycle/core (from the ISA flags) x clock x cores``.

    - flop/cycle/core: from /proc/cpuinfo's ``flags`` (x86) or ``Features`` (aarch64); an FMA is
      2 flop per lane (AVX-512: 32 fp32 / 16 fp64 per unit, AVX2: 16 / 8, two units assumed).
    - clock: the maximum (turbo) clock cpufreq reports (``cpuinfo_max_freq``) where there is one,
      else the base clock in the model name ("@ 2.60GHz"), else the highest ``cpu MHz`` line
      (the current clock; on a VM usually the host's nominal one). A ceiling: sustained all-core
      vector clocks are lower.
    - cores: the physical cores among the CPUs in ``os.sched_getaffinity`` (SMT siblings share
      their core's FMA units), or the CPUs where /proc/cpuinfo does not say which core each is.

    The arguments replace what is read from this machine (for tests)."""
    if cpuinfo is None:
        cpuinfo = _read("/proc/cpuinfo") or ""
    allowed = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    machine = (machine or os.uname().machine).lower()
    blocks = {int(b["processor"]): b for b in _cpuinfo_blocks(cpuinfo) if b["processor"].isdigit()}
    mine = [blocks[c] for c in allowed if c in blocks]
    first = mine[0] if mine else (next(iter(blocks.values())) if blocks else {})

    # Cores: one per (package, core) pair, where cpuinfo says so.
    if mine and all("core id" in b for b in mine):
        cores = len({(b.get("physical id", "0"), b["core id"]) for b in mine})
        cores_text = f"{cores} physical cores of the {len(allowed)} CPUs this process may use"
    else:
        cores = len(allowed)
        cores_text = f"the {cores} CPUs this process may use"

    # Flop per cycle per core.
    if machine in ("x86_64", "amd64", "i386", "i686"):
        flags = set(first.get("flags", "").split())

        def num(key: str) -> int:
            try:
                return int(first.get(key, ""))
            except ValueError:
                return -1

        per_cycle: Optional[tuple[int, int, str]] = _x86_flops_per_cycle(
            flags, first.get("vendor_id", ""), num("cpu family"), num("model")
        )
    elif machine in ("aarch64", "arm64"):
        per_cycle = _arm_flops_per_cycle(set(first.get("Features", "").split()))
    else:
        per_cycle = None

    # Clock.
    freqs = cpufreq_max_khz if cpufreq_max_khz is not None else _cpufreq_max_khz(allowed)
    freqs = {c: f for c, f in freqs.items() if c in allowed and f > 0}
    base = re.search(r"@\s*([\d.]+)\s*GHz", first.get("model name", ""))
    mhz = [float(b["cpu MHz"]) for b in mine if _is_number(b.get("cpu MHz", ""))]
    if freqs:
        ghz, clock_source = max(freqs.values()) / 1e6, "the maximum (turbo) clock from cpufreq"
    elif base:
        ghz, clock_source = float(base.group(1)), "the base clock in the model name"
    elif mhz:
        ghz, clock_source = max(mhz) / 1e3, "the clock /proc/cpuinfo reports ('cpu MHz')"
    else:
        ghz, clock_source = None, "no clock found (no cpufreq, no clock in /proc/cpuinfo)"

    if per_cycle is None or ghz is None or cores == 0:
        if ghz is None:
            why = "no clock"
        else:
            why = f"no known vector ISA for {machine}" if per_cycle is None else "no core"
        return CpuPeak(
            None,
            None,
            per_cycle[0] if per_cycle else None,
            per_cycle[1] if per_cycle else None,
            per_cycle[2] if per_cycle else f"unknown ({machine})",
            ghz,
            clock_source,
            cores,
            f"No CPU peak estimate: {why}.",
        )
    f32, f64, isa = per_cycle
    t32, t64 = f32 * ghz * cores / 1e3, f64 * ghz * cores / 1e3
    derivation = (
        f"Estimate: {f32} fp32 / {f64} fp64 flop per cycle per core ({isa}) x {ghz:g} GHz "
        f"({clock_source}) x {cores_text} = {t32 * 1e3:,.1f} / {t64 * 1e3:,.1f} GFLOP/s."
    )
    return CpuPeak(t32, t64, f32, f64, isa, ghz, clock_source, cores, derivation)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
