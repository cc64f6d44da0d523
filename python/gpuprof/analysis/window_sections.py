"""The sections of a windowed report (``windowed.py``) that are not plain name-keyed tables: the GPU
summary, the module tree, the per-step memory rows and FLOPs, merged window by window in memory in
proportion to the devices, the modules, the steps and the distinct (operator, shapes) pairs.

- GPU summary: each window summarises the time its own steps span (the native
  ``own_steps_window``), and gives the sums its percentages divide (``gpu_tables``'
  ``device_sums``); the windows' spans tile the steps' window, so the sums add up to the whole
  trace's and the percentages are divided once. A kernel that runs across two windows' boundary
  counts in the window it started in; the peak allocated is the largest of the windows'.
- Modules: each window counts its own calls and the work launched by them (its context's calls
  only nest the others), row by path; the tree is ordered again as the native view orders it (the
  main root first, heaviest children first) and each row's self time is its total less its
  children's.
- Memory: the rows of the steps a window owns (its context steps' allocator samples give its first
  step the level it starts with, and its last step the samples its device work ran on into).
- FLOPs: the native counts of the owned calls, the owned steps' rows and the roofline's rows by
  operator and shapes are added up, and the section is built from them as for a whole trace.
"""

from __future__ import annotations

import json
from typing import Optional

from .spill import SpilledRows


def _ns(us: float) -> int:
    """A row's microseconds (ns / 1000.0 in the native binding) back to the integer nanoseconds."""
    return round(us * 1000)


_DEVICE_SUMS = (
    "window_ns",
    "kernel_ns",
    "kernel_busy_ns",
    "kernels",
    "sm_weighted_ns",
    "occupancy_weighted_ns",
    "occupancy_weight_ns",
    "tensor_core_ns",
    "tc_eligible_ns",
    "comm_kernel_ns",
    "comm_overlap_compute_ns",
    "comm_overlap_copy_ns",
)
_MODULE_SUMS = ("calls", "host_total_ns", "device_total_ns", "device_self_ns", "flops")
_FLOPS_COUNTS = ("counted_calls", "uncounted_calls", "trace_flops_checked", "trace_flops_differ")


