"""A capture of N steps on demand, inside a watched rank (``gpuprof capture RUN_DIR``; docs/watch.md).

Whoever asks writes ``RUN_DIR/capture-request.json`` (session/watch_folder.py ``request_capture``):
``{"id", "start", "steps", "modules", "memory", "shapes", "t"}``. Each watching rank looks at that
file at its once-a-second write (one ``stat``; the file is read only when it changed), and, when the
request is new, was made after the rank started watching, is owned by the rank's own user and its
``start`` step is still ahead, records steps ``start`` to ``start + steps - 1`` with the full live
profiler (``gpuprof.profile``: operators, DataLoader, memory; one warm-up step before them when
there is room), writes the span's report into ``RUN_DIR/capture-<id>/`` (``rank<N>/`` for each rank
of a job, rank 0's cross-rank report in the folder itself: ``gpuprof analyze RUN_DIR/capture-<id>``)
and goes back to watching. What happened is a ``capture`` line in the rank's watch.jsonl: ``armed``,
then ``done`` (or ``partial`` when the run ended inside the steps, ``failed`` when the profiler could
not start), or ``missed`` when the rank was already past ``start`` when it saw the request.

SIGUSR2 asks one process the same (``kill -USR2 PID``): its handler only sets a flag; the next step
boundary takes it as a request for the next ``GPUPROF_CAPTURE_STEPS`` steps (10 by default) after
one warm-up step, under the next free ``capture-<id>`` of the run folder, that rank alone (no
cross-rank report: in a job, ``capture-<id>/rank<N>/``). The handler is installed only over the
default action or "ignore"; a handler the program set is left in place (and said once in the log).

Nothing here may end or alter the training run: every failure is a ``capture`` line and a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("gpuprof")

REQUEST_FILE = "capture-request.json"
CAPTURE_RANK_TIMEOUT_S = 20.0  # how long rank 0 waits for the other ranks' summaries at the end
MAX_CAPTURE_STEPS = 1000
CAPTURE_SIGNAL = getattr(signal, "SIGUSR2", None)
DEFAULT_SIGNAL_STEPS = 10  # GPUPROF_CAPTURE_STEPS: the steps a SIGUSR2 capture records


def registry() -> Path:
    """Where watched runs leave their name for ``gpuprof capture PID|SLURM_JOB_ID``:
    ``$GPUPROF_CACHE_DIR/watching``, else ``$XDG_CACHE_HOME/gpuprof/watching``, else
    ``~/.cache/gpuprof/watching`` (a home folder the login node shares with the compute nodes)."""
    root = os.environ.get("GPUPROF_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuprof")
    return Path(root) / "watching"


def registry_names(pid: int, host: str) -> list[str]:
    """The names this process's run is known by: its PID on its host, and its SLURM job's id."""
    names = [f"pid-{host}-{pid}"]
    job = os.environ.get("SLURM_JOB_ID", "")
    if job.isdigit():
        names.append(f"slurm-{job}")
    return names


def register(run_dir: Path, pid: int, host: str) -> list[Path]:
    """Each of ``registry_names`` as a file holding the run folder's absolute path; the files
    written (none when the registry cannot be written: the run goes on)."""
    folder = registry()
    written = []
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name in registry_names(pid, host):
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            tmp.write_text(str(run_dir.resolve()) + "\n", encoding="utf-8")
            os.replace(tmp, folder / name)
            written.append(folder / name)
    except OSError as e:
        log.info("gpuprof watch: the run is not registered for gpuprof capture PID (%s)", e)
    return written


def capture_folder(run_dir, capture_id: int) -> Path:
    return Path(run_dir) / f"capture-{int(capture_id)}"


def next_capture_id(run_dir, seen=()) -> int:
    """One more than the highest capture id in ``run_dir``: its ``capture-<id>`` folders, the id of
    its request file, and ``seen``."""
    root = Path(run_dir)
    ids = [0, *seen]
    for p in root.glob("capture-*"):
        m = re.fullmatch(r"capture-(\d+)", p.name)
        if m:
            ids.append(int(m.group(1)))
    try:
        with open(root / REQUEST_FILE, encoding="utf-8") as f:
            ids.append(int(json.load(f).get("id", 0)))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return max(ids) + 1


def signal_steps() -> int:
    """``GPUPROF_CAPTURE_STEPS`` (1 to MAX_CAPTURE_STEPS), else DEFAULT_SIGNAL_STEPS with a warning."""
    text = os.environ.get("GPUPROF_CAPTURE_STEPS", "").strip()
    if not text:
        return DEFAULT_SIGNAL_STEPS
    if text.isdigit() and 1 <= int(text) <= MAX_CAPTURE_STEPS:
        return int(text)
    log.warning(
        "gpuprof watch: GPUPROF_CAPTURE_STEPS=%r is not a number of steps from 1 to %d; a SIGUSR2 "
        "capture records %d (export GPUPROF_CAPTURE_STEPS=10)",
        text,
        MAX_CAPTURE_STEPS,
        DEFAULT_SIGNAL_STEPS,
    )
    return DEFAULT_SIGNAL_STEPS


def parse_request(text: str) -> Optional[dict]:
    """The request in ``text``, its fields checked, or None when it is not one."""
    try:
        req = json.loads(text)
        out = {
            "id": int(req["id"]),
            "start": int(req["start"]),
            "steps": int(req["steps"]),
            "t": float(req["t"]),
            "modules": bool(req.get("modules", False)),
            "memory": bool(req.get("memory", False)),
            "shapes": bool(req.get("shapes", False)),
        }
    except (ValueError, KeyError, TypeError):
        return None
    if out["id"] < 1 or out["start"] < 0 or not 1 <= out["steps"] <= MAX_CAPTURE_STEPS:
        return None
    return out


class CaptureListener:
    """The requests of one watcher. ``poll()`` at each write (once a second at most); ``begins``
    is the step number at whose start a capture's profiler starts (-1: none armed), compared by the
    watcher at each step boundary; ``step()`` and ``close()`` drive the capture while it runs."""

    def __init__(self, watcher) -> None:
        self.watcher = watcher
        self.begins = -1
        self.running = None  # the gpuprof.profile of the capture in progress
        self._request: Optional[dict] = None
        self._seen: Optional[tuple] = None
        self._handled: set[int] = set()
        self._started_unix = time.time()
        self._result: dict = {}
        self.signalled = False  # set by the SIGUSR2 handler, taken at the next step boundary
        self._signal_previous = None  # the disposition ours replaced; None: ours is not installed

    # ---- SIGUSR2 ---------------------------------------------------------------------------------
    def install_signal(self) -> None:
        """Our SIGUSR2 handler, over the default action or "ignore" only, from the main thread."""
        if CAPTURE_SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            previous = signal.getsignal(CAPTURE_SIGNAL)
            if previous not in (signal.SIG_DFL, signal.SIG_IGN):
                log.warning(
                    "gpuprof watch: the program has its own SIGUSR2 handler, kept: SIGUSR2 does not "
                    "ask this process for a capture (gpuprof capture %s --steps N does)",
                    self.watcher.out,
                )
                return
            signal.signal(CAPTURE_SIGNAL, self._on_signal)
            self._signal_previous = previous
        except (ValueError, OSError):  # an embedding that does not allow it
            return

    def remove_signal(self) -> None:
        previous, self._signal_previous = self._signal_previous, None
        if previous is None:
            return
        try:
            if signal.getsignal(CAPTURE_SIGNAL) == self._on_signal:  # not if the program set its own since
                signal.signal(CAPTURE_SIGNAL, previous)
        except (ValueError, OSError):
            pass

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True  # nothing else here: the step boundary acts on it

    def take_signal(self) -> None:
        """At a step boundary after SIGUSR2: a request for the next ``GPUPROF_CAPTURE_STEPS`` steps
        after one warm-up step (the step that starts now), armed as a request file's would be."""
        self.signalled = False
        now = self.watcher.step_num
        root = self.watcher.out
        req = {"id": None, "start": now + 1, "steps": signal_steps(), "t": time.time(), "signal": True}
        req.update(modules=False, memory=False, shapes=False)
        if self._request is not None:  # no id taken: a request file may still use the next one
            what = "running" if self.running is not None else "armed"
            self._line(req, "missed", reason=f"capture {self._request['id']} was still {what}", step=now)
            return
        req["id"] = capture_id = next_capture_id(root, self._handled)
        self._handled.add(capture_id)
        try:  # the folder now: a `gpuprof capture` asked meanwhile takes the next id
            capture_folder(root, capture_id).mkdir(parents=True)
        except OSError as e:
            log.warning("gpuprof watch: no capture on SIGUSR2: %s", e)
            self._line(req, "failed", reason=str(e), step=now)
            return
        self._request = req
        self.begins = now
        self._line(req, "armed", step=now)

    # ---- requests ------------------------------------------------------------------------------
    def poll(self) -> None:
        path = self.watcher.out / REQUEST_FILE
        try:
            st = os.stat(path)
        except OSError:
            return
        mark = (st.st_ino, st.st_mtime_ns, st.st_size)
        if mark == self._seen:
            return
        self._seen = mark
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return  # only the run's own user asks for captures
        try:
            with open(path, encoding="utf-8") as f:
                req = parse_request(f.read(4096))
        except OSError:
            return
        if req is None or req["id"] in self._handled or req["t"] < self._started_unix:
            return  # not a request, one already seen, or one made before this run watched
        self._handled.add(req["id"])
        now = self.watcher.step_num  # the step that starts next
        if self.running is not None:
            self._line(req, "missed", reason=f"capture {self._request['id']} was still running", step=now)
            return
        if req["start"] < now:
            self._line(req, "missed", reason=f"the rank was at step {now} when it saw the request", step=now)
            return
        self._request = req
        self.begins = max(req["start"] - 1, now)  # one warm-up step when there is room
        self._line(req, "armed", step=now)

    # ---- the capture -----------------------------------------------------------------------------
    def begin(self) -> None:
        """At the start of step ``begins``: the profiler starts (its first step a warm-up one)."""
        from ..collect.schedule import schedule
        from ..traces.export import rank_folders
        from .profile import profile

        req, self.begins = self._request, -1
        rank, world = self.watcher.rank
        folder = capture_folder(self.watcher.out, req["id"])
        warmup = req["start"] - self.watcher.step_num
        try:
            prof = profile(
                schedule=schedule(wait=self.watcher.step_num, warmup=warmup, active=req["steps"], repeat=1),
                on_trace_ready=self._ready,
                with_modules=req["modules"],
                profile_memory=req["memory"],
                record_shapes=req["shapes"],
                batch_size=self.watcher.batch_size,
                rank_timeout_s=0.0 if req.get("signal") else CAPTURE_RANK_TIMEOUT_S,
                journal=rank_folders(folder, rank, world)[0],
                first_step=self.watcher.step_num,
            )
            prof.warn_without_steps = False
            prof.exchange_session = f"capture-{req['id']}"
            # A session the script starts itself takes over: what was recorded so far is reported.
            prof.yields_to_nested = True
            prof.on_stand_aside = self._end
            prof.start()
        except Exception as e:  # another session active, the hooks unavailable: the run goes on
            log.warning("gpuprof watch: capture %d could not start: %s", req["id"], e)
            self._line(req, "failed", reason=str(e), step=self.watcher.step_num)
            self._request = None
            return
        self.running = prof
        self._result = {}

    def step(self) -> None:
        """A step ended while the capture runs: the profiler's step; at the last one, its end."""
        prof, req = self.running, self._request
        try:
            prof.step()
        except Exception as e:
            log.warning("gpuprof watch: capture %d stopped: %s", req["id"], e)
            self._result = {"state": "failed", "reason": str(e)}
            self._end()
            return
        if prof.step_num >= req["start"] + req["steps"]:
            self._end()

    def close(self) -> None:
        """The run ends with the capture in progress: what it recorded becomes a partial report."""
        if self.running is not None:
            self._end()

    def _end(self) -> None:
        prof, req = self.running, self._request
        if prof is None:
            return
        try:
            prof.stop()  # a span cut short is reported here, through _ready
        except Exception as e:
            log.warning("gpuprof watch: capture %d did not end cleanly: %s", req["id"], e)
            self._result.setdefault("state", "failed")
            self._result.setdefault("reason", str(e))
        self.running = self._request = None
        result = self._result or {"state": "partial", "reason": "nothing was recorded", "files": []}
        if prof.stood_aside_for:
            result["state"] = "partial"
            result["reason"] = f"the script started its own gpuprof.profile at {prof.stood_aside_for}"
        self._line(req, result.pop("state"), step=self.watcher.step_num, **result)
        self.watcher.flush()  # the one who asked is waiting for this line

    def _ready(self, prof) -> None:
        from ..traces.export import save_out_folder

        report = prof.report()
        rank, world = self.watcher.rank
        folder = capture_folder(self.watcher.out, self._request["id"])
        if self._request.get("signal") and world > 1:  # that rank alone: its own folder only
            folder, rank, world = folder / f"rank{rank}", 0, 1
        written, failed = save_out_folder(report, folder, rank=rank, world=world)
        numbers = [s["step"] for s in report.steps]
        partial = bool(report.source.get("partial_span"))
        self._result = {
            "state": "partial" if partial else "done",
            "recorded": [numbers[0], numbers[-1]] if numbers else [],
            "files": written,
        }
        if failed:
            self._result["failed"] = failed
            log.warning("gpuprof watch: capture could not write %s", "; ".join(failed))

    def _line(self, req: dict, state: str, **fields) -> None:
        line = {"kind": "capture", "id": req["id"], "state": state, "t": round(time.time(), 3)}
        line.update(start=req["start"], steps=req["steps"])
        if req.get("signal"):
            line["by"] = "SIGUSR2"
        line.update(fields)
        self.watcher.add_line(line)
