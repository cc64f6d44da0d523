"""A watched run's folder read from outside the job: every rank's state from ``RUN_DIR/rank<N>/
watch.jsonl`` (what ``gpuprof top`` shows), the ``straggler`` flag the ranks' files hold together
(the cross-rank report's rule, analysis/ranks.py, over the steps every rank wrote), and a capture of
N steps requested of every watching rank (``gpuprof capture``; the ranks' side is
session/capture.py). Reads and writes files only: no daemon, no signal, nothing but a shared
filesystem between the job and whoever looks.

The straggler flag compares, step by step over the last ``STRAGGLER_WINDOW`` steps every rank wrote
one by one, three of the watched numbers, each with the cross-rank report's rule (a rank over the
other ranks' median by more than their noise in a clear majority of the steps and in its best ones):
the step time (ranks that do not wait for each other every step), the DataLoader wait (a rank whose
batches come late: the others then wait for it in their collectives), and on ranks without a GPU
the process's CPU time (a rank with more work to do; a rank waiting in a gloo collective sleeps).
On a GPU, a rank slow in its GPU work takes the same step time as the others that wait for it, and
its CPU time says nothing of it: only a capture's report (time outside collectives) shows it.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from pathlib import Path
from typing import Callable, Optional

from .._errors import UserError
from .capture import MAX_CAPTURE_STEPS, REQUEST_FILE, capture_folder, next_capture_id, registry

STRAGGLER_WINDOW = 50  # the last steps every rank wrote, compared by the straggler rule
STRAGGLER_METRICS = (  # (step line field, what it is, only on ranks without a GPU)
    ("step_ms", "step time", False),
    ("dataloader_wait_ms", "DataLoader wait", False),
    ("cpu_ms", "CPU time", True),
)
RECENT_STEPS = 200  # step lines kept per rank: the medians and the straggler call read these
MARGIN_S = 5.0  # a capture starts this long after the most advanced rank's estimated step ...
MIN_MARGIN_STEPS = 5  # ... and at least this many steps after it
PACE_STEPS = 3  # a rank's pace is known once it wrote this many steps after step 0
POLL_S = 0.5
SETTLED = ("done", "partial", "missed", "failed")


def _pid_alive(pid) -> Optional[bool]:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OSError):
        return None
    return True


def read_rank(path: Path) -> Optional[dict]:
    """One rank's state from its watch.jsonl: the lines since its last ``start`` line, as
    {rank, world, pid, host, started, ended, step (the last finished), t (its end), steps (the last
    RECENT_STEPS step lines), baseline_ms, flags (those that hold), captures (id -> last line),
    alive (False when the process is known gone: same host, no such pid), path}; None when the file
    holds no start line."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.readlines()
    except OSError:
        return None
    lines = []
    for text in raw:
        try:
            line = json.loads(text)
        except ValueError:
            continue  # a line being written, or cut by a crash
        if isinstance(line, dict):
            lines.append(line)
    starts = [i for i, line in enumerate(lines) if line.get("kind") == "start"]
    if not starts:
        return None
    start = lines[starts[-1]]
    state = {
        "rank": start.get("rank", 0),
        "world": start.get("world", 1),
        "pid": start.get("pid"),
        "host": start.get("host", ""),
        "started": start.get("t"),
        "ended": None,
        "step": None,
        "t": start.get("t"),
        "steps": [],
        "baseline_ms": None,
        "flags": {},
        "captures": {},
        "path": str(path),
    }
    for line in lines[starts[-1] + 1 :]:
        kind = line.get("kind")
        if kind == "step":
            state["steps"].append(line)
            state["step"] = line.get("step", 0) + (line.get("steps") or 1) - 1
            state["t"] = line.get("t", state["t"])
        elif kind == "end":
            state["ended"] = line.get("t")
        elif kind == "baseline":
            state["baseline_ms"] = line.get("baseline_ms")
        elif kind == "flag":
            name = str(line.get("flag", ""))
            if name.endswith("_over"):
                state["flags"].pop(name[: -len("_over")], None)
            else:
                state["flags"][name] = line
        elif kind == "capture":
            state["captures"][line.get("id")] = line
    del state["steps"][:-RECENT_STEPS]
    alive = None
    if state["host"] == socket.gethostname() and state["pid"] is not None:
        alive = _pid_alive(state["pid"])
    state["alive"] = alive
    return state


