"""The memory curve of a windowed report (``windowed.py``; docs/design.md, "Memory"), exactly as the
whole trace's (docs/metrics.md, "Memory curve"), from each window's own allocator samples (those at
a time the window owns, ``traces/windows.py``).

- The level: where the allocator records its total (Kineto's ``Total Allocated``) a sample's level is
  that total, else the level before it plus its size; the level is carried from window to window, so
  a sample without a total continues the one before it in the trace. A device that records no total
  at all gets the running sum of the sizes, lifted at the end so that its lowest point is 0 (the
  lowest point carried too).
- The points: a device's levels go, in time order, to a temporary file (24 bytes a sample: time,
  level, reserved), read back once at the end, when the number of samples is known: past 2,000 of
  them each of 1,000 equal slices keeps its lowest and its highest sample, as the native curve does.
  Memory holds a few numbers a device and the 2,000 points; the disk 24 bytes an allocator sample,
  removed at the end.
- What it cannot give exactly is left out (``cut``): a device whose samples carry addresses and no
  totals (its level is rebuilt from the blocks live across the whole trace), or a temporary file
  that could not be written.
"""

from __future__ import annotations

import tempfile
from array import array
from typing import Optional

from .._native import _core

MAX_NAME_ROWS = 2000  # a name table's rows a device (the native kMaxNameRows, analysis/tables.h)
_FIELDS = 3  # time (ns), level (bytes), reserved (bytes, -1 unknown)
_CHUNK = 3 * 65536  # int64 values read back at a time


class _Device:
    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="gpuprof-curve-")
        self.count = 0
        self.level = 0  # the level after the last sample (the running sum until a total is seen)
        self.lowest = 0  # the lowest running sum, 0 at most
        self.recorded = False  # some sample carried the allocator's total


class CurveMerge:
    """``add`` each window's trace with the time it owns and its report dict; ``result`` gives the
    ``memory_curve`` section, or None when it cannot be exact (``why`` says why)."""

    def __init__(self, max_points: int) -> None:
        self.max_points = max_points
        self.devices: dict = {}  # device id -> _Device
        self.blocks: set = set()  # devices a window leveled from blocks (addresses, no totals)
        self.why: Optional[str] = None

    def add(self, trace, own_from: int, own_to: int, data: dict) -> None:
        if self.why is not None:
            return
        for key in data.get("memory_peak") or {}:  # a window gives a peak only from totals or blocks
            self.blocks.add(int(key))
        # (ts_ns, bytes_delta, total_allocated, total_reserved, device), the trace's order; by device
        # then time, ties in that order (the native curve's stable sort).
        owned = [s for s in _core.trace_memory(trace) if own_from <= s[0] < own_to and s[4] >= -1]
        owned.sort(key=lambda s: (s[4], s[0]))
        out: dict = {}
        try:
            for ts, delta, total, reserved, device in owned:
                d = self.devices.get(device)
                if d is None:
                    d = self.devices[device] = _Device()
                if total >= 0:
                    d.recorded = True
                    d.level = total
                else:
                    d.level += delta
                    d.lowest = min(d.lowest, d.level)
                out.setdefault(device, array("q")).extend((ts, d.level, reserved))
                d.count += 1
            for device, values in out.items():
                values.tofile(self.devices[device].file)
        except OSError as e:
            self.why = f"its samples could not be written to a temporary file ({e.strerror or e})"
            self.close()

    def _points(self, d: _Device) -> list:
        lift = 0 if d.recorded else -d.lowest

        def point(ts: int, level: int, reserved: int) -> list:
            known = reserved if d.recorded and reserved >= 0 else None
            return [ts / 1000.0, level + lift, known]

        d.file.flush()
        d.file.seek(0)
        n = d.count
        out: list = []
        thin = self.max_points >= 2 and n > self.max_points
        slices = self.max_points // 2
        k, i = 0, 0
        hi = n * 1 // slices if thin else n
        low = high = None  # (index, level, ts, reserved) of the slice's lowest and highest sample
        while i < n:
            chunk = array("q")
            chunk.fromfile(d.file, min(_CHUNK, (n - i) * _FIELDS))
            for j in range(0, len(chunk), _FIELDS):
                ts, level, reserved = chunk[j], chunk[j + 1], chunk[j + 2]
                if not thin:
                    out.append(point(ts, level, reserved))
                    i += 1
                    continue
                while i >= hi:  # the next non-empty slice
                    k += 1
                    hi = n * (k + 1) // slices
                if low is None or level < low[1]:
                    low = (i, level, ts, reserved)
                if high is None or level > high[1]:
                    high = (i, level, ts, reserved)
                i += 1
                if i == hi:
                    first, second = (low, high) if low[0] <= high[0] else (high, low)
                    out.append(point(first[2], first[1], first[3]))
                    if low[0] != high[0]:
                        out.append(point(second[2], second[1], second[3]))
                    low = high = None
        return out

    def result(self) -> Optional[dict]:
        """{device id as a string: [[t_us, allocated_bytes, reserved_bytes or None]]}, devices in
        order; None when the curve is cut (``why``)."""
        if self.why is None:
            rebuilt = sorted(
                dev for dev in self.blocks if dev in self.devices and not self.devices[dev].recorded
            )
            if rebuilt:
                self.why = (
                    f"device {rebuilt[0]}'s samples carry addresses and no allocator totals: its level is "
                    "rebuilt from the blocks live across the whole trace"
                )
        if self.why is not None:
            self.close()
            return None
        try:
            return {str(dev): self._points(self.devices[dev]) for dev in sorted(self.devices)}
        except OSError as e:
            self.why = f"its samples could not be read back from a temporary file ({e.strerror or e})"
            return None
        finally:
            self.close()

    def close(self) -> None:
        for d in self.devices.values():
            d.file.close()
        self.devices = {}


