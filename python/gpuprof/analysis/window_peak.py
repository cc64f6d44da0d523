"""The memory peak, its composition and the memory growth in a windowed report (``windowed.py``;
docs/design.md, "Memory"), exactly as the whole trace's (docs/metrics.md, "Memory"), from the blocks
each window allocates (``_core.memory_blocks``) and those still live at its start, carried from the
windows before it.

- The level of a sample is the curve's (``window_memory.py``): the allocator's total where it records
  one, else the level before it plus its size, carried from window to window. Each window gives its
  highest sample at the times it owns (the first of equal ones); the peak is the highest of those, the
  earlier window's on a tie: the whole trace's first highest sample.
- A block (an allocation with an address, until the next free or allocation at that address) is
  taken from the window that owns its allocation, its attributes resolved there as strings: its size,
  allocation and free times, the end of the operator (or optimizer step) that made it, its outermost
  operator's name and its module's path. A block still open at a window's end is carried; the next
  window that sees its address closes it. The carried set is the blocks live at one moment (a
  window's edge), not the events; the blocks live at the peak are held until the end, when the
  composition is counted with every free known.
- The growth reads the level at each step's end (the last sample at or before it; every step's but
  the whole trace's first, from the windows' own steps), and its owners are the blocks the counted
  steps but the last left live at the last one's end: those carried past the last window's start or
  freed in it (cut, ``growth_why``, where that end comes before the last window).
- What it cannot give exactly is left out (``why``): a device whose level is rebuilt from its blocks
  (addresses and no totals, as ``memory_curve``), or blocks with roles (a live session's parameters,
  gradients and optimizer state: a trace file has none).
"""

from __future__ import annotations

from array import array
from typing import Optional

from .._native import _core

TOP = 10  # owners listed (the native memory view's top)


class _Block:
    __slots__ = ("addr", "bytes", "alloc", "free", "scope_end", "in_optimizer", "op", "module")

    def __init__(self, raw: tuple, module: Optional[str]) -> None:
        addr, size, alloc, free, _role, scope_end, in_optimizer, op, _node, _module = raw
        self.addr, self.bytes, self.alloc, self.free = addr, size, alloc, free
        self.scope_end, self.in_optimizer, self.op, self.module = scope_end, in_optimizer, op, module

    def live_at(self, ts: int) -> bool:
        return self.alloc <= ts and (self.free is None or ts < self.free)


class _Device:
    def __init__(self) -> None:
        self.level = 0
        self.recorded = False  # some sample carried the allocator's total
        self.blocks = False  # some window saw a block (a sample with an address)
        self.peak: Optional[tuple] = None  # (level, ts, reserved, step)
        self.live: list = []  # the blocks live at the peak
        self.carried: list = []  # the blocks live at the last window's end
        self.open: dict = {}  # address -> the carried block no free has closed yet
        self.lowest = 0  # the lowest running sum (a device without totals is lifted by it)
        self.seen = False  # a sample so far
        self.next_end = 0  # the first step end (GrowthSteps.ends) not yet given a level
        self.end_levels: list = []  # (index into the step ends, level at it), in order
        self.recent: list = []  # the blocks the last window freed at its own times


def _step_at(steps: list, ts: int) -> Optional[int]:
    """The step whose host range holds ts, else whose (device-extended) range does; None."""
    for s in steps:
        if s["host_end_ns"] > s["host_start_ns"] and s["host_start_ns"] <= ts < s["host_end_ns"]:
            return s["step"]
    for s in steps:
        if s["start_ns"] <= ts < s["end_ns"]:
            return s["step"]
    return None


def _owners(blocks, name_of) -> list:
    by_name: dict = {}
    for b in blocks:
        name = name_of(b)
        if name is None:
            continue
        o = by_name.setdefault(name, {"name": name, "bytes": 0, "count": 0})
        o["bytes"] += b.bytes
        o["count"] += 1
    return sorted(by_name.values(), key=lambda o: (-o["bytes"], o["name"]))[:TOP]