def rank_states(run_dir) -> list[dict]:
    """Every rank's state under ``run_dir`` (``rank*/watch.jsonl``), by rank, with the straggler
    flag (``straggler_flags``) among each one's ``flags``."""
    root = Path(run_dir)
    found = []
    for path in root.glob("rank*/watch.jsonl"):
        if not re.fullmatch(r"rank\d+", path.parent.name):
            continue
        state = read_rank(path)
        if state is not None:
            found.append(state)
    found.sort(key=lambda s: s["rank"])
    for rank, flag in straggler_flags(found).items():
        next(s for s in found if s["rank"] == rank)["flags"]["straggler"] = flag
    return found


def straggler_flags(states: list[dict]) -> dict:
    """rank -> its ``straggler`` flag ({flag, what, excess_ms, threshold_ms, steps_held,
    matched_steps, message}) for each rank the rule names on one of STRAGGLER_METRICS (the first
    it is named on), over the last STRAGGLER_WINDOW steps every rank wrote one by one."""
    from ..analysis.ranks import straggler_calls

    if len(states) < 2:
        return {}
    by_rank = {s["rank"]: {x["step"]: x for x in s["steps"] if (x.get("steps") or 1) == 1} for s in states}
    common = set.intersection(*(set(steps) for steps in by_rank.values()))
    matched = sorted(common)[-STRAGGLER_WINDOW:]
    if not matched:
        return {}
    gpu = any(x.get("gpu_peak_allocated_bytes") is not None for s in states for x in s["steps"][-5:])
    flags = {}
    for field, what, cpu_only in STRAGGLER_METRICS:
        if cpu_only and gpu:
            continue
        per_rank = {}
        for rank, steps in by_rank.items():
            values = [steps[n].get(field) for n in matched]
            if any(v is None for v in values):
                break
            per_rank[rank] = {
                "busy": {n: v * 1000.0 for n, v in zip(matched, values)},
                "total": {n: (steps[n].get("step_ms") or 0.0) * 1000.0 for n in matched},
                "cats": {n: {} for n in matched},
            }
        else:
            for rank, call in zip(per_rank, straggler_calls(per_rank, matched)):
                if rank in flags or not call["named"]:
                    continue
                flags[rank] = {
                    "flag": "straggler",
                    "what": what,
                    "excess_ms": round(call["excess_us"] / 1000.0, 3),
                    "threshold_ms": round(call["threshold_us"] / 1000.0, 3),
                    "steps_held": len(call["steps_held"]),
                    "matched_steps": call["matched_steps"],
                    "message": f"rank {rank}'s {what} is {call['excess_us'] / 1000.0:.1f} ms over the other "
                    f"ranks' in {len(call['steps_held'])} of the last {call['matched_steps']} steps (their "
                    f"noise allows {call['threshold_us'] / 1000.0:.1f} ms)",
                }
    return flags


def rank_rows(states: list[dict], window: int = 20) -> list[dict]:
    """One row per rank for a live view: rank, host, state (running, ended, gone: the process is
    no more and wrote no end line), step, step_time_ms (the last), step_time_median_ms and
    dataloader_wait_pct (over the last ``window`` steps), rss_bytes, gpu_util_pct, gpu_mem_bytes,
    age_s (since its last step line), flags (names)."""
    now = time.time()
    rows = []
    for s in states:
        recent = s["steps"][-window:]
        last = recent[-1] if recent else {}
        weights = [(x.get("steps") or 1) for x in recent]
        total = sum((x.get("step_ms") or 0.0) * w for x, w in zip(recent, weights))
        wait = sum((x.get("dataloader_wait_ms") or 0.0) * w for x, w in zip(recent, weights))
        state = "ended" if s["ended"] is not None else ("gone" if s["alive"] is False else "running")
        rows.append(
            {
                "rank": s["rank"],
                "host": s["host"],
                "state": state,
                "step": s["step"],
                "step_time_ms": last.get("step_ms"),
                "step_time_median_ms": _round(_median([x.get("step_ms") for x in recent])),
                "dataloader_wait_pct": round(100.0 * wait / total, 1) if total > 0 else None,
                "rss_bytes": last.get("rss_bytes"),
                "gpu_util_pct": last.get("gpu_util_pct"),
                "gpu_mem_bytes": last.get("gpu_mem_bytes"),
                "age_s": round(now - s["t"], 1) if s["t"] is not None else None,
                "flags": sorted(s["flags"]),
                "flag_messages": [str(f.get("message", "")) for _, f in sorted(s["flags"].items())],
            }
        )
    return rows


