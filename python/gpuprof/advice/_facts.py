"""What the rules may know about a report, read from its dict.

Every rule reads the report through this one module, never through raw keys, with the column names
of the report's schema (docs/schema.md, docs/metrics.md): if a name changes, it changes here, once.
A section that is missing reads as empty and a number that is missing reads as None, so every rule
can tell "not measured" from "zero" (a CPU-only report, or one imported from an old trace, has only
some sections).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional, Union

from ..analysis import section


def _num(row: dict, *keys: str) -> Optional[float]:
    """The first of ``keys`` that holds a number (booleans are not numbers here)."""
    for k in keys:
        v = row.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def _text(row: dict, *keys: str) -> str:
    for k in keys:
        v = row.get(k)
        if isinstance(v, str) and v:
            return v
    return ""


def _name(row: dict) -> str:
    return _text(row, "name")


def _calls(row: dict) -> float:
    # Kernel and operator rows count "calls", copy and sync rows "count".
    return _num(row, "calls", "count") or 0.0


def _total_us(row: dict) -> float:
    return _num(row, "total_us") or 0.0


# ---- kernel name classes --------------------------------------------------------------------------
# cuDNN/cuBLAS NCHW <-> NHWC conversions: what a convolution net in NCHW pays on tensor cores.
_LAYOUT_KERNEL = re.compile(
    r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|convertTensor|transpose_readWrite", re.IGNORECASE
)
_CONV_KERNEL = re.compile(r"conv|implicit_gemm|wgrad|dgrad|fprop", re.IGNORECASE)
_CONV_OP = re.compile(r"^aten::(_?convolution|conv\d|cudnn_convolution|mkldnn_convolution|conv_)")


class Facts:
    """The numbers the rules use, each a small property over the report dict.
    (A plain class: `dataclasses` imports `inspect`, 5 ms of `gpuprof analyze`'s start-up.)"""

    __slots__ = ("data",)

    def __init__(self, data: dict):
        self.data = data

    # ---- steps and breakdown -------------------------------------------------------------------
    @property
    def num_steps(self) -> int:
        steps = self.data.get("steps")
        n = len(steps) if isinstance(steps, Sequence) and not isinstance(steps, str) else 0
        counted = (self.data.get("counts") or {}).get("steps")
        return n or (int(counted) if isinstance(counted, int) else 0)

    @property
    def step_us(self) -> float:
        return float((self.data.get("average") or {}).get("total_us") or 0.0)

    def pct(self, category: str) -> float:
        """Share of the mean step (%) that the breakdown gave ``category`` (``dataloader``...)."""
        avg = self.data.get("average") or {}
        v = avg.get(f"{category}_pct")
        if isinstance(v, (int, float)):
            return float(v)
        us = avg.get(f"{category}_us")
        return 100.0 * float(us) / self.step_us if isinstance(us, (int, float)) and self.step_us > 0 else 0.0

    def us(self, category: str) -> float:
        return float((self.data.get("average") or {}).get(f"{category}_us") or 0.0)

    @property
    def device_busy_pct(self) -> float:
        """Share of the step with device work (kernels, copies, sets, collectives)."""
        return min(100.0, sum(self.pct(c) for c in ("kernel", "memcpy", "memset", "communication")))

    @property
    def gpu_idle_pct(self) -> float:
        return max(0.0, 100.0 - self.device_busy_pct)

    @property
    def _step_rows(self):
        """The timed step rows, one at a time (a windowed read's steps are read from disk)."""
        return (
            s for s in self.data.get("steps") or [] if isinstance(s, dict) and (_num(s, "total_us") or 0) > 0
        )

    @property
    def median_step_us(self) -> Optional[float]:
        """The recorded steps' median time (us; None without per-step rows). A median, not the mean:
        one step preempted for a scheduler's 10 ms slice moves the mean of eight 0.5 ms steps threefold."""
        times = [_num(s, "total_us") or 0.0 for s in self._step_rows]
        return _median(times) if times else None

    def median_own_share(self, category: str) -> Optional[float]:
        """The median over the recorded steps of ``category``'s share (0-1) of the step's own time,
        its DataLoader wait left out (None without per-step rows)."""
        shares = []
        for s in self._step_rows:
            own = (_num(s, "total_us") or 0.0) - (_num(s, "dataloader_us") or 0.0)
            if own > 0:
                shares.append((_num(s, f"{category}_us") or 0.0) / own)
        return _median(shares) if shares else None

    def per_step(self, total: float) -> float:
        """A span total (us, calls) as a mean per step."""
        return total / self.num_steps if self.num_steps else total

    # ---- the critical path (docs/metrics.md, "Critical path") ----------------------------------
    @property
    def critical_path_pct(self) -> dict:
        """Each cause's share of the steps' chains (%, weighted by the steps' lengths), with
        ``launch_calls`` (time in kernel launch calls) beside them; {} without a critical path."""
        cp = self.data.get("critical_path")
        rows = (cp.get("steps") or []) if isinstance(cp, dict) else []

        def steps():  # twice over the rows, one at a time (a windowed read's are read from disk)
            return (s for s in rows if isinstance(s, dict))

        total = sum(float(s.get("length_us") or 0.0) for s in steps())
        if total <= 0:
            return {}
        out: dict = {}
        for s in steps():
            w = float(s.get("length_us") or 0.0) / total
            shares = dict(s.get("by_cause_pct") or {}, launch_calls=s.get("launch_calls_pct") or 0.0)
            for k, v in shares.items():
                if isinstance(v, (int, float)):
                    out[k] = out.get(k, 0.0) + w * float(v)
        return out

    @property
    def critical_path_held_by(self) -> dict:
        """{rank: its largest own cause} for the ranks the chains waited for (folders of ranks)."""
        cp = self.data.get("critical_path")
        held: dict = {}
        for s in (cp.get("steps") or []) if isinstance(cp, dict) else []:
            for h in (s.get("held_by") or []) if isinstance(s, dict) else []:
                if isinstance(h, dict) and "rank" in h:
                    held.setdefault(h["rank"], h.get("its_cause"))
        return held

    # ---- host and settings ---------------------------------------------------------------------
    @property
    def host(self) -> dict:
        h = self.data.get("host")
        return h if isinstance(h, dict) else {}

    @property
    def cpus_available(self) -> Optional[int]:
        v = self.host.get("cpus_available")
        return int(v) if isinstance(v, int) and v > 0 else None

    @property
    def cuda_available(self) -> Optional[bool]:
        v = self.host.get("cuda_available")
        return v if isinstance(v, bool) else None

    @property
    def live(self) -> bool:
        return (self.data.get("source") or {}).get("kind") == "live"

    @property
    def dataloader(self) -> Optional[dict]:
        """Settings of the loader the steps drew most batches from (None: not recorded)."""
        rows = [d for d in self.data.get("dataloaders") or [] if isinstance(d, dict)]
        if not rows:
            return None
        return max(rows, key=lambda d: d.get("batches_seen") or 0)

    # ---- the input pipeline, measured inside the DataLoader (live spans) -------------------------
    @property
    def input_pipeline(self) -> Optional[dict]:
        """The ``input_pipeline`` section (docs/metrics.md), when a live span measured the stages
        of a batch inside the DataLoader (Little's law needs T_batch); None otherwise (an imported
        trace, workers started before the session, an older report)."""
        ip = self.data.get("input_pipeline")
        if not isinstance(ip, dict):
            return None
        law = ip.get("law")
        if not isinstance(law, dict) or not isinstance(law.get("t_batch_us"), (int, float)):
            return None
        return ip

    # ---- GPU ------------------------------------------------------------------------------------
    @property
    def devices(self) -> list[dict]:
        return section(self.data, "devices")

    def device_num(self, dev: dict, *keys: str) -> Optional[float]:
        return _num(dev, *keys)

    @staticmethod
    def compute_capability(dev: dict) -> Optional[float]:
        """7.0 for Volta, 8.0 for A100... from the report's "7.0"; None when unknown."""
        m = re.match(r"\s*(\d+)\.(\d+)", str(dev.get("compute_capability") or ""))
        return int(m.group(1)) + int(m.group(2)) / 10.0 if m else None

    @property
    def busy_devices(self) -> list[dict]:
        """Devices that ran kernels (utilization above 0, or kernel time when not given)."""
        out = []
        for d in self.devices:
            util = _num(d, "utilization_pct")
            if util is None or util > 0:
                out.append(d)
        return out

    @property
    def kernels(self) -> list[dict]:
        return section(self.data, "kernels")

    @property
    def kernel_calls(self) -> float:
        return sum(_calls(k) for k in self.kernels)

    @property
    def kernel_total_us(self) -> float:
        return sum(_total_us(k) for k in self.kernels)

    @property
    def ran_gpu_work(self) -> bool:
        return bool(self.kernels) or any(self.us(c) > 0 for c in ("kernel", "memcpy", "memset"))

    def kernel_time_matching(self, pattern: Union[str, re.Pattern]) -> float:
        return sum(_total_us(k) for k in self.kernels if re.search(pattern, _name(k)))

    @property
    def layout_conversion_us(self) -> float:
        return self.kernel_time_matching(_LAYOUT_KERNEL)

    @property
    def conv_kernel_us(self) -> float:
        return sum(
            row_total_us(k)
            for k in self.kernels
            if _CONV_KERNEL.search(_name(k)) and not _LAYOUT_KERNEL.search(_name(k))
        )

    def mean_blocks_per_sm(self) -> Optional[float]:
        """Kernel-time-weighted mean blocks per SM over the kernel table (None: not given)."""
        num = den = 0.0
        for k in self.kernels:
            b = _num(k, "mean_blocks_per_sm")
            t = _total_us(k)
            if b is not None and t > 0:
                num += b * t
                den += t
        return num / den if den > 0 else None

    # ---- operators ------------------------------------------------------------------------------
    @property
    def operators(self) -> list[dict]:
        return section(self.data, "operators")

    def operator_time_us(self, row: dict) -> float:
        """An operator's own span (host or device, whichever is longer), total over the span."""
        host = _num(row, "host_total_us") or 0.0
        device = _num(row, "device_total_us") or 0.0
        return max(host, device)

    def operators_matching(self, pattern: Union[str, re.Pattern]) -> list[dict]:
        return [r for r in self.operators if re.search(pattern, _name(r))]

    @property
    def ranges(self) -> list[dict]:
        """User ranges (record_function, gpuprof.range, torch's Optimizer.step#... ranges)."""
        return section(self.data, "ranges")

    def ranges_matching(self, pattern: Union[str, re.Pattern]) -> list[dict]:
        return [r for r in self.ranges if re.search(pattern, _name(r))]

    def range_own_us(self, row: dict) -> float:
        """A range's total less the closure run inside it (forward and backward of an optimizer
        stepped with a closure, as Lightning does)."""
        return max((_num(row, "host_total_us") or 0.0) - (_num(row, "closure_us") or 0.0), 0.0)

    @property
    def has_convolutions(self) -> bool:
        return any(_CONV_OP.search(_name(r)) for r in self.operators) or self.conv_kernel_us > 0

    # ---- copies, syncs, memory -------------------------------------------------------------------
    @property
    def copies(self) -> list[dict]:
        return section(self.data, "copies")

    @staticmethod
    def copy_is_h2d(row: dict) -> bool:
        return row.get("kind") == "HtoD"

    @staticmethod
    def copy_is_pageable(row: dict) -> Optional[bool]:
        """True/False when the row says which host memory the copy used, None when it does not."""
        return {"pageable": True, "pinned": False}.get(row.get("host_memory"))

    @staticmethod
    def copy_total_us(row: dict) -> float:
        return _total_us(row)

    @staticmethod
    def copy_bytes(row: dict) -> float:
        return _num(row, "bytes") or 0.0

    @staticmethod
    def copy_count(row: dict) -> float:
        return _calls(row)

    @property
    def syncs(self) -> list[dict]:
        return section(self.data, "syncs")

    @staticmethod
    def sync_op(row: dict) -> str:
        """The host op that made the sync ("" when made outside any op)."""
        return _text(row, "op")

    @staticmethod
    def sync_kind(row: dict) -> str:
        """The runtime call (cudaStreamSynchronize...)."""
        return _text(row, "name")

    @staticmethod
    def sync_count(row: dict) -> float:
        return _calls(row)

    @staticmethod
    def sync_total_us(row: dict) -> float:
        return _total_us(row)

    @property
    def peak_allocated_bytes(self) -> Optional[float]:
        """Largest peak over the devices, else over the per-step memory rows of the GPUs (device -1,
        the host, is not device memory)."""
        gpu_rows = [r for r in section(self.data, "memory") if _num(r, "device") != -1]
        peaks = [_num(d, "peak_allocated_bytes") for d in self.devices]
        peaks += [_num(r, "peak_allocated_bytes") for r in gpu_rows]
        peaks = [p for p in peaks if p is not None and p > 0]  # 0: no allocator samples in the trace
        return max(peaks) if peaks else None

    @property
    def memory_total_bytes(self) -> Optional[float]:
        totals = [_num(d, "memory_total_bytes") for d in self.devices]
        totals += [_num(r, "capacity_bytes") for r in section(self.data, "memory") if _num(r, "device") != -1]
        totals = [t for t in totals if t]
        return min(totals) if totals else None

    # FLOPs (docs/metrics.md, "MFU and HFU", "Roofline")
    @property
    def flops(self) -> dict:
        """The report's ``flops`` section; {} for a report made before gpuprof counted FLOPs."""
        v = self.data.get("flops")
        return v if isinstance(v, dict) else {}

    def flops_num(self, key: str) -> Optional[float]:
        """A number of the ``flops`` section (None: not known for this report)."""
        return _num(self.flops, key)

    @property
    def roofline(self) -> list[dict]:
        """The roofline's rows (the operators with FLOPs, longest first)."""
        return section(self.data, "roofline")

    # ---- the memory view (docs/metrics.md, "Memory") ----------------------------------------------
    def _by_device(self, key: str) -> dict:
        v = self.data.get(key)
        return {str(k): d for k, d in v.items() if isinstance(d, dict)} if isinstance(v, dict) else {}

    @property
    def memory_peaks(self) -> dict:
        """{device id as a string: memory_peak object} (``-1`` the host); {} without a memory view."""
        return self._by_device("memory_peak")

    @property
    def memory_compositions(self) -> dict:
        return self._by_device("memory_composition")

    @property
    def memory_growth(self) -> dict:
        return self._by_device("memory_growth")

    @property
    def out_of_memory(self) -> Optional[dict]:
        v = self.data.get("out_of_memory")
        return v if isinstance(v, dict) else None

    @property
    def module_view(self) -> bool:
        """Whether the report has the module view (``modules`` rows): module paths to name."""
        return bool(section(self.data, "modules"))

    def device_capacity(self, device: str) -> Optional[float]:
        """A device's memory in bytes (the GPU summary's, else the per-step rows'); None for the host
        and unknown devices."""
        if str(device) == "-1":
            return None
        for d in self.devices:
            if str(d.get("id")) == str(device) and _num(d, "memory_total_bytes"):
                return _num(d, "memory_total_bytes")
        for r in section(self.data, "memory"):
            if str(r.get("device")) == str(device) and _num(r, "capacity_bytes"):
                return _num(r, "capacity_bytes")
        return None

    @property
    def batch_size(self) -> Optional[int]:
        for v in [(self.data.get("distributed") or {}).get("batch_size")] + [
            d.get("batch_size") for d in self.data.get("dataloaders") or [] if isinstance(d, dict)
        ]:
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    # ---- distributed ----------------------------------------------------------------------------
    @property
    def collectives(self) -> list[dict]:
        """Collectives per kind x process group (docs/metrics.md, "Collectives"); [] when none."""
        return section(self.data, "collectives")

    @property
    def ranks(self) -> list[dict]:
        """The cross-rank report's rows (one per rank that reported); [] for one process."""
        rows = self.data.get("ranks")
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    @property
    def distributed(self) -> dict:
        """``distributedInfo`` of an imported trace (backend, rank, world_size), {} when absent.
        The importer keeps it in the metadata as the JSON text the trace had."""
        v = (self.data.get("metadata") or {}).get("distributedInfo")
        if isinstance(v, str):
            import json

            try:
                v = json.loads(v)
            except ValueError:
                return {}
        return v if isinstance(v, dict) else {}


def row_name(row: dict) -> str:
    return _name(row)


def row_total_us(row: dict) -> float:
    return _total_us(row)


__all__ = ["Facts", "row_name", "row_total_us"]
