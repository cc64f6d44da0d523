"""The step journal: each completed step of a recorded span appended to ``steps.partial.jsonl`` in
the run's output folder as it completes, so that a job killed before its span closes (SIGKILL, the
out-of-memory killer, ``os._exit``) keeps its completed steps. The span's clean close removes the
file (its report and trace are written then); a journal left behind is read back by ``gpuprof
analyze DIR`` and ``gpuprof report DIR`` into a report that says the job ended without closing.

The file is JSON Lines: a header object, then one Chrome-trace complete event per step. A live
session's event also carries, under ``"gpuprof"``, the step's summary the native collector made at
the step's end from the events recorded since the step before (``_core.StepSummarizer``,
cpp/src/analysis/step_journal.cpp): the step's breakdown, its operators (name, calls, host self and
total time, FLOPs) and its memory peaks, so the rebuilt report has the operator table and the step
breakdown of the completed steps. It is append-only, flushed once per step, and bounded
(``max_bytes``); a last line cut short by the kill is skipped when read. Nothing here imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union


def _warn(message: str, *args) -> None:
    # logging loads here, not with the module: `gpuprof analyze` imports this module and never warns.
    import logging

    logging.getLogger("gpuprof").warning(message, *args)


JOURNAL_FILE = "steps.partial.jsonl"
JOURNAL_FORMAT = "gpuprof-step-journal"
DEFAULT_MAX_BYTES = 32 << 20  # a 30-operator step takes about 2.5 KB: some 13,000 steps


class StepJournal:
    """The writer, on the training thread: never raises. A failed write is one warning, then the
    journal is off for the rest of the session and training goes on."""

    def __init__(self, folder: Union[str, os.PathLike], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.folder = Path(folder)
        self.path = self.folder / JOURNAL_FILE
        self.max_bytes = int(max_bytes)
        self._file = None
        self._written = 0
        self._off = False
        self._pid = os.getpid()

    def _open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        import socket

        from .._host import job_rank

        rank, world, _how = job_rank()  # the launcher's (torchrun, srun, mpirun), or 0 of 1
        header = {
            "format": JOURNAL_FORMAT,
            "version": 1,
            "pid": os.getpid(),
            "rank": rank,
            "world_size": world,
            "max_bytes": self.max_bytes,
            "host": socket.gethostname(),  # a report rebuilt on this host may take its CPU's peak
        }
        import json  # here and in read_journal: `gpuprof analyze` of a trace only asks is_journal

        self._write(json.dumps(header).encode() + b"\n")

    def _write(self, line: bytes) -> None:
        self._file.write(line)
        self._file.flush()  # in the kernel's page cache: a killed process's data stays
        self._written += len(line)

    def step(self, step_num: int, start_ns: int, end_ns: int, summary: Optional[bytes] = None) -> None:
        """Append step ``step_num``'s event (monotonic-clock nanoseconds); ``summary``, when given,
        is the step's summary as JSON text (``_core.StepSummarizer.next()``: names escaped there)."""
        if self._off:
            return
        # One Chrome-trace complete event, formatted by hand (every field is a number, a fixed name
        # or the native summary's JSON): a third of json.dumps's time on the training thread.
        line = (
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{int(step_num)}", '
            f'"ts": {start_ns / 1000.0!r}, "dur": {max(0, end_ns - start_ns) / 1000.0!r}, '
            f'"pid": {self._pid}, "tid": 0'
        ).encode()
        line += (b', "gpuprof": ' + summary + b"}\n") if summary else b"}\n"
        try:
            if self._file is None:
                self._open()
            if self._written + len(line) > self.max_bytes:
                self._off = True
                _warn(
                    "gpuprof: the step journal %s reached its bound of %d bytes; later steps are not "
                    "journaled (a killed job keeps the steps up to here)",
                    self.path,
                    self.max_bytes,
                )
                return
            self._write(line)
        except (OSError, ValueError) as e:
            self._off = True
            _warn(
                "gpuprof: cannot write the step journal %s (%s); training goes on, but a killed job "
                "will keep no steps",
                self.path,
                e.strerror if isinstance(e, OSError) and e.strerror else e,
            )

    def discard(self) -> None:
        """The span closed cleanly (its report is written): remove the journal. The next span
        starts a fresh one."""
        f, self._file = self._file, None
        self._written = 0
        if f is None:
            return
        try:
            f.close()
            self.path.unlink()
        except OSError as e:
            _warn("gpuprof: cannot remove the step journal %s: %s", self.path, e.strerror or e)


def is_journal(path: Union[str, os.PathLike]) -> bool:
    return Path(path).name == JOURNAL_FILE


def journal_files(folder: Union[str, os.PathLike]) -> list[Path]:
    """The step journals under ``folder`` (recursively): regular files only."""
    import stat

    found = []
    for p in sorted(Path(folder).rglob(JOURNAL_FILE)):
        try:
            if stat.S_ISREG(p.stat().st_mode):
                found.append(p)
        except OSError:
            continue
    return found


def read_journal(path: Union[str, os.PathLike], max_bytes: int = 64 << 20, header: Optional[dict] = None):
    """The step events of a journal and the number of lines that could not be read (a last line
    cut short by the kill); ``header``, when given, receives the journal's header (pid, rank,
    world_size). Reads at most ``max_bytes``. Raises ValueError when the file is not a step
    journal."""
    import json

    events: list[dict] = []
    bad = 0
    with open(path, "rb") as f:
        text = f.read(max_bytes)
    lines = text.split(b"\n")
    try:
        head = json.loads(lines[0])
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != JOURNAL_FORMAT:
        raise ValueError(f"{path} is not a gpuprof step journal (its first line is not the journal's header)")
    if header is not None:
        header.update(head)
    for raw in lines[1:]:
        if not raw.strip():
            continue
        try:
            e = json.loads(raw)
        except ValueError:
            try:  # a name that is not UTF-8 (the native summary keeps a name's bytes as they are)
                e = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                bad += 1
                continue
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str):
            events.append(e)
        else:
            bad += 1
    return events, bad


def ended_note(events: list[dict], bad: int, summarized: bool = False) -> str:
    """``summarized``: the report was rebuilt from the steps' summaries (operators included)."""
    last = events[-1]["name"].rsplit("#", 1)[-1] if events else None
    note = (
        f"the job ended without closing after step {last}: this report is rebuilt from the step "
        f"journal ({len(events)} completed step(s), "
        + (
            "their operators and step breakdown; device time is not journalled)"
            if summarized
            else "step times only)"
        )
        if last is not None
        else "the job ended without closing before any recorded step completed"
    )
    if bad:
        note += f"; {bad} unreadable line(s) left out (a write cut short by the end)"
    return note
