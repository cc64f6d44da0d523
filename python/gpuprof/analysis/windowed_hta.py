"""Holistic Trace Analysis's six tables of a trace read in windows (``windowed.py``; docs/design.md,
"Memory"): idle time, launch statistics, queue length, copy bandwidth, operator launch delay and
kernel sequences, merged from each window's parts (``_core.window_hta_parts``,
cpp/include/gpuprof/analysis/window_parts.h) into the whole trace's rows.

Each window counts the launches it owns in the whole trace's scope (the launches made before its
last step's start), and gives sums, counts and maxima; the merge adds them up and recomputes the
means from them as the native rows do. What crosses a window's edge is joined here: the idle gap
before a stream's first activity in a window (the last one before it ends it), the time a queue sat
blocked between two windows' points, and the copies still running at a window's end (with the
running sum of their bandwidths, carried into the next window's read so that every level is the
whole trace's to the bit). A kernel sequence is the whole trace's where its operator sits at its
name's least nesting depth over all the windows.

The percentiles (a launch delay's median and 95th, a copy bandwidth's median) come from each row's
values with their counts, interpolated as the native tables do: exact while a row holds at most
``MAX_DISTINCT`` distinct values; past it the row's values are rounded to fewer significant bits
until it fits, and ``approximate`` names the fields so rounded with the bound of their relative error.
Memory: in proportion to the rows and their distinct values, never to the events (a row's values
take about 100 bytes each as Python objects: 0.4 MB a row at the bound).
"""

from __future__ import annotations

import math
from typing import Optional

from .._native import _core
from . import fields

#: The most distinct values one row keeps for its percentiles before they are rounded.
MAX_DISTINCT = 4096


class _Values:
    """A row's values with their counts, for its percentiles; rounded to ``bits`` significant bits
    once it holds more than MAX_DISTINCT distinct values (None: exact)."""

    def __init__(self) -> None:
        self.counts: dict = {}
        self.n = 0
        self.bits: Optional[int] = None

    def _round(self, v):
        if self.bits is None or v == 0:
            return v
        m, e = math.frexp(v)  # v = m * 2**e, 0.5 <= |m| < 1
        return math.ldexp(round(math.ldexp(m, self.bits)), e - self.bits)

    def add(self, pairs) -> None:
        for v, c in pairs:
            k = self._round(v)
            self.counts[k] = self.counts.get(k, 0) + c
            self.n += c
        while len(self.counts) > MAX_DISTINCT and self.bits != 0:
            self.bits = 52 if self.bits is None else self.bits - 1
            rounded: dict = {}
            for v, c in self.counts.items():
                k = self._round(v)
                rounded[k] = rounded.get(k, 0) + c
            self.counts = rounded

    def quantile(self, q: float) -> float:
        """The native quantile: linear between the two nearest ranks of the sorted values."""
        if not self.n:
            return 0.0
        h = q * (self.n - 1)
        lo = math.floor(h)
        hi = min(lo + 1, self.n - 1)
        at_lo = at_hi = None
        seen = 0
        for v in sorted(self.counts):
            seen += self.counts[v]
            if at_lo is None and seen > lo:
                at_lo = v
            if seen > hi:
                at_hi = v
                break
        return at_lo + (h - lo) * (at_hi - at_lo)

    def error(self) -> Optional[float]:
        """The bound of a percentile's relative error, None when exact."""
        return None if self.bits is None else 2.0**-self.bits


def _row(table: str, values: dict) -> dict:
    """A row with the field table's keys in its order."""
    return {f.key: values[f.key] for f in fields.table(table).fields}


