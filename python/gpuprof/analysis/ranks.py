"""Cross-rank analysis: per-rank breakdowns, stragglers, time waiting in collectives, overlap and
load imbalance, from one small summary per rank (docs/distributed.md defines every number).

A rank summary is a dict (what ranks exchange at the end of a span, and what a worker returns for one
trace file of a folder)::

    {"rank", "local_rank", "world_size", "hostname", "device", "backend",
     "steps": [{"step", "total_us", "<category>_us", ...}],   # the report's step rows (times, and
                                                              # energy_j where NVML measured it)
     "average": {...},                                        # the report's average
     "comm_total_us": float | None,            # device communication kernels per step (a union)
     "comm_overlap_compute_us": float | None,  # the part of it compute kernels ran beside
     "comm_overlap_copy_us": float | None,     # the part of it copies ran beside; None: no device
                                               # collectives (gloo on the CPU)
     "collectives": [[name, process_group, pg_desc, group_ranks, group_size], ...],  # row keys
     "collective_calls": [[row, step, dur_us, end_us, bytes], ...] | None}     # every call

In a synchronous job every rank's step lasts as long as the slowest rank's: the straggler spends
longer *outside* collectives, and every other rank shows that difference as time waiting inside them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Optional

from . import CATEGORIES

COMM = "communication_us"
CATEGORY_KEYS = [f"{k}_us" for k, _ in CATEGORIES]
# A straggler call (docs/distributed.md, "Stragglers"): a rank is named only when, in a clear majority
# of the matched steps (STRAGGLER_MAJORITY, at least STRAGGLER_MIN_STEPS of them), its time outside
# collectives exceeds the other ranks' median in that step by more than the threshold: the larger of
# STRAGGLER_NOISE_K x the other ranks' own noise (a robust spread: 1.4826 x the median absolute
# deviation of their per-step times from each one's median, an estimate of one standard deviation),
# STRAGGLER_MIN_PCT of the reference time outside collectives, STRAGGLER_MIN_STEP_PCT of the
# reference step and STRAGGLER_MIN_US; and its best steps too (its lower quartile of times outside
# collectives against the other ranks') must exceed the others' by the last three. One descheduled
# step on a loaded host is not a straggler, nor is a rank that load slows in most steps but not in its
# best; a rank that waits in collectives for another (a victim) spends no more time outside them.
STRAGGLER_MIN_STEPS = 3
STRAGGLER_MAJORITY = 2 / 3
STRAGGLER_NOISE_K = 3.0
STRAGGLER_MIN_PCT = 10.0
STRAGGLER_MIN_STEP_PCT = 5.0
STRAGGLER_MIN_US = 1000.0


def summary_from_report(data: dict, *, rank_info: Optional[dict] = None) -> dict:
    """The rank summary of one report dict (``Report.to_dict()`` or ``Report._data``).

    ``rank_info`` gives rank, local_rank, world_size, hostname, device and backend when known (a live
    session knows them); otherwise they come from the trace's ``distributedInfo`` metadata."""
    info = dict(_dist_info(data))
    info.update({k: v for k, v in (rank_info or {}).items() if v is not None})
    steps = [
        {k: v for k, v in s.items() if k in ("step", "energy_j") or k.endswith("_us")}
        for s in data.get("steps", [])
    ]
    n = len(steps)
    # Device communication per step, from the GPU summary: the NCCL kernels inside the steps and the
    # parts compute kernels and copies ran beside (docs/distributed.md, "Overlap").
    devices = [d for d in _rows(data.get("devices")) if "comm_kernel_us" in d]
    comm_kernel_us = sum(float(d.get("comm_kernel_us") or 0.0) for d in devices)
    under_compute = sum(float(d.get("comm_overlap_compute_us") or 0.0) for d in devices)
    under_copies = sum(float(d.get("comm_overlap_copy_us") or 0.0) for d in devices)
    flops = data.get("flops") if isinstance(data.get("flops"), dict) else {}
    return {
        "rank": _int(info.get("rank"), 0),
        "local_rank": _int(info.get("local_rank"), _int(info.get("rank"), 0)),
        "world_size": _int(info.get("world_size"), 1),
        "hostname": str(info.get("hostname") or ""),
        "device": str(info.get("device") or ""),
        "backend": str(info.get("backend") or ""),
        "batch_size": info.get("batch_size"),
        "steps": steps,
        "average": dict(data.get("average") or {}),
        "comm_total_us": (comm_kernel_us / n) if (n and comm_kernel_us > 0) else None,
        "comm_overlap_compute_us": (under_compute / n) if (n and comm_kernel_us > 0) else None,
        "comm_overlap_copy_us": (under_copies / n) if (n and comm_kernel_us > 0) else None,
        "source": str((data.get("source") or {}).get("path") or ""),
        # FLOPs: this rank's achieved rate and MFU (docs/metrics.md), None where not counted
        "tflops_per_s": flops.get("tflops_per_s"),
        "mfu_pct": flops.get("mfu_pct"),
        "collectives": [_collective_key(r) for r in _rows(data.get("collectives"))],
        "collective_calls": data.get("collective_calls"),
        "collective_table": [_collective_row(r) for r in _rows(data.get("collectives"))],
        # The chain that set each step's length, by cause (docs/metrics.md, "Critical path"): what
        # another rank's report says of this one when it waited for it (the first name only)
        "critical_path": [_path_summary(p) for p in _rows((data.get("critical_path") or {}).get("steps"))],
    }