class SectionMerge:
    """``add`` each window's report dict, its ``native`` pieces (``report_dict(native=...)``) and the
    step numbers it owns; ``result`` writes the merged sections into the merged report dict."""

    def __init__(self, file) -> None:
        self.file = file  # the per-step rows' file (``spill.RowFile``)
        self.device_rows: dict = {}  # id -> the first window's row (name, capability, memory)
        self.device_sums: dict = {}  # id -> the sums, and the largest peak
        self.modules: dict = {}  # path -> {type, parent, the sums}, in first-seen order
        self.memory: dict = {}  # device -> its rows of owned steps (on disk), in step order
        self.flop_steps = SpilledRows(file)  # the owned steps' native FLOPs rows
        self.flop_counts: dict = dict.fromkeys(_FLOPS_COUNTS, 0)
        self.uncounted_by_op: dict = {}
        self.roofline: dict = {}  # (name, shapes) -> the row's sums

    def add(self, data: dict, native: dict, owned_steps: set) -> None:
        for row in data.get("devices") or []:
            self.device_rows.setdefault(row["id"], row)
        for s in native.get("device_sums") or []:
            acc = self.device_sums.setdefault(s["id"], {**dict.fromkeys(_DEVICE_SUMS, 0), "peak": -1})
            for k in _DEVICE_SUMS:
                acc[k] += s[k]
            acc["peak"] = max(acc["peak"], s["peak_allocated_bytes"])
        for row in data.get("modules") or []:
            acc = self.modules.setdefault(
                row["path"],
                {"type": row["type"], "parent": row["parent"], **dict.fromkeys(_MODULE_SUMS, 0)},
            )
            acc["calls"] += row["calls"]
            acc["flops"] += row["flops"]
            for k in ("host_total", "device_total", "device_self"):
                acc[f"{k}_ns"] += _ns(row[f"{k}_us"])
        by_device: dict = {}
        for row in data.get("memory") or []:
            if row["step"] in owned_steps:
                by_device.setdefault(row["device"], []).append(row)
        for device, rows in by_device.items():
            self.memory.setdefault(device, SpilledRows(self.file)).extend(rows)
        flops = native.get("flops") or {}
        self.flop_steps.extend(s for s in flops.get("steps", []) if s["step"] in owned_steps)
        for k in _FLOPS_COUNTS:
            self.flop_counts[k] += flops.get(k, 0)
        for name, n in (flops.get("uncounted_by_op") or {}).items():
            self.uncounted_by_op[name] = self.uncounted_by_op.get(name, 0) + n
        for row in flops.get("roofline") or []:
            self._add_roofline(row)

    def _add_roofline(self, row: dict) -> None:
        key = json.dumps([row["name"], row["input_shapes"], row["flop_class"]])
        acc = self.roofline.get(key)
        if acc is None:
            self.roofline[key] = {**row, "time_ns": _ns(row["time_us"])}
            return
        acc["calls"] += row["calls"]
        acc["flops"] += row["flops"]
        acc["bytes"] = None if acc["bytes"] is None or row["bytes"] is None else acc["bytes"] + row["bytes"]
        acc["time_ns"] += _ns(row["time_us"])
        acc["on_device"] = acc["on_device"] or row["on_device"]

    def _devices(self) -> list:
        out = []
        for dev in sorted(self.device_rows):
            row, s = dict(self.device_rows[dev]), self.device_sums.get(dev)
            if s is None:
                out.append(row)
                continue
            window, kernel = s["window_ns"], s["kernel_ns"]
            row["utilization_pct"] = 100.0 * s["kernel_busy_ns"] / window if window > 0 else 0.0
            row["sm_efficiency_pct"] = 100.0 * s["sm_weighted_ns"] / window if window > 0 else 0.0
            weight = s["occupancy_weight_ns"]
            row["achieved_occupancy_pct"] = s["occupancy_weighted_ns"] / weight if weight > 0 else None
            row["tensor_core_pct"] = 100.0 * s["tensor_core_ns"] / kernel if kernel > 0 else 0.0
            row["tc_eligible_pct"] = 100.0 * s["tc_eligible_ns"] / kernel if kernel > 0 else 0.0
            row["peak_allocated_bytes"] = s["peak"] if s["peak"] >= 0 else None
            row["window_us"] = window / 1000.0
            row["kernel_us"] = kernel / 1000.0
            row["kernels"] = s["kernels"]
            for k in ("comm_kernel", "comm_overlap_compute", "comm_overlap_copy"):
                row[f"{k}_us"] = s[f"{k}_ns"] / 1000.0
            out.append(row)
        return out

    def _modules(self) -> list:
        """The rows depth first as the native view orders them: the root with the most modules below
        it first, the other roots and each row's children heaviest first (ties in first-seen order)."""
        paths = list(self.modules)
        order = {p: i for i, p in enumerate(paths)}
        children: dict = {p: [] for p in paths}
        roots = []
        for p in paths:
            parent = self.modules[p]["parent"]
            (children[parent] if parent in children else roots).append(p)

        def below(p: str) -> int:
            return sum(1 + below(c) for c in children[p])

        def heavier(p: str) -> tuple:
            return (-self.modules[p]["host_total_ns"], order[p])

        roots.sort(key=lambda p: (-below(p), *heavier(p)))
        roots[1:] = sorted(roots[1:], key=heavier)
        out: list = []
        stack = [(p, 0) for p in reversed(roots)]
        while stack:
            p, depth = stack.pop()
            m = self.modules[p]
            kids = sorted(children[p], key=heavier)
            own = m["host_total_ns"] - sum(self.modules[c]["host_total_ns"] for c in kids)
            out.append(
                {
                    "path": p,
                    "type": m["type"],
                    "parent": m["parent"] if m["parent"] in children else None,
                    "depth": depth,
                    "calls": m["calls"],
                    "host_total_us": m["host_total_ns"] / 1000.0,
                    "host_self_us": max(own, 0) / 1000.0,
                    "device_total_us": m["device_total_ns"] / 1000.0,
                    "device_self_us": m["device_self_ns"] / 1000.0,
                    "flops": m["flops"],
                }
            )
            stack += [(c, depth + 1) for c in reversed(kids)]
        return out

    def _memory(self):
        """The memory rows, device by device: one device's as they were written, several copied
        into one sequence in device order (a chunk in memory at a time)."""
        if len(self.memory) == 1:
            return next(iter(self.memory.values()))
        out = SpilledRows(self.file)
        for dev in sorted(self.memory):
            out.extend_all(self.memory[dev])
        return out

    def _flops(self) -> dict:
        rows = []
        for r in self.roofline.values():
            r = dict(r)
            time_ns = r.pop("time_ns")
            r["time_us"] = time_ns / 1000.0
            r["intensity_flop_per_byte"] = r["flops"] / r["bytes"] if r["bytes"] else None
            r["achieved_tflops"] = r["flops"] / (time_ns * 1e-9) / 1e12 if time_ns > 0 else 0.0
            rows.append(r)
        rows.sort(key=lambda r: -r["time_us"])  # stable: ties in first-seen order, as the native sort
        return {
            "steps": self.flop_steps,
            "roofline": rows,
            **self.flop_counts,
            "uncounted_by_op": {k: n for k, n in sorted(self.uncounted_by_op.items()) if n},
        }

    def result(self, data: dict, keys: list, *, peak_tflops: Optional[float]) -> None:
        """The merged sections into ``data`` (the merged report dict, its steps and operators done)."""
        from . import _add_flops

        if "devices" in keys:
            data["devices"] = self._devices()
        if "modules" in keys:
            data["modules"] = self._modules()
        if "memory" in keys:
            data["memory"] = self._memory()
        if "flops" in keys:
            _add_flops(
                data, self._flops(), source=data.get("source"), host=data.get("host"), peak_tflops=peak_tflops
            )