class PeakMerge:
    """``add`` each window's trace with the time it owns, its report dict and native results;
    ``result`` gives ``(memory_peak, memory_composition, memory_growth)`` (the growth as the native
    view has it, None when it cannot be exact: ``growth_why``), or None when none can be (``why``)."""

    def __init__(self) -> None:
        self.devices: dict = {}
        self.modules = False  # some window had a module view
        self.why: Optional[str] = None
        self.growth = GrowthSteps()
        self.growth_why: Optional[str] = None
        self.last_from = 0  # the last window's first owned time

    def add(self, trace, own_from: int, own_to: int, data: dict, native: dict, steps: set) -> None:
        if self.why is not None:
            return
        self.growth.add(native.get("breakdown_steps") or [], steps)
        self.last_from = own_from
        owned = [s for s in _core.trace_memory(trace) if own_from <= s[0] < own_to and s[4] >= -1]
        owned.sort(key=lambda s: (s[4], s[0]))
        best: dict = {}  # device -> (level, ts, reserved): this window's first highest sample
        for ts, delta, total, reserved, device in owned:
            d = self.devices.get(device)
            if d is None:
                d = self.devices[device] = _Device()
            self.growth.pass_to(d, ts)
            d.seen = True
            if total >= 0:
                d.recorded = True
                d.level = total
            else:
                d.level += delta
                d.lowest = min(d.lowest, d.level)
            if device not in best or d.level > best[device][0]:
                best[device] = (d.level, ts, reserved)
        module_of = native.get("module_of_event")
        rows = array("I")
        if module_of:
            rows.frombytes(module_of)
            self.modules = True
        paths = [m["path"] for m in data.get("modules") or []]

        def path(raw) -> Optional[str]:
            node, module = raw[8], raw[9]
            row = rows[node] if rows and node >= 0 else 0xFFFFFFFF
            if row == 0xFFFFFFFF and rows and module >= 0:
                row = rows[module]
            return paths[row] if row != 0xFFFFFFFF and row < len(paths) else None

        made: dict = {}  # device -> the blocks this window allocates at its own times
        for key, raws in _core.memory_blocks(trace).items():
            device = int(key)
            d = self.devices.get(device)
            if d is None:
                d = self.devices[device] = _Device()
            d.blocks = d.blocks or bool(raws)
            if any(raw[4] >= 0 for raw in raws):
                self.why = (
                    "its blocks have roles (parameters, gradients, optimizer state) known to a live session"
                )
                return
            # A carried block ends at the first sample at its address after its allocation: a free, or
            # an allocation that proves it freed unheard.
            for raw in raws:
                c = d.open.get(raw[0])
                if c is None:
                    continue
                alloc, free = raw[2], raw[3]
                if alloc == c.alloc:
                    end = free
                elif alloc is None:
                    end = free if free is not None and free > c.alloc else None
                else:
                    end = alloc if alloc > c.alloc else None
                if end is not None and (c.free is None or end < c.free):
                    c.free = end
            made[device] = [
                _Block(raw, path(raw)) for raw in raws if raw[2] is not None and own_from <= raw[2] < own_to
            ]
        steps = native.get("breakdown_steps") or []
        for device, (level, ts, reserved) in best.items():
            d = self.devices[device]
            if d.peak is None or level > d.peak[0]:
                d.peak = (level, ts, reserved, _step_at(steps, ts))
                d.live = [b for b in (*d.carried, *made.get(device, ())) if b.live_at(ts)]
        for device, d in self.devices.items():
            d.recent = [
                b for b in (*d.carried, *made.get(device, ())) if b.free is not None and b.free <= own_to
            ]
            d.carried = [b for b in (*d.carried, *made.get(device, ())) if b.free is None or b.free > own_to]
            d.open = {b.addr: b for b in d.carried if b.free is None}

    def result(self) -> Optional[tuple]:
        if self.why is None:
            rebuilt = sorted(dev for dev, d in self.devices.items() if d.blocks and not d.recorded)
            if rebuilt:
                self.why = (
                    f"device {rebuilt[0]}'s samples carry addresses and no allocator totals: its level is "
                    "rebuilt from the blocks live across the whole trace"
                )
        if self.why is not None:
            return None
        growth: Optional[dict] = {}
        for device in sorted(self.devices):
            g = self.growth.result(self.devices[device], self.modules, self.last_from)
            if g is None:
                self.growth_why = (
                    f"device {device}'s last counted step ends before the last window: the blocks its "
                    "steps left live then are not all held"
                )
                growth = None
                break
            if g["end_bytes"]:
                growth[str(device)] = g
        peaks, compositions = {}, {}
        for device in sorted(self.devices):
            d = self.devices[device]
            if d.peak is None or not d.recorded:
                continue
            level, ts, reserved, step = d.peak
            peaks[str(device)] = {
                "t_us": ts / 1000.0,
                "step": step,
                "bytes": level,
                "reserved_bytes": reserved if reserved >= 0 else None,
                "top_ops": _owners(d.live, lambda b: b.op or ""),
                "top_modules": _owners(d.live, lambda b: b.module) if self.modules else [],
            }
            if d.blocks:
                temporary = activations = 0
                for b in d.live:
                    if b.scope_end is None:
                        continue
                    if b.free is not None and b.free <= b.scope_end:
                        temporary += b.bytes
                    elif not b.in_optimizer:
                        activations += b.bytes
                compositions[str(device)] = {
                    "parameters": 0,
                    "gradients": 0,
                    "optimizer_state": 0,
                    "activations": activations,
                    "temporary": temporary,
                    "unknown": max(0, level - activations - temporary),
                }
        return peaks, compositions, growth