_OP_SUMS = (
    "size_increase_bytes",
    "self_size_increase_bytes",
    "alloc_count",
    "self_alloc_count",
    "alloc_bytes",
    "self_alloc_bytes",
)


class OpsMerge:
    """The per-operator memory statistics (``memory_ops``) of a windowed report: each window counts
    the allocator samples at the times it owns (the native ``kContextFlag`` of a sample) and gives
    each memory operator's calls it owns by name (``_core.memory_op_calls``, rows or not); the rows are
    summed by operator and device, their calls the windows' calls of the name, in memory in
    proportion to the names. ``result`` gives the rows in the native order, or None when a window's
    rows or the merged ones are past the native bound of ``max_rows`` a device (an "other names"
    row cannot be split; ``why`` says so)."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self.rows: dict = {}  # (name, device) -> the summed row
        self.calls: dict = {}  # name -> calls
        self.why: Optional[str] = None

    def add(self, trace, data: dict) -> None:
        for name, n in _core.memory_op_calls(trace).items():
            self.calls[name] = self.calls.get(name, 0) + n
        for row in data.get("memory_ops") or []:
            if row["name"].startswith("other names (") and self.why is None:
                self.why = f"a window has more than {self.max_rows:,} operators with allocations on a device"
            acc = self.rows.get((row["name"], row["device"]))
            if acc is None:
                self.rows[(row["name"], row["device"])] = dict(row)
            else:
                for k in _OP_SUMS:
                    acc[k] += row[k]

    def result(self) -> Optional[list]:
        rows = [r for r in self.rows.values() if any(r[k] for k in _OP_SUMS)]
        per_device: dict = {}
        for r in rows:
            r["calls"] = self.calls.get(r["name"], 0)
            per_device[r["device"]] = per_device.get(r["device"], 0) + 1
        if self.why is None and any(n > self.max_rows for n in per_device.values()):
            self.why = f"more than {self.max_rows:,} operators with allocations on a device"
        if self.why is not None:
            return None
        # GPUs first, then the host; in each, the largest self increase first, ties by name.
        rows.sort(key=lambda r: (r["device"] < 0, r["device"], -r["self_size_increase_bytes"], r["name"]))
        return rows
