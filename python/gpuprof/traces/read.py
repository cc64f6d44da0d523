"""Reading one trace file into a native ``Trace``: the C++ core reads it (``.json`` or gzip,
streamed: docs/analyze.md) into the same ``Trace`` a live session produces. Nothing here imports
torch.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Union

from .._native import _core

#: Raised for a file that cannot be read as a trace. A ``ValueError``; ``str(err)`` names the file
#: and where it went wrong; ``err.path``, ``err.byte_offset`` (in the uncompressed JSON text) and
#: ``err.event_index`` (in ``traceEvents``) say it for tools (``None`` when not known).
TraceImportError = _core.TraceImportError


def display_path(path: Union[str, os.PathLike]) -> str:
    """A path as text any output can hold: bytes of a name that are not UTF-8 become \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_path(path: Union[str, os.PathLike]) -> os.stat_result:
    """``os.stat`` with errors that say which: missing, or not allowed to look (a permission
    problem is not reported as a missing file)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{display_path(path)}: no such file or folder") from None
    except PermissionError:
        raise PermissionError(
            f"{display_path(path)}: permission denied (a folder on its path cannot be searched by this user)"
        ) from None


def _wait_for_writer(path: Path, timeout_s: float):
    """A FIFO opens for reading only once a process opens it for writing: wait for one, at most
    timeout_s, in a thread (so Ctrl-C still works). Returns the descriptor to keep open while the
    importer reads the FIFO (a second reader's open then returns at once)."""
    import threading

    box: dict = {}

    def opener():
        try:
            box["fd"] = os.open(path, os.O_RDONLY)
        except OSError as e:
            box["error"] = e

    t = threading.Thread(target=opener, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        # Release the waiting open(): be its writer for a moment, then close both ends.
        try:
            w = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            t.join(5)
            os.close(w)
        except OSError:
            pass
        if "fd" in box:
            os.close(box["fd"])
        raise TraceImportError(
            f"{display_path(path)}: a FIFO that no process is writing to (waited "
            f"{timeout_s:g} s): start the program that writes it first"
        )
    if "error" in box:
        raise box["error"]
    return box["fd"]


def import_settings() -> dict:
    """The import's settings from the environment, as keyword arguments of ``_core.import_trace``
    (docs/analyze.md): ``GPUPROF_MAX_TOKEN_MIB``, the longest single JSON string or number in MiB
    (1 to 2**24 - 1; default 64), and ``GPUPROF_IMPORT_CPUS``, the CPUs an import may count on (1 to
    65535). Unset or invalid: 0, the default."""

    def unsigned(name: str, below: int) -> int:
        # Read as C's strtoul did: leading white space and a '+' allowed, then decimal digits only.
        text = os.environ.get(name, "").lstrip(" \t\n\v\f\r")
        text = text[1:] if text.startswith("+") else text
        ok = text.isascii() and text.isdigit() and len(text.lstrip("0")) <= 20
        value = int(text) if ok else 0
        return value if 0 < value < below else 0

    return {
        "max_token_bytes": unsigned("GPUPROF_MAX_TOKEN_MIB", 1 << 24) << 20,
        "import_cpus": unsigned("GPUPROF_IMPORT_CPUS", 65536),
    }


#: The largest JSON report gpuprof reads, in MiB, unless ``GPUPROF_MAX_REPORT_MIB`` says otherwise.
DEFAULT_MAX_REPORT_MIB = 256


class InputTooLarge(ValueError):
    """An input larger than the setting that bounds it (the message names the setting)."""


def _setting(name: str, default: int) -> int:
    """A positive whole number from the environment; unset or not one: ``default``."""
    text = os.environ.get(name, "").strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else default


def read_json(path: Union[str, os.PathLike]):
    """A JSON file (a saved report, a scaling table) read whole, but never more than
    ``GPUPROF_MAX_REPORT_MIB`` MiB (default 256): a larger file, or one with no end (``/dev/zero``),
    raises ``InputTooLarge`` after reading that much. Other errors as ``json.loads`` and ``open``
    raise them (``UnicodeDecodeError`` for a file that is not text, such as a gzip trace)."""
    mib = _setting("GPUPROF_MAX_REPORT_MIB", DEFAULT_MAX_REPORT_MIB)
    with open(path, "rb") as f:
        data = f.read((mib << 20) + 1)
    if len(data) > mib << 20:
        raise InputTooLarge(
            f"{display_path(path)}: larger than {mib} MiB, the most gpuprof reads as a JSON report "
            f"(set GPUPROF_MAX_REPORT_MIB to more MiB if this file is right)"
        )
    import json  # loaded where a JSON file is read: a trace's analysis may never need it

    return json.loads(data.decode("utf-8"))


def default_max_events(memory_share: int = 1, max_memory: int = 0) -> int:
    """The most events one import keeps: ``GPUPROF_MAX_EVENTS`` when set, else as many as its
    memory budget (``memory_budget``) holds at ``EVENT_BYTES`` each (at least 100,000). Past it the
    import stops (``TooManyEvents`` when the budget set it: the analysis then reads the trace in
    windows), rather than the process running out of memory in the middle (a gzip file of a few MB
    can inflate to tens of GB of events)."""
    set_by_user = _setting("GPUPROF_MAX_EVENTS", 0)
    if set_by_user:
        return set_by_user
    budget = memory_budget(memory_share, max_memory)
    if max_memory or max_memory_setting():  # the user's own bound holds as given
        return max(1, budget // EVENT_BYTES)
    return max(100_000, budget // EVENT_BYTES) if budget else 0


def memory_budget(memory_share: int = 1, max_memory: int = 0) -> int:
    """Bytes one import may hold: ``max_memory`` (``--max-memory``), else ``GPUPROF_MAX_MEMORY``,
    else half the memory this process can still have (``memory_available``); divided by
    ``memory_share``, the imports that run at once in processes of this machine (a folder's
    workers: each gets its share, so that together they stay within the budget). 0: not known."""
    budget = max_memory or max_memory_setting() or memory_available() // 2
    return budget // max(1, memory_share)


def max_memory_setting() -> int:
    """``GPUPROF_MAX_MEMORY`` in bytes (``parse_size``); 0 when unset. A value that is not a size
    raises ``ValueError`` naming the variable."""
    text = os.environ.get("GPUPROF_MAX_MEMORY", "").strip()
    if not text:
        return 0
    try:
        return parse_size(text)
    except ValueError as e:
        raise ValueError(f"GPUPROF_MAX_MEMORY: {e}") from None


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """A memory size: a whole number of bytes, or a number with K, M, G or T (binary multiples;
    an optional "iB" or "B" after it): "2G", "1.5GiB", "512M". At least 1 MiB."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not a memory size (write it as 2G, 512M or a number of bytes)")
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size < 1 << 20:
        raise ValueError(f"{text!r} is less than 1 MiB, too little to analyse a trace in")
    return size


def _cap_reason(memory_share: int, max_memory: int) -> str:
    """Which setting set an import's event cap, for the message of a trace that exceeds it."""
    if _setting("GPUPROF_MAX_EVENTS", 0):
        return "the GPUPROF_MAX_EVENTS setting"
    share = f"this worker's 1/{memory_share} share of " if memory_share > 1 else ""
    if max_memory:
        return f"the cap from {share}--max-memory {_size(max_memory)} at {EVENT_BYTES} bytes an event"
    if max_memory_setting():
        return (
            f"the cap from {share}GPUPROF_MAX_MEMORY ({_size(max_memory_setting())}) at {EVENT_BYTES} "
            "bytes an event"
        )
    return f"the cap set from {share}half the {_size(memory_available())} of memory left to this process"


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


#: Memory one event costs through a whole ``gpuprof analyze --json`` (the Trace's record, its
#: names, the analysis and the step views): 129 bytes measured on 1.7 million events of a DDP
#: trace (docs/analyze.md, "Limits"), doubled for traces with more distinct names and arguments.
EVENT_BYTES = 256


def memory_available() -> int:
    """Bytes this process can still allocate: the least of the machine's free memory, what its
    control group's limit leaves and what its address-space limit (``ulimit -v``) leaves; 0 when
    none can be read."""
    found = []
    try:  # MemAvailable counts the page cache the kernel would give back; free memory does not
        meminfo = Path("/proc/meminfo").read_text()
        found.append(int(meminfo.split("MemAvailable:")[1].split()[0]) << 10)
    except (OSError, ValueError, IndexError):
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            found.append(max(0, soft - mapped))
    except (ImportError, OSError, ValueError, IndexError):
        pass
    return min(found) if found else 0


def import_trace(
    path: Union[str, os.PathLike],
    *,
    max_bytes: int = 0,
    max_events: int = 0,
    import_cpus: int = 0,
    max_memory: int = 0,
    memory_share: int = 1,
    progress=None,
):
    """Read one trace file into a native ``Trace``; returns ``(trace, stats)``.

    ``stats`` says how the import went: ``json_bytes``, ``records``, ``ignored_records``,
    ``skipped_by_reason``, ``compressed``, ``time_unit`` ("us" or "ns") and ``read_s``.
    ``import_cpus``: the CPUs the import may count on for threads of its own (0: those this
    process may use); a folder's worker processes each get their share. ``GPUPROF_IMPORT_CPUS``, when
    set, wins over it. ``max_memory`` and ``memory_share``: the memory budget (``memory_budget``)
    that sets the event cap when ``max_events`` is 0. ``progress``: a ``_core.ImportProgress`` the
    import keeps up to date (bytes of the file read, events parsed) for a display on another thread.
    """
    p = Path(path)
    st = check_path(p)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(
            f"{display_path(p)}: is a folder; use gpuprof.analyze(folder) for a list of reports"
        )
    held = None
    if stat.S_ISFIFO(st.st_mode):
        held = _wait_for_writer(p, float(os.environ.get("GPUPROF_FIFO_WAIT_S", "10")))
    try:
        # The OS's bytes for the name: a file name need not be valid UTF-8.
        settings = import_settings()
        if import_cpus and not settings["import_cpus"]:  # a value the user set stays
            settings["import_cpus"] = import_cpus
        cap = max_events or default_max_events(memory_share, max_memory)
        try:
            trace, stats = _core.import_trace(os.fsencode(p), max_bytes, cap, **settings, progress=progress)
        except TraceImportError as e:
            if "no traceEvents list" in str(e) and _is_gpuprof_report(p):
                import shlex

                raise TraceImportError(
                    f"{display_path(p)}: a gpuprof report, not a trace: show it with "
                    f"`gpuprof report {shlex.quote(display_path(p))}`"
                ) from None
            if max_events or "(the max_events limit;" not in str(e):
                raise
            error = TooManyEvents if not _setting("GPUPROF_MAX_EVENTS", 0) else TraceImportError
            reason = _cap_reason(memory_share, max_memory)
            err = error(
                f"{display_path(p)}: more than {cap:,} events, {reason} "
                + (
                    "(set GPUPROF_MAX_EVENTS to a larger number of events if the memory is there)"
                    if _setting("GPUPROF_MAX_EVENTS", 0)
                    else "(if the memory is there: gpuprof analyze --max-memory SIZE, or for any verb "
                    "GPUPROF_MAX_MEMORY=SIZE or GPUPROF_MAX_EVENTS=N)"
                )
            )
            err.cap, err.reason = cap, reason
            raise err from None
        records = stats["records"]
        if records and stats["skipped_by_reason"].get("not an object", 0) == records:
            # A JSON list of numbers or strings: nothing in it is an event, so no report of it
            # (an empty "0 steps" report would pass a CI gate on junk).
            raise TraceImportError(
                f"{display_path(p)}: a JSON list of {records:,} value{'s' if records > 1 else ''}, none of "
                'them an event object ({"ph": ..., "ts": ...}): not a Chrome/Kineto trace'
            )
        return trace, stats
    finally:
        if held is not None:
            os.close(held)


class TooManyEvents(TraceImportError):
    """A trace with more events than its memory budget's cap (``default_max_events``): the one the
    analysis reads in windows instead (``analysis/windowed.py``). Its message is the refusal's;
    ``cap`` is the cap and ``reason`` the setting that set it."""

    cap = 0
    reason = ""


def _is_gpuprof_report(path: Path) -> bool:
    """Whether a file that is not a trace is one of gpuprof's own saved reports."""
    try:
        return stat.S_ISREG(path.stat().st_mode) and is_report(path)
    except OSError:
        return False


def trace_source(path: Union[str, os.PathLike], stats: dict) -> dict:
    """A trace file's ``source`` in its report: which file, and how its import went."""
    return {
        "kind": "trace",
        "path": display_path(path),
        "format": "kineto",
        "compressed": stats["compressed"],
        "json_bytes": stats["json_bytes"],
        "time_unit": stats["time_unit"],
        "records": stats["records"],
        "ignored_records": stats["ignored_records"],
        "skipped_by_reason": dict(stats["skipped_by_reason"]),
    }


def is_report(p: Path) -> bool:
    """A gpuprof report (its head names a ``schema_version``) rather than a trace; OSError when the
    file cannot be read."""
    with open(p, "rb") as f:
        head = f.read(1 << 12)
    return b'"schema_version"' in head and b'"traceEvents"' not in head
