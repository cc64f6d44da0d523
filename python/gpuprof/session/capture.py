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

Nothing here may end or alter the training run: every failure is a ``capture`` line and a warning.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("gpuprof")

REQUEST_FILE = "capture-request.json"
CAPTURE_RANK_TIMEOUT_S = 20.0  # how long rank 0 waits for the other ranks' summaries at the end
MAX_CAPTURE_STEPS = 1000


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
                rank_timeout_s=CAPTURE_RANK_TIMEOUT_S,
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
        written, failed = save_out_folder(
            report, capture_folder(self.watcher.out, self._request["id"]), rank=rank, world=world
        )
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
        line.update(fields)
        self.watcher.add_line(line)