class HtaMerge:
    """The six tables, window by window: ``add`` each window's trace with the span it owns (in
    order), then ``result``."""

    def __init__(self, launched_before: Optional[int]) -> None:
        self.launched_before = (2**63 - 1) if launched_before is None else launched_before
        self.idle: dict = {}  # (device, stream) -> [activities, host, kernel, other, last end]
        self.launches: dict = {}  # name -> [sums..., _Values]
        self.queue: dict = {}  # (device, stream) -> [samples, sum, max, blocked, last ts, last length]
        self.copies: dict = {}  # kind -> [copies, bytes, time, samples, sum, _Values]
        self.carry: dict = {}  # kind -> the copy bandwidth's (level, sum, open copies) for the next window
        self.delays: dict = {}  # (op, kernels) -> [calls, op delay, runtime delay]
        self.sequences: dict = {}  # (op, kernels, depth) -> [count, gpu, cpu]
        self.least: dict = {}  # op name -> least depth

    def add(self, trace, own_from: int, own_to: int) -> None:
        carried = [(kind, *carry) for kind, carry in self.carry.items()]
        parts = _core.window_hta_parts(trace, own_from, own_to, self.launched_before, carried)
        for dev, stream, n, host, kernel, other, first, first_call, last_end in parts["idle_time"]:
            r = self.idle.get((dev, stream))
            if r is None:
                self.idle[(dev, stream)] = [n, host, kernel, other, last_end]
                continue
            gap = max(0, first - r[4])  # the gap before this window's first activity
            r[1 if first_call > r[4] else 2 if gap < _core.KERNEL_WAIT_THRESHOLD_NS else 3] += gap
            r[0] += n
            r[1] += host
            r[2] += kernel
            r[3] += other
            r[4] = last_end
        for name, *sums, delays in parts["launch_stats"]:
            r = self.launches.setdefault(name, [0] * 8 + [_Values()])
            for i in (0, 1, 2, 3, 5, 6, 7):
                r[i] += sums[i]
            r[4] = max(r[4], sums[4])
            r[8].add(delays)
        for dev, stream, n, total, top, blocked, first, last, length in parts["queue_length"]:
            r = self.queue.get((dev, stream))
            if r is None:
                self.queue[(dev, stream)] = [n, total, top, blocked, last, length]
                continue
            if r[5] >= _core.MAX_LAUNCH_QUEUE:
                r[3] += first - r[4]
            r[0] += n
            r[1] += total
            r[2] = max(r[2], top)
            r[3] += blocked
            r[4], r[5] = last, length
        for kind, n, nbytes, time_ns, samples, levels, level, total, open_copies in parts["copy_bandwidth"]:
            r = self.copies.setdefault(kind, [0, 0, 0, 0, 0.0, _Values()])
            r[0] += n
            r[1] += nbytes
            r[2] += time_ns
            r[3] += samples
            r[4] = total  # summed in the whole trace's order, from the first window on
            r[5].add(levels)
            self.carry[kind] = (level, total, open_copies)
        for op, kernels, calls, op_delay, runtime_delay in parts["op_launch_delay"]:
            r = self.delays.setdefault((op, kernels), [0, 0, 0])
            r[0] += calls
            r[1] += op_delay
            r[2] += runtime_delay
        for op, kernels, depth, count, gpu, cpu in parts["kernel_sequences"]:
            r = self.sequences.setdefault((op, kernels, depth), [0, 0, 0])
            r[0] += count
            r[1] += gpu
            r[2] += cpu
        for name, depth in parts["least_depth"].items():
            self.least[name] = min(depth, self.least.get(name, depth))

    def approximate(self) -> list:
        """The percentile fields rounded past MAX_DISTINCT values: section, field, rows, bound."""
        rounded: dict = {}
        fields_of = (
            ("launch_stats", ("delay_p50_us", "delay_p95_us"), [r[8] for r in self.launches.values()]),
            ("copy_bandwidth", ("p50_gb_per_s",), [r[5] for r in self.copies.values()]),
        )
        for section, names, rows in fields_of:
            for values in rows:
                if values.error() is None:
                    continue
                for field in names:
                    a = rounded.setdefault(
                        (section, field),
                        {"section": section, "field": field, "rows": 0, "max_relative_error": 0.0},
                    )
                    a["rows"] += 1
                    a["max_relative_error"] = max(a["max_relative_error"], values.error())
        return list(rounded.values())

    def result(self, long_names: dict) -> dict:
        """The six tables' rows, as the whole trace's analysis gives them; the names shortened as its
        are, each shortened one's full text added to ``long_names``."""

        def shown(name: str) -> str:
            s = _core.display_name(name)
            if s != name:
                long_names.setdefault(s, name)
            return s

        us = 1000.0
        idle = [
            _row(
                "idle_time",
                {
                    "device": dev,
                    "stream": stream,
                    "activities": r[0],
                    "host_wait_us": r[1] / us,
                    "kernel_wait_us": r[2] / us,
                    "other_us": r[3] / us,
                    "idle_us": (r[1] + r[2] + r[3]) / us,
                },
            )
            for (dev, stream), r in sorted(self.idle.items())
        ]
        launches = []
        for name, r in sorted(self.launches.items(), key=lambda kv: (-kv[1][3], kv[0])):
            n = r[0]
            launches.append(
                _row(
                    "launch_stats",
                    {
                        "name": shown(name),
                        "launches": n,
                        "cpu_mean_us": (r[1] / n if n else 0.0) / us,
                        "gpu_mean_us": (r[2] / n if n else 0.0) / us,
                        "delay_total_us": r[3] / us,
                        "delay_mean_us": (r[3] / n if n else 0.0) / us,
                        "delay_p50_us": r[8].quantile(0.50) / us,
                        "delay_p95_us": r[8].quantile(0.95) / us,
                        "delay_max_us": r[4] / us,
                        "short_kernels": r[5],
                        "runtime_outliers": r[6],
                        "delay_outliers": r[7],
                    },
                )
            )
        queue = [
            _row(
                "queue_length",
                {
                    "device": dev,
                    "stream": stream,
                    "samples": r[0],
                    "mean": r[1] / r[0],
                    "max": r[2],
                    "blocked_us": r[3] / us,
                },
            )
            for (dev, stream), r in sorted(self.queue.items())
        ]
        copies = []
        for kind, r in sorted(self.copies.items()):
            if not r[0]:
                continue
            levels = r[5]
            known = levels.n > 0
            copies.append(
                _row(
                    "copy_bandwidth",
                    {
                        "kind": kind,
                        "copies": r[0],
                        "bytes": r[1],
                        "time_us": r[2] / us,
                        "gb_per_s": r[1] / r[2] if r[2] else 0.0,
                        "samples": r[3],
                        "mean_gb_per_s": r[4] / r[3] if known else 0.0,
                        "min_gb_per_s": float(min(levels.counts)) if known else 0.0,
                        "p50_gb_per_s": levels.quantile(0.5) if known else 0.0,
                        "max_gb_per_s": float(max(levels.counts)) if known else 0.0,
                    },
                )
            )
        delays = [
            _row(
                "op_launch_delay",
                {
                    "op": shown(op),
                    "kernels": shown(kernels),
                    "calls": r[0],
                    "op_delay_us": (r[1] / r[0]) / us,
                    "runtime_delay_us": (r[2] / r[0]) / us,
                },
            )
            for (op, kernels), r in sorted(self.delays.items(), key=lambda kv: (-kv[1][0], kv[0]))
        ]
        roots = [
            (op, kernels, r)
            for (op, kernels, depth), r in self.sequences.items()
            if depth == self.least.get(op) and r[0] >= 2
        ]
        roots.sort(key=lambda x: (-x[2][0], x[0], x[1]))
        sequences = [
            _row(
                "kernel_sequences",
                {
                    "op": shown(op),
                    "kernels": shown(kernels),
                    "count": r[0],
                    "gpu_us": r[1] / us,
                    "cpu_us": r[2] / us,
                },
            )
            for op, kernels, r in roots
        ]
        return {
            "idle_time": idle,
            "launch_stats": launches,
            "queue_length": queue,
            "copy_bandwidth": copies,
            "op_launch_delay": delays,
            "kernel_sequences": sequences,
        }
