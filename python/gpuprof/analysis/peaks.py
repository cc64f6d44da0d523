"""Peak throughput: the checked table of accelerator peaks (``peaks.csv``) and device matching by
the name CUDA/ROCm/NVML report.

The foundation MFU and the roofline read (docs/metrics.md, "Peaks"). Pure Python, no torch.

- ``table()``: every row of ``peaks.csv``: one per device, dtype, engine (``tensor``: NVIDIA Tensor
  Cores / AMD Matrix Cores; ``vector``: CUDA cores / AMD stream processors) and sparsity, each with
  its vendor document. Dense and sparse rows are kept apart; MFU uses dense rows only.
- ``match_device(name)``: the rows of the device a reported name denotes, or an "unknown device"
  result whose ``reason`` says why and how to pass the peak by hand.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Optional

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
ENGINES = ("tensor", "vector")
SPARSITIES = ("dense", "sparse")
MANUAL_PEAK_HINT = "pass the device's dense peak by hand: gpuprof.profile(peak_tflops=...)"


@dataclass(frozen=True)
class PeakRow:
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


def table() -> tuple[PeakRow, ...]:
    """Every row of the packaged peaks.csv, in file order."""
    global _TABLE
    if _TABLE is None:
        text = resources.files(__package__).joinpath("peaks.csv").read_text(encoding="utf-8")
        _TABLE = tuple(
            PeakRow(
                device=r["device"],
                dtype=r["dtype"],
                engine=r["engine"],
                sparsity=r["sparsity"],
                peak=float(r["peak"]),
                unit=r["unit"],
                memory_bandwidth_gbps=float(r["memory_bandwidth_gbps"]),
                memory_gb=float(r["memory_gb"]),
                devices_per_package=int(r["devices_per_package"]),
                source=r["source"],
                note=r["note"],
            )
            for r in csv.DictReader(io.StringIO(text))
        )
    return _TABLE


def devices() -> list[str]:
    """The table's device keys, in file order."""
    return list(dict.fromkeys(r.device for r in table()))


# ---------------------------------------------------------------------------------------------------
# Matching a reported device name


@dataclass(frozen=True)
class DeviceMatch:
    """What ``match_device`` found: ``device`` is the table's key (None when unknown), ``rows`` its
    rows, ``reason`` a sentence (how it matched, or why not and what to do)."""

    name: str
    device: Optional[str]
    rows: tuple[PeakRow, ...] = field(default=(), repr=False)
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


def scale_to_clock(peak: float, clock_mhz: float, reference_clock_mhz: float) -> float:
    """A peak at another SM clock, for the optional clock correction (not applied anywhere yet).

    Peak throughput is proportional to the SM clock, and a datasheet figure is computed at one
    clock, ``reference_clock_mhz`` (its boost clock, e.g. 1830 MHz for the H100 SXM's tensor
    figures and 1980 MHz for its FP32 one: the table does not hold these). A device held lower
    (application clocks, a power cap) peaks lower: pass NVML's
    ``nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM)`` as ``clock_mhz``. Never scales above the
    reference: boost beyond it is not sustained under load."""
    if clock_mhz <= 0 or reference_clock_mhz <= 0:
        raise ValueError("clocks must be positive")
    return peak * min(clock_mhz / reference_clock_mhz, 1.0)