def is_running(state: dict) -> bool:
    return state["ended"] is None and state["alive"] is not False


def _median(values: list) -> Optional[float]:
    s = sorted(v for v in values if v is not None)
    if not s:
        return None
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


def _pace(state: dict) -> Optional[float]:
    """The median time of the rank's last 20 steps (step 0, which holds the script's setup, left
    out), in ms; None before it has written PACE_STEPS of them."""
    timed = [x.get("step_ms") for x in state["steps"][-20:] if x.get("step", 0) >= 1]
    return _median(timed) if len(timed) >= PACE_STEPS else None


def estimated_step(state: dict, now: float) -> int:
    """The step the rank is likely in now: its last written step, plus the steps of the time since
    (the log is written once a second), at its recent median step time."""
    last = state["step"] if state["step"] is not None else -1
    median = _pace(state)
    if not median or state["t"] is None:
        return last + 1
    return last + 1 + int(max(0.0, now - state["t"]) * 1000.0 / median)


def start_step(states: list[dict], now: float) -> int:
    """The first step of a capture: the most advanced rank's estimated step plus the steps of
    MARGIN_S (at least MIN_MARGIN_STEPS), so that every rank sees the request (each looks once a
    second) before it gets there."""
    ahead = max(estimated_step(s, now) for s in states)
    medians = [_pace(s) for s in states]
    fastest = min((m for m in medians if m), default=None)
    margin = (
        MIN_MARGIN_STEPS if not fastest else max(MIN_MARGIN_STEPS, math.ceil(MARGIN_S * 1000.0 / fastest))
    )
    return ahead + margin


def _next_id(root: Path) -> int:
    return next_capture_id(root)


def _write_request(root: Path, request: dict) -> None:
    tmp = root / f".{REQUEST_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(request) + "\n")
    os.replace(tmp, root / REQUEST_FILE)


def resolve_target(target) -> Path:
    """A run folder from what ``gpuprof capture`` was given: a folder, or a number: a SLURM job id
    or the PID of a watched process on this host, as the watched runs registered them
    (session/capture.py ``register``). UserError when it is neither."""
    path = Path(target)
    if path.is_dir() or not str(target).isdigit():
        return path
    where = registry()
    for name in (f"slurm-{target}", f"pid-{socket.gethostname()}-{target}"):
        try:
            return Path((where / name).read_text(encoding="utf-8").strip())
        except OSError:
            continue
    raise UserError(
        f"{target}: no watched run is known by that SLURM job id or PID on {socket.gethostname()} "
        f"(in {where}); give the run's --out folder"
    )