def _path_summary(path: dict) -> dict:
    return {
        **{k: path.get(k) for k in ("step", "length_us", "by_cause_pct")},
        "top": list(path.get("top") or [])[:1],
    }


# A rank's own communication table in its ``ranks[]`` row: its report's ``collectives`` rows, the
# columns every rank measures for itself (the waiting and transfer split needs the other ranks).
_RANK_COLLECTIVE_KEYS = (
    "name",
    "process_group",
    "pg_desc",
    "group_size",
    "calls",
    "bytes",
    "total_us",
    "mean_us",
)


def _collective_row(row: dict) -> dict:
    return {k: row.get(k) for k in _RANK_COLLECTIVE_KEYS}


def _collective_key(row: dict) -> list:
    """What makes two ranks' rows the same collectives: the kind and the group (its ranks too: the
    tensor-parallel group [0, 1] is not the group [2, 3] of the same name on another rank)."""
    return [row.get(k) for k in ("name", "process_group", "pg_desc", "group_ranks", "group_size")]


def _rows(section) -> list:
    if isinstance(section, dict):
        section = section.get("rows")
    return [r for r in (section or []) if isinstance(r, dict)]


def _int(v, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _dist_info(data: dict) -> dict:
    raw = (data.get("metadata") or {}).get("distributedInfo")
    if isinstance(raw, str):
        import json

        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    return raw if isinstance(raw, dict) else {}


def _mean(vals: list) -> float:
    return sum(vals) / len(vals) if vals else 0.0


def cross_rank(summaries: Iterable[dict], *, expected_world_size: Optional[int] = None) -> dict:
    """The cross-rank result: ``ranks`` rows, ``stragglers``, ``imbalance_pct``, ``matched_steps``,
    ``missing_ranks``. Steps are matched by step number: only steps every rank recorded count
    (when no step is common, each rank's own steps are used and ``matched_steps`` is 0)."""
    ranks = sorted(summaries, key=lambda s: s["rank"])
    world = max([expected_world_size or 0] + [s.get("world_size", 1) for s in ranks]) if ranks else 0
    present = {s["rank"] for s in ranks}
    missing = sorted(set(range(world)) - present)
    common = None
    for s in ranks:
        nums = {st["step"] for st in s["steps"]}
        common = nums if common is None else common & nums
    common = common or set()

    def steps_of(s):
        return [st for st in s["steps"] if st["step"] in common] if common else s["steps"]

    # Per rank and step: time outside collectives ("busy") and in them.
    per_rank = {}
    for s in ranks:
        st = steps_of(s)
        per_rank[s["rank"]] = {
            "busy": {x["step"]: x["total_us"] - x.get(COMM, 0.0) for x in st},
            "comm": {x["step"]: x.get(COMM, 0.0) for x in st},
            "total": {x["step"]: x["total_us"] for x in st},
            "cats": {x["step"]: x for x in st},
            "avg": {k: _mean([x.get(k, 0.0) for x in st]) for k in ["total_us"] + CATEGORY_KEYS},
        }
    # Waiting in collectives: per step, a rank's collective time beyond the least any rank spent in
    # them in that step (the least is the transfer itself, seen by the rank that arrived last).
    wait = {r: [] for r in per_rank}
    for step in sorted(common):
        least = min(per_rank[r]["comm"][step] for r in per_rank)
        for r in per_rank:
            wait[r].append(per_rank[r]["comm"][step] - least)

    rows = []
    for s in ranks:
        pr = per_rank[s["rank"]]
        avg = {k: round(v, 3) for k, v in pr["avg"].items()}
        total = avg["total_us"]
        for k, _ in CATEGORIES:
            avg[f"{k}_pct"] = round(100.0 * avg[f"{k}_us"] / total, 2) if total > 0 else 0.0
        comm_total = s.get("comm_total_us")
        overlap = copy_overlap = None
        if comm_total and s.get("comm_overlap_compute_us") is not None:
            overlap = round(100.0 * s["comm_overlap_compute_us"] / comm_total, 2)
            copy_overlap = round(100.0 * (s.get("comm_overlap_copy_us") or 0.0) / comm_total, 2)
        rows.append(
            {
                "rank": s["rank"],
                "local_rank": s.get("local_rank", s["rank"]),
                "world_size": s.get("world_size", world),
                "hostname": s.get("hostname", ""),
                "device": s.get("device", ""),
                "steps": len(pr["busy"]),
                "average": avg,
                "busy_us": round(_mean(list(pr["busy"].values())), 3),
                "collective_wait_us": round(_mean(wait[s["rank"]]), 3) if len(ranks) > 1 and common else 0.0,
                "comm_comp_overlap_pct": overlap,
                "comm_copy_overlap_pct": copy_overlap,
                "tflops_per_s": s.get("tflops_per_s"),
                "mfu_pct": s.get("mfu_pct"),
                "collectives": list(s.get("collective_table") or []),
                **_rank_energy(s, steps_of(s)),
            }
        )

    split = collective_split(ranks, common)
    held = critical_path_waits(ranks, common)
    calls = straggler_calls(per_rank, sorted(common)) if common else []
    calls = [c for c in calls if c is not None]
    stragglers = sorted((c for c in calls if c["named"]), key=lambda c: -c["excess_us"])
    unnamed = [c for c in calls if not c["named"]]
    slowest = max(unnamed, key=lambda c: c["excess_us"]) if unnamed else None
    busy = [r["busy_us"] for r in rows]
    mean_step = _mean([r["average"]["total_us"] for r in rows])
    imbalance = 100.0 * (max(busy) - _mean(busy)) / mean_step if rows and mean_step > 0 else 0.0
    return {
        "ranks": rows,
        "stragglers": [{k: v for k, v in c.items() if k != "named"} for c in stragglers],
        "slowest_unnamed": {k: v for k, v in slowest.items() if k != "named"} if slowest else None,
        "imbalance_pct": round(max(0.0, imbalance), 2),
        "matched_steps": len(common),
        "missing_ranks": missing,
        "world_size": world,
        "collective_split": split,
        "critical_path": held,
    }


def collective_split(summaries: list, steps: set) -> dict:
    """Each rank's collectives split into moving data and waiting, per row (the TensorBoard
    plugin's rule, docs/metrics.md "Collectives"): the calls of a row are matched across the ranks
    that have it, by step and order in the step; a call's transfer time is the least any of them
    took (the rank that arrived last only moves data), the rest of each rank's time is waiting.
    Summed over the calls in ``steps`` whose calls match one to one on every rank of the row (a step
    where a rank has a call more or less is left out). {rank: [(transfer_us, wait_us) or None per
    row]}; None for a row with no such step."""
    by_rank: dict = {}
    for s in summaries:
        keys = [tuple(k) for k in (s.get("collectives") or [])]
        calls = s.get("collective_calls")
        if calls is None:
            by_rank[s["rank"]] = (keys, None)
            continue
        grouped: dict = {}
        for row, step, dur, *_rest in calls:
            if step in steps and 0 <= row < len(keys):
                grouped.setdefault((keys[row], step), []).append(float(dur))
        by_rank[s["rank"]] = (keys, grouped)
    # A row's calls in a step pair up only when every rank that has the row (and recorded its
    # calls) made as many of them there; the i-th call's transfer is then the least any of them took.
    # Found once per (row, step) over all ranks, not once per rank: linear in the ranks.
    holders: dict = {}
    for rank, (keys, grouped) in by_rank.items():
        if grouped is not None:
            for key in dict.fromkeys(keys):
                holders.setdefault(key, []).append(rank)
    seen: dict = {}
    for _keys, grouped in by_rank.values():
        for (key, step), durs in (grouped or {}).items():
            entry = seen.get((key, step))
            if entry is None:
                seen[(key, step)] = [1, len(durs), list(durs)]
                continue
            entry[0] += 1
            if entry[1] != len(durs):
                entry[1] = -1
            elif entry[1] >= 0:
                entry[2] = [min(x, d) for x, d in zip(entry[2], durs)]
    least = {ks: entry[2] for ks, entry in seen.items() if entry[1] >= 0 and entry[0] == len(holders[ks[0]])}
    out: dict = {}
    for rank, (keys, grouped) in by_rank.items():
        rows = []
        for key in keys:
            if grouped is None or len(holders.get(key, ())) < 2:
                rows.append(None)  # no calls recorded here, or no other rank has the row
                continue
            transfer = wait = 0.0
            matched = 0
            for (k, step), mine in grouped.items():
                if k != key or (key, step) not in least:
                    continue  # a call missing on some rank: this step's calls cannot be paired
                matched += 1
                for d, low in zip(mine, least[(key, step)]):
                    transfer += low
                    wait += d - low
            rows.append((round(transfer, 3), round(wait, 3)) if matched else None)
        out[rank] = rows
    return out


def _calls_by_step(summary: dict, steps: set) -> Optional[dict]:
    """{(row key, step): [dur_us of each call, in order]} over ``steps``; None without calls."""
    calls = summary.get("collective_calls")
    if calls is None:
        return None
    keys = [tuple(k) for k in (summary.get("collectives") or [])]
    grouped: dict = {}
    for row, step, dur, *_rest in calls:
        if step in steps and 0 <= row < len(keys):
            grouped.setdefault((keys[row], step), []).append(float(dur))
    return grouped


def critical_path_waits(summaries: list, steps: set) -> dict:
    """Each rank's critical path with its waiting inside collectives given to the ranks it waited for
    (docs/metrics.md, "Critical path across ranks"). A call's calls are paired across the ranks as in
    ``collective_split``; the rank with the shortest call arrived last, and every other rank's time
    beyond it is waiting for that rank. Per step, that waiting (up to the step's
    gpu_communication_bound time on the path, shared in proportion when it is more) moves from
    gpu_communication_bound to ``waiting_for_rank_<N>``, and ``held_by`` names each such rank with
    its own largest cause in the same step. {rank: [step rows]}, only for ranks that waited."""
    calls = {s["rank"]: _calls_by_step(s, steps) for s in summaries}
    paths = {s["rank"]: {p.get("step"): p for p in _rows(s.get("critical_path"))} for s in summaries}
    out: dict = {}
    for s in summaries:
        rank, mine = s["rank"], calls[s["rank"]]
        if not mine or not paths[rank]:
            continue
        waited: dict = {}  # step -> {late rank: us}
        for (key, step), durs in mine.items():
            peers = {r: g[(key, step)] for r, g in calls.items() if r != rank and g and (key, step) in g}
            if not peers or any(len(p) != len(durs) for p in peers.values()):
                continue
            for i, d in enumerate(durs):
                late, least = min(((r, p[i]) for r, p in peers.items()), key=lambda x: (x[1], x[0]))
                if least < d:
                    per_step = waited.setdefault(step, {})
                    per_step[late] = per_step.get(late, 0.0) + d - least
        if waited:
            out[rank] = [
                _held_path(p, waited.get(step, {}), paths)
                for step, p in sorted(paths[rank].items(), key=_step_key)
            ]
    return out


def _step_key(item) -> float:
    step = item[0]
    return step if isinstance(step, (int, float)) else math.inf


def _held_path(path: dict, waited: dict, paths: dict) -> dict:
    length = float(path.get("length_us") or 0.0)
    pct = dict(path.get("by_cause_pct") or {})
    comm_us = float(pct.get("gpu_communication_bound") or 0.0) * length / 100.0
    total = sum(waited.values())
    if length <= 0 or comm_us <= 0 or total <= 0:
        return dict(path)
    scale = min(1.0, comm_us / total)
    held_by = []
    for late, us in sorted(waited.items()):
        moved = us * scale
        pct["gpu_communication_bound"] -= 100.0 * moved / length
        pct[f"waiting_for_rank_{late}"] = 100.0 * moved / length
        theirs = (paths.get(late) or {}).get(path.get("step")) or {}
        causes = {k: v for k, v in (theirs.get("by_cause_pct") or {}).items() if isinstance(v, (int, float))}
        held_by.append(
            {
                "rank": late,
                "wait_us": round(moved, 3),
                "its_cause": max(causes, key=lambda k: (causes[k], k)) if causes else None,
                "its_top": [dict(t) for t in (theirs.get("top") or [])[:1]],
            }
        )
    pct["gpu_communication_bound"] = max(0.0, pct["gpu_communication_bound"])
    return {**path, "by_cause_pct": pct, "held_by": held_by}


def _rank_energy(summary: dict, steps: list[dict]) -> dict:
    """The rank's mean energy per step over the steps compared (those with energy measured), and per
    sample with its batch size; {} when the rank's report has no energy (no NVML samples)."""
    if not any("energy_j" in st for st in steps):
        return {}
    joules = [st["energy_j"] for st in steps if isinstance(st.get("energy_j"), (int, float))]
    mean = _mean(joules) if joules else None
    batch = summary.get("batch_size")
    return {
        "energy_j": round(mean, 6) if mean is not None else None,
        "energy_per_sample_j": round(mean / batch, 6)
        if mean is not None and isinstance(batch, int) and batch > 0
        else None,
    }


class _AllButOne:
    """Order statistics of every rank's values but one rank's, without sorting the others' values
    once per rank (quadratic at thousands of ranks): the values are sorted once, stably, and a
    rank's own entries are skipped by their places, so each answer is the very element sorting the
    others' values (in rank order) would give."""

    def __init__(self, values: list, owners: list):
        self.values, self.owners = values, owners
        order = sorted(range(len(values)), key=values.__getitem__)
        self.sorted = [values[i] for i in order]
        self.places: dict = {}
        for place, i in enumerate(order):
            self.places.setdefault(owners[i], []).append(place)

    def _kth(self, owner, k: int):
        at = k
        for place in self.places.get(owner, ()):  # ascending
            if place > at:
                break
            at += 1
        return self.sorted[at]

    def _left(self, owner) -> int:
        return len(self.sorted) - len(self.places.get(owner, ()))

    def median_low(self, owner):
        """``statistics.median_low`` of the values of every owner but ``owner``."""
        return self._kth(owner, (self._left(owner) - 1) // 2)

    def median(self, owner):
        """``statistics.median`` of the values of every owner but ``owner``."""
        n = self._left(owner)
        if n % 2:
            return self._kth(owner, n // 2)
        return (self._kth(owner, n // 2 - 1) + self._kth(owner, n // 2)) / 2


def _noise_us(devs: _AllButOne, rank, spread: dict) -> float:
    """One standard deviation of the other ranks' step-to-step noise, robustly: 1.4826 x the median
    absolute deviation of each one's per-step times from its own median, pooled. ``devs`` holds
    every rank's deviations; ``spread`` caches, per centre, every deviation's distance from it."""
    if devs._left(rank) == 0:
        return 0.0
    centre = devs.median(rank)
    if centre not in spread:
        spread[centre] = _AllButOne([abs(d - centre) for d in devs.values], devs.owners)
    return 1.4826 * spread[centre].median(rank)


def _low_quartile(xs: list[float]) -> float:
    """The lower quartile (nearest rank, from below): the best of up to 4 steps, the second of 5 to 8."""
    ordered = sorted(xs)
    return ordered[(len(ordered) - 1) // 4]


def straggler_calls(per_rank: dict, steps: list) -> list[dict]:
    """``straggler_call`` of every rank (in ``per_rank``'s order) against all the others, with each
    "median of the other ranks" read from values sorted once per step and quantity."""
    ranks = list(per_rank)
    if len(ranks) < 2 or not steps:
        return []
    keys = [k for k in CATEGORY_KEYS if k != COMM]
    at_step = {
        step: {
            "busy": _AllButOne([per_rank[q]["busy"][step] for q in ranks], ranks),
            "total": _AllButOne([per_rank[q]["total"][step] for q in ranks], ranks),
            **{k: _AllButOne([per_rank[q]["cats"][step].get(k, 0.0) for q in ranks], ranks) for k in keys},
        }
        for step in steps
    }
    values, owners = [], []
    for q in ranks:
        xs = [per_rank[q]["busy"][s] for s in steps]
        centre = statistics.median(xs)
        values += [x - centre for x in xs]
        owners += [q] * len(xs)
    devs = _AllButOne(values, owners)
    best = _AllButOne([_low_quartile([per_rank[q]["busy"][s] for s in steps]) for q in ranks], ranks)
    spread: dict = {}
    return [
        straggler_call(r, per_rank, steps, at_step=at_step, noise=_noise_us(devs, r, spread), best=best)
        for r in ranks
    ]


def straggler_call(rank: int, per_rank: dict, steps: list, *, at_step: dict, noise: float, best) -> dict:
    """Whether ``rank`` holds the others up, step by step (the rule above), with the numbers that
    say so: ``excess_us`` (median per-step excess over the other ranks' median, outside
    collectives), ``excess_pct`` (of the reference step), ``category`` (the breakdown key whose
    excess carries most of it), ``steps_held`` (the steps it was slower in, by more than
    ``threshold_us``), ``matched_steps``, ``noise_us``, ``best_excess_us`` (its lower quartile
    minus the other ranks'). ``at_step``, ``noise`` and ``best``: the other ranks' medians per step
    and quantity, their noise and their lower quartiles (``straggler_calls``)."""
    mine = per_rank[rank]
    excess, ref_busy, ref_total, by_key = [], [], [], {k: [] for k in CATEGORY_KEYS if k != COMM}
    for step in steps:
        others = at_step[step]
        ref = others["busy"].median_low(rank)
        excess.append(mine["busy"][step] - ref)
        ref_busy.append(ref)
        ref_total.append(others["total"].median_low(rank))
        for k in by_key:
            by_key[k].append(mine["cats"][step].get(k, 0.0) - others[k].median_low(rank))
    ref_b, ref_t = statistics.median(ref_busy), statistics.median(ref_total)
    floor = max(STRAGGLER_MIN_US, ref_b * STRAGGLER_MIN_PCT / 100.0, ref_t * STRAGGLER_MIN_STEP_PCT / 100.0)
    threshold = max(STRAGGLER_NOISE_K * noise, floor)
    # Load slows a rank in some steps, not in all: a straggler is slower in its best steps too.
    best = _low_quartile([mine["busy"][s] for s in steps]) - best.median_low(rank)
    held = [step for step, e in zip(steps, excess) if e > threshold]
    typical = statistics.median(excess)
    needed = max(STRAGGLER_MIN_STEPS, math.ceil(STRAGGLER_MAJORITY * len(steps)))
    category = max(by_key, key=lambda k: statistics.median(by_key[k]))
    return {
        "rank": rank,
        "excess_us": round(typical, 3),
        "excess_pct": round(100.0 * typical / ref_t, 2) if ref_t > 0 else 0.0,
        "category": category,
        "steps_held": held,
        "matched_steps": len(steps),
        "threshold_us": round(threshold, 3),
        "noise_us": round(noise, 3),
        "best_excess_us": round(float(best), 3),
        "named": len(held) >= needed and best > floor,
    }


def attach(data: dict, result: dict, *, note: str = "", skipped_files: Optional[list] = None) -> dict:
    """Put a cross-rank result into a report dict (the keys docs/schema.md documents);
    ``skipped_files``, the rank files that could not be read, only when there are some."""
    data["ranks"] = result["ranks"]
    data["stragglers"] = result["stragglers"]
    data["cross_rank"] = {
        "world_size": result["world_size"],
        "matched_steps": result["matched_steps"],
        "missing_ranks": result["missing_ranks"],
        "imbalance_pct": result["imbalance_pct"],
        "slowest_unnamed": result.get("slowest_unnamed"),
        "note": note,
    }
    if skipped_files:
        data["cross_rank"]["skipped_files"] = [dict(s) for s in skipped_files]
    own = (data.get("distributed") or {}).get("rank", _dist_info(data).get("rank"))
    if own is None and result["ranks"]:
        own = result["ranks"][0]["rank"]
    _split_collectives(data, (result.get("collective_split") or {}).get(own))
    held = {h.get("step"): h for h in (result.get("critical_path") or {}).get(own) or [] if "held_by" in h}
    if held and isinstance(data.get("critical_path"), dict):
        steps = [
            {**p, "by_cause_pct": held[p["step"]]["by_cause_pct"], "held_by": held[p["step"]]["held_by"]}
            if p.get("step") in held
            else p
            for p in _rows(data["critical_path"].get("steps"))
        ]
        data["critical_path"] = {**data["critical_path"], "steps": steps}
    return data


def _split_collectives(data: dict, split: Optional[list]) -> None:
    """The report's own collectives rows get their transfer and waiting times, and their
    bandwidths over the transfer time (nccl-tests' definitions, computed by the native core)."""
    rows = data.get("collectives")
    if not split or not isinstance(rows, list) or len(split) != len(rows):
        return
    from .._native import _core

    for row, part in zip(rows, split):
        if part is None:
            continue
        row["transfer_us"], row["wait_us"] = part
        if row.get("bytes") is not None:
            algbw, busbw = _core.collective_bandwidths(
                str(row.get("name", "")),
                int(row["bytes"]),
                int(round(part[0] * 1000)),
                int(row["group_size"]) if row.get("group_size") is not None else -1,
            )
            row["algbw_gbps"], row["busbw_gbps"] = algbw, busbw


def clock_offset(reference: dict, mine: dict, *, same_clock: bool = False) -> dict:
    """How far to shift a rank's clock onto the reference rank's (``clock_anchors`` of both): the
    median, over the collective calls both recorded (matched by kind, group, step and order), of the
    difference of their ends; a collective ends at about the same moment on every rank of its group
    (the last to arrive sets it), while ranks start it at different times. Without a common call,
    the median difference of the steps' ends (a synchronous job's steps end together too); without
    either, 0. With ``same_clock`` (live traces of one host: one CLOCK_MONOTONIC) nothing is shifted,
    and the calls only say how far apart their ends are. Returns {"offset_us", "aligned_by":
    "host clock" | "collectives" | "steps" | "none", "matched", "skew_us": the largest distance of a
    matched end from where the shift puts it (how well the ranks line up)}."""
    for what in ("calls", "steps"):
        pairs = [
            (reference[what][k], mine[what][k]) for k in mine.get(what, {}) if k in reference.get(what, {})
        ]
        if pairs:
            offset = 0.0 if same_clock else statistics.median(ref - own for ref, own in pairs)
            skew = max(abs(ref - (own + offset)) for ref, own in pairs)
            return {
                "offset_us": round(offset, 3),
                "aligned_by": "host clock" if same_clock else "collectives" if what == "calls" else "steps",
                "matched": len(pairs),
                "skew_us": round(skew, 3),
            }
    return {
        "offset_us": 0.0,
        "aligned_by": "host clock" if same_clock else "none",
        "matched": 0,
        "skew_us": None,
    }