class _StepEnds:
    """(step, start_ns, end_ns) rows appended and indexed as tuples, held in three arrays: 24 bytes
    a step instead of a tuple of three ints (about 150)."""

    def __init__(self) -> None:
        self.cols = (array("q"), array("q"), array("q"))

    def append(self, row: tuple) -> None:
        for col, v in zip(self.cols, row):
            col.append(v)

    def __len__(self) -> int:
        return len(self.cols[0])

    def __getitem__(self, i: int) -> tuple:
        return tuple(col[i] for col in self.cols)


class GrowthSteps:
    """The step ends the memory growth reads (docs/metrics.md, "Memory growth"): each window's own
    steps from its breakdown but the whole trace's first, in order; a device's level at a step end is
    that of its last sample at or before it, given as the samples pass it (``pass_to``)."""

    def __init__(self) -> None:
        self.first = True
        self.steps = _StepEnds()  # (step, start_ns, end_ns): host range, else the device-extended one

    def add(self, breakdown: list, owned: set) -> None:
        for s in breakdown:
            if s["step"] not in owned:
                continue
            if self.first:  # the whole trace's first step: not read
                self.first = False
                continue
            host = s["host_end_ns"] > s["host_start_ns"]
            start, end = (s["host_start_ns"], s["host_end_ns"]) if host else (s["start_ns"], s["end_ns"])
            self.steps.append((s["step"], start, end))

    def pass_to(self, d: _Device, ts: Optional[int]) -> None:
        """Gives ``d`` its level at each step end before ``ts`` (every one left when None)."""
        while d.next_end < len(self.steps) and (ts is None or self.steps[d.next_end][2] < ts):
            if d.seen:
                d.end_levels.append((d.next_end, d.level))
            d.next_end += 1

    def result(self, d: _Device, modules: bool, last_from: int):
        """The device's ``memory_growth`` object as ``report_dict`` has it; None when its owners
        cannot be exact (blocks freed before the last window, after the last counted step's end)."""
        self.pass_to(d, None)
        lift = 0 if d.recorded else -d.lowest
        counted = [self.steps[i] for i, _level in d.end_levels]
        ends = [level + lift for _i, level in d.end_levels]
        n = len(ends)
        g = {"steps": [s[0] for s in counted], "end_bytes": ends, "bytes_per_step": 0.0, "rising_steps": 0}
        g.update(flagged=False, steps_counted=0, ops=[], modules=[])
        if n >= 2:
            mx = my = 0.0
            for (step, *_), level in zip(counted, ends):
                mx += float(step)
                my += float(level)
            mx /= float(n)
            my /= float(n)
            sxx = sxy = 0.0
            for (step, *_), level in zip(counted, ends):
                sxx += (float(step) - mx) * (float(step) - mx)
                sxy += (float(step) - mx) * (float(level) - my)
            g["bytes_per_step"] = sxy / sxx if sxx > 0 else 0.0
            g["rising_steps"] = sum(1 for i in range(1, n) if ends[i] > ends[i - 1])
            g["flagged"] = (
                n >= 4 and g["bytes_per_step"] >= 64.0 * 1024 and g["rising_steps"] >= 0.75 * (n - 1)
            )
            last_end = counted[-1][2]
            if last_end < last_from and d.blocks:
                return None
            windows = [(s[1], s[2]) for s in counted[:-1]]
            survivors = [
                b
                for b in (*d.carried, *d.recent)
                if (b.free is None or b.free > last_end) and any(lo <= b.alloc < hi for lo, hi in windows)
            ]
            g["steps_counted"] = n - 1
            g["ops"] = _owners(survivors, lambda b: b.op or "")
            g["modules"] = _owners(survivors, lambda b: b.module) if modules else []
        return g