def request_capture(
    run_dir,
    steps: int,
    *,
    timeout_s: float = 600.0,
    modules: bool = False,
    memory: bool = False,
    shapes: bool = False,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """Ask every watching rank of the job writing ``run_dir`` to record the same ``steps`` steps
    with the full profiler, and wait (up to ``timeout_s``) until each has written its report.
    Returns {"id", "folder", "start", "steps", "ranks": {rank: its capture line, or a line saying
    why it has none}, "complete": every asked rank's report written, "stragglers": {rank: the
    straggler flag's message} when the request was made}. Raises UserError when there is
    nothing to ask (no such folder, not the caller's, nothing watched there, the job ended)."""
    root = Path(run_dir)
    if not isinstance(steps, int) or not 1 <= steps <= MAX_CAPTURE_STEPS:
        raise UserError(f"--steps must be a number of steps from 1 to {MAX_CAPTURE_STEPS}, not {steps}")
    if not root.is_dir():
        raise UserError(f"{run_dir}: no such folder (the --out folder of gpuprof run --watch)")
    if hasattr(os, "getuid") and root.stat().st_uid != os.getuid():
        raise UserError(f"{run_dir} belongs to another user; only the run's owner can ask for a capture")
    states = rank_states(root)
    if not states:
        raise UserError(
            f"nothing is watching in {run_dir}: no rank*/watch.jsonl (start the job with "
            f"gpuprof run --watch --out {run_dir} script.py, or gpuprof.watch(out=...))"
        )
    live = [s for s in states if is_running(s)]
    if not live:
        where = ", ".join(f"rank {s['rank']} at step {s['step']}" for s in states)
        raise UserError(f"the job in {run_dir} has ended ({where}); nothing to capture")
    say = progress or (lambda text: None)
    deadline = time.monotonic() + timeout_s
    if any(_pace(s) is None for s in live):
        # A rank that has not written a few steps yet has no pace to place the first step by.
        say("waiting for every rank's first steps, to know their pace")
        while any(_pace(s) is None for s in live) and time.monotonic() < deadline:
            time.sleep(POLL_S)
            fresh = {s["rank"]: s for s in rank_states(root)}
            live = [fresh.get(s["rank"], s) for s in live]
            live = [s for s in live if is_running(s)] or live
    now = time.time()
    start = start_step(live, now)
    capture_id = _next_id(root)
    folder = capture_folder(root, capture_id)
    request = {
        "id": capture_id,
        "start": start,
        "steps": steps,
        "modules": bool(modules),
        "memory": bool(memory),
        "shapes": bool(shapes),
        "t": now,
    }
    try:
        _write_request(root, request)
    except OSError as e:
        raise UserError(f"cannot write the request into {run_dir}: {e.strerror or e}") from None
    asked = [s["rank"] for s in live]
    say(
        f"capture {capture_id}: steps {start}..{start + steps - 1} asked of rank"
        f"{'s' if len(asked) > 1 else ''} {', '.join(map(str, asked))} "
        f"(now at step {max(s['step'] or 0 for s in live)})"
    )
    said = time.monotonic()
    while True:
        answers = _answers(root, asked, capture_id, start, steps)
        if all(a["state"] in SETTLED or a["state"] == "ended" for a in answers.values()):
            break
        if time.monotonic() >= deadline:
            for a in answers.values():
                if a["state"] not in SETTLED and a["state"] != "ended":
                    a["state"] = "timed out"
                    a["reason"] = f"no report within {timeout_s:g} s (at step {a.get('at')})"
            break
        if time.monotonic() - said >= 5.0:
            said = time.monotonic()
            say(
                f"capture {capture_id}: "
                + "; ".join(
                    f"rank {r} {a['state']} at step {a.get('at')}" for r, a in sorted(answers.items())
                )
            )
        time.sleep(POLL_S)
    complete = all(a["state"] == "done" for a in answers.values())
    stragglers = {s["rank"]: s["flags"]["straggler"]["message"] for s in live if "straggler" in s["flags"]}
    return {
        "id": capture_id,
        "folder": str(folder),
        "start": start,
        "steps": steps,
        "ranks": answers,
        "complete": complete,
        "stragglers": stragglers,
    }


def _answers(root: Path, asked: list, capture_id: int, start: int, steps: int) -> dict:
    states = {s["rank"]: s for s in rank_states(root)}
    out = {}
    for rank in asked:
        s = states.get(rank)
        line = dict(s["captures"].get(capture_id) or {}) if s else {}
        at = s["step"] if s else None
        if line.get("state") in SETTLED:
            line["at"] = at
            out[rank] = line
        elif s is None or not is_running(s):
            # A signal ended the run inside the steps: the profiler wrote what it had recorded, and
            # the process had no time for its capture line.
            world = s["world"] if s else 1
            report = capture_folder(root, capture_id) / (
                f"rank{rank}/report.json" if world > 1 else "report.json"
            )
            if report.is_file():
                out[rank] = {
                    "state": "partial",
                    "at": at,
                    "files": [str(report)],
                    "reason": f"the rank's run ended at step {at}, inside the steps; its report holds "
                    "those it recorded",
                }
                continue
            out[rank] = {
                "state": "ended",
                "at": at,
                "reason": f"the rank's run ended at step {at}, before it reported steps {start}.."
                f"{start + steps - 1}",
            }
        else:
            out[rank] = {"state": line.get("state", "asked"), "at": at}
    return out
