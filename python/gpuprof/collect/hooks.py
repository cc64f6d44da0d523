"""The LibTorch hooks (``_torchhooks``) for the torch that is installed now.

The hooks include torch's C++ headers and link LibTorch, so one compiled module serves exactly one
torch build, named by its binary-interface key (collect/_hooks_abi.py). So:

* the package carries the hooks prebuilt for the torch builds it was built with, one folder per key
  (``gpuprof/_hooks_prebuilt/KEY/``): the one whose key is the installed torch's is loaded, and
  nothing is compiled;
* otherwise the hooks are compiled on first use with torch's own extension builder (which brings
  the C++ standard and ABI flags of the installed torch) and cached per torch build, under
  ``$GPUPROF_CACHE_DIR`` or ``$XDG_CACHE_HOME/gpuprof`` (``~/.cache/gpuprof``), in ``hooks/``.

The cache is trusted only as far as it cannot have been written by someone else, and can neither
crash nor wedge a run (collect/_hooks_cache.py): an entry is used only when it and its folder belong
to this user or root and no one else can write them, it is published whole after a load in a child
process, a bad one is moved aside and built again, and waits for another process's build end.

Loading happens on a background thread that a session starts when it begins, so that a compile runs
while the schedule's wait and warmup steps do; a session waits for it, outside any step, only before
a step it records. Nothing here is imported by trace analysis: only a live session loads torch.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from .. import _build_info
from . import _hooks_cache as cache
from ._hooks_abi import abi_key, torch_build
from ._hooks_cache import HooksUnavailable, cache_root

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the gpuprof package
SOURCE_DIR = _PACKAGE_DIR / "_hooks_src"
PREBUILT_DIR = _PACKAGE_DIR / "_hooks_prebuilt"
# What compiling the hooks took where it was measured, said when this cache has no compile of its
# own to go by (two C++ files against torch's headers; docs/profiling.md).
MEASURED_COMPILE = "about 7 s on an idle 2-CPU machine, up to 142 s on a busy one"

__all__ = [
    "HooksUnavailable",
    "hooks",
    "start_loading",
    "settle",
    "ready",
    "compiling",
    "status",
    "torch_build",
]


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata: cheap, and loads no LibTorch."""
    import importlib.metadata  # here, not at import: 12 ms that trace analysis never needs

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _sources_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(SOURCE_DIR.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(SOURCE_DIR).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cache_key(build: dict) -> str:
    return f"{abi_key(build)}-gpuprof-{_build_info.GPUPROF_VERSION}-{_sources_digest()}"


# ---- the prebuilt hooks ----------------------------------------------------------------------------
def prebuilt_module(build: dict) -> Optional[Path]:
    """The module prebuilt with gpuprof for this torch build, if the package has one."""
    folder = PREBUILT_DIR / abi_key(build)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = folder / f"_torchhooks{suffix}"
        if path.is_file():
            return path
    return None


def prebuilt_keys() -> list[str]:
    """The torch builds the package carries prebuilt hooks for (their keys)."""
    try:
        return sorted(p.name for p in PREBUILT_DIR.iterdir() if p.is_dir())
    except OSError:
        return []


# ---- build tools ----------------------------------------------------------------------------------
def compiler() -> str | None:
    """The C++ compiler torch's extension builder would call, if it can be found."""
    cxx = os.environ.get("CXX", "c++")
    return shutil.which(cxx)


def _ninja_dir() -> str | None:
    from ._hooks_child import _ninja_dir as find

    return find()


def missing_build_tools() -> str:
    """Why the hooks could not be compiled here ("" when nothing is missing)."""
    if compiler() is None:
        cxx = os.environ.get("CXX", "c++")
        return (
            f"no C++ compiler was found (looked for `{cxx}` on PATH). Install one, then run "
            "again: on a cluster `module load gcc`, in a conda env `conda install -c conda-forge "
            "gxx_linux-64`, on Debian/Ubuntu `apt-get install g++`"
        )
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return (
            "this Python's C headers (Python.h) are missing. Install them, then run again: "
            "on Debian/Ubuntu `apt-get install python3-dev`, on a cluster load the Python "
            "module's -devel variant, in conda they come with python"
        )
    if _ninja_dir() is None:
        return "the ninja build tool is missing: `pip install ninja`, then run again"
    return ""


def compile_estimate(folder: Optional[Path]) -> str:
    seconds = cache.last_compile_s(folder) if folder else None
    if seconds is not None:
        return f"the last compile in this cache took {seconds:.0f} s"
    return f"{MEASURED_COMPILE}, where measured; this machine has {os.cpu_count()} CPUs"


# ---- building -------------------------------------------------------------------------------------
_child: Optional[subprocess.Popen] = None  # the build in progress, ended if this process exits first


def _end_child() -> None:
    child = _child
    if child is not None and child.poll() is None:
        child.kill()


atexit.register(_end_child)


def _child_env() -> dict:
    """This process's environment, with its module search path in the same order (so the child
    imports the same torch and the same gpuprof, wherever they came from)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str))
    return env


def _signal_name(rc: int) -> str:
    if rc >= 0:
        return f"exit status {rc}"
    try:
        import signal

        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def check_in_child(module: Path, timeout_s: float = 300) -> str:
    """Load and call the module in a child process, as a session would: "" when it works, else why."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuprof.collect._hooks_child", "check", str(module)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_child_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the check could not run ({e})"
    if proc.returncode == 0 and "loads" in proc.stdout:
        return ""
    last = [line.strip() for line in proc.stderr.splitlines() if line.strip()][-1:]
    return f"loading it ended with {_signal_name(proc.returncode)}" + (f" ({last[0]})" if last else "")


def _build_and_publish(folder: Path, key: str, build: dict, locked: bool = True) -> Path:
    """Compile the hooks in a private temporary folder (in a child process, which then loads and
    calls them), then publish the folder as the entry; returns the module's path in it."""
    global _child
    work = cache.new_build_folder(folder, key, locked)
    log_path = work / "build-error.log"
    started = time.monotonic()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuprof.collect._hooks_child",
                "build",
                str(work / "build"),
                str(SOURCE_DIR),
                str(_PACKAGE_DIR),
            ],
            stdout=log_fd,
            stderr=log_fd,
            stdin=subprocess.DEVNULL,
            env=_child_env(),
        )
        rc = _child.wait()
    finally:
        _child = None
        os.close(log_fd)
    built = work / "build" / "_torchhooks.so"
    if rc != 0 or not built.is_file():
        failed = folder / f"{key}.failed"
        with contextlib.suppress(OSError):
            os.rename(work, failed)
            log_path = failed / "build-error.log"
        raise HooksUnavailable(
            f"compiling gpuprof's operator hooks for torch {build['version']} failed "
            f"({_signal_name(rc)}; the compiler's output is in {log_path}). Check that the compiler "
            "works (`c++ --version`; at least GCC 9, GCC 11 for torch 2.14), or set CXX to another "
            "one, then run again"
        )
    facts = {
        "torch": build["version"],
        "git_version": build["git_version"],
        "gpuprof": _build_info.GPUPROF_VERSION,
        "compile_s": round(time.monotonic() - started, 1),
    }
    return cache.publish(work, built, folder, key, facts, torch_identity())


# ---- loading --------------------------------------------------------------------------------------
def _load_in_process(path: Path):
    from ._hooks_child import load_module

    module = load_module(path)
    sys.modules.setdefault("_torchhooks", module)
    return module


_compiling = threading.Event()  # set while this process compiles the hooks, or waits for another's


class _LoadFailed(Exception):
    """A cached module that may not or cannot be loaded here (the message says why)."""


def torch_identity() -> str:
    """Which torch installation this process uses (its library file, and this interpreter): a
    cached module checked in a child beside one is not checked again beside it."""
    import torch

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        st = os.stat(lib)
        facts = f"{lib}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
    except OSError:
        facts = str(Path(torch.__file__).parent)
    return hashlib.sha256(f"{sys.executable}|{facts}".encode()).hexdigest()[:16]


def _load_entry(entry):
    """A published entry's module, loaded into this process once a child process has loaded it
    beside this torch installation (a module that crashes its loader ends the child, not the run)."""
    identity = torch_identity()
    if not cache.has_stamp(entry.path, identity):
        why = check_in_child(entry.module)
        if why:
            raise _LoadFailed(f"{entry.module} does not load in a fresh process: {why}")
        cache.add_stamp(entry.path, identity)
    try:
        return _load_in_process(entry.module)
    except Exception as e:
        raise _LoadFailed(f"{entry.module} did not load ({type(e).__name__}: {e})") from None


def load():
    """The hooks module for the installed torch: prebuilt, cached, or compiled now. Raises
    HooksUnavailable (one line) when it cannot be had."""
    try:
        import torch  # LibTorch first, so the hooks resolve against it
    except ImportError as e:
        raise HooksUnavailable(
            f"torch is not installed in this Python ({sys.executable}: {e}); gpuprof profiles "
            "PyTorch training, so install torch there (trace analysis works without it)"
        ) from None

    build = torch_build(torch)
    notes: list[str] = []  # what was passed over, said with the outcome in one line
    prebuilt = prebuilt_module(build)
    if prebuilt is not None:
        try:
            return _load_in_process(prebuilt)
        except Exception as e:
            notes.append(f"the hooks prebuilt for this torch did not load ({type(e).__name__}: {e})")

    folder, passed = cache.hooks_dir(create=True)
    if passed:
        notes.append("not using " + "; nor ".join(passed))
    if folder is None:
        raise HooksUnavailable(
            "; ".join(notes) + f": no private folder for its operator hooks; {cache.private_hint()}"
        )
    if passed:
        notes[-1] += f"; using {folder}, which only you can write"
    key = cache_key(build)

    # A sound entry is loaded at once; a bad one is dealt with holding the lock.
    entry = cache.entry(folder, key)
    failed = None  # the module that did not load here, and why
    if entry.state == "ok":
        try:
            module = _load_entry(entry)
            if notes:
                cache.say("; ".join(notes))
            return module
        except _LoadFailed as e:
            failed = (entry.module, str(e))

    _compiling.set()  # from here on this may take minutes: the lock's wait, or a compile
    try:
        return _load_slowly(folder, key, build, notes, failed)
    finally:
        _compiling.clear()


def _load_slowly(folder: Path, key: str, build: dict, notes: list, failed: Optional[tuple]):
    """Holding the entry's lock: load what another process built meanwhile, or move a bad entry
    aside and build."""
    with cache.entry_lock(folder, key, build) as locked:
        entry = cache.entry(folder, key)  # another process (rank) may have built it meanwhile
        if entry.state == "ok" and (failed is None or entry.module != failed[0]):
            try:
                module = _load_entry(entry)
                if notes:
                    cache.say("; ".join(notes))
                return module
            except _LoadFailed as e:
                entry.state, entry.why = "bad", str(e)
        if entry.state == "ok":  # the very module that failed above
            entry.state, entry.why = "bad", failed[1]
        if entry.state == "bad":
            moved = cache.quarantine(entry)
            notes.append(f"the cached hooks were not used: {entry.why}" + (f"; {moved}" if moved else ""))
        why = missing_build_tools()
        if why:
            notes.append(
                f"gpuprof needs its operator hooks compiled once for torch {build['version']}, but {why}"
            )
            raise HooksUnavailable("; ".join(notes))
        cache.say(
            "; ".join(
                notes
                + [
                    f"compiling its operator hooks for torch {build['version']} into {folder / key} "
                    f"before the first recorded step, once per torch build ({compile_estimate(folder)})"
                ]
            )
        )
        started = time.monotonic()
        module_path = _build_and_publish(folder, key, build, locked)
    try:
        module = _load_in_process(module_path)
    except Exception as e:
        raise HooksUnavailable(
            f"gpuprof's operator hooks compiled into {module_path} loaded in a child process but not in "
            f"this one ({type(e).__name__}: {e})"
        ) from None
    cache.say(f"hooks compiled in {time.monotonic() - started:.0f} s; later runs with this torch reuse them")
    return module


# ---- the process's hooks, loaded once, on a background thread --------------------------------------
_state = threading.Lock()
_loaded = None  # the hooks module, once loaded in this process
_failure: Optional[HooksUnavailable] = None  # why it cannot be had (not tried again in this process)
_worker: Optional[threading.Thread] = None


def _load_into_state() -> None:
    global _loaded, _failure
    try:
        module = load()
    except HooksUnavailable as e:
        _failure = e
    except Exception as e:  # whatever went wrong, the training run goes on without operators
        _failure = HooksUnavailable(f"loading gpuprof's operator hooks failed ({type(e).__name__}: {e})")
    else:
        _loaded = module


def start_loading() -> None:
    """Start loading (compiling if need be) the hooks on a background thread, if not done yet."""
    global _worker
    with _state:
        if _loaded is not None or _failure is not None or _worker is not None:
            return
        _worker = threading.Thread(target=_load_into_state, name="gpuprof-hooks", daemon=True)
        _worker.start()


def ready() -> bool:
    """Whether hooks() returns (or raises) at once."""
    return _loaded is not None or _failure is not None


def compiling() -> bool:
    """Whether this process is compiling the hooks now."""
    return _compiling.is_set()


def settle() -> None:
    """Wait until the hooks are loaded (or cannot be), or until a compile has started: a load from
    the package or the cache takes milliseconds, a compile minutes."""
    worker = _worker
    while worker is not None and worker.is_alive() and not _compiling.is_set():
        worker.join(0.02)


def hooks():
    """The hooks module, loaded (and compiled, the first time with this torch) on first use.
    Raises HooksUnavailable with a one-line message when it cannot be had."""
    if _loaded is not None:
        return _loaded
    start_loading()
    worker = _worker
    if worker is not None:
        worker.join()
    if _loaded is not None:
        return _loaded
    raise _failure or HooksUnavailable("gpuprof's operator hooks could not be loaded")


# ---- gpuprof doctor -------------------------------------------------------------------------------
def status() -> dict:
    """For `gpuprof doctor`: which hooks a live session would use, checked as a run checks them
    (ownership and modes, the manifest, a load in a child process, whether the cache can be
    written), without loading anything into this process or compiling."""
    info: dict = {
        "prebuilt_for": prebuilt_keys(),
        "cache_dir": str(cache_root() / "hooks"),
        "compiler": compiler(),
    }
    try:
        import torch
    except Exception as e:  # not installed, or broken
        info.update(torch=None, state="no torch", detail=f"torch cannot be imported ({e})")
        return info
    build = torch_build(torch)
    info.update(torch=build["version"], key=cache_key(build))
    notes = []
    prebuilt = prebuilt_module(build)
    if prebuilt is not None:
        why = check_in_child(prebuilt)
        if not why:
            info.update(
                state="prebuilt",
                detail=f"built with gpuprof for this torch ({abi_key(build)}); loads in a fresh process",
            )
            return info
        notes.append(f"the hooks prebuilt for this torch do not load: {why}")
    folder, passed = cache.hooks_dir(create=True)
    if passed:
        notes.append("not using " + "; nor ".join(passed))
    if folder is None:
        info.update(state="cannot compile", detail="; ".join(notes) + f": {cache.private_hint()}")
        return info
    info["cache_dir"] = str(folder)
    entry = cache.entry(folder, info["key"])
    tools = missing_build_tools()
    if entry.state == "ok":
        why = check_in_child(entry.module)
        if not why:
            info.update(
                state="cached",
                detail="; ".join(
                    notes
                    + [
                        f"compiled earlier for this torch: {entry.path} (yours or root's, writable by "
                        "no one else, matches its manifest, loads in a fresh process)"
                    ]
                ),
            )
            return info
        if not cache.has_stamp(entry.path, torch_identity()):  # a run checks it in a child too
            entry.state, entry.why = "bad", f"{entry.module} does not load in a fresh process: {why}"
    if entry.state == "ok":
        # A stamp says a child loaded it beside this torch, so a run would load it in its own
        # process: say so, with the command that removes it.
        info.update(
            state="broken",
            detail="; ".join(
                notes
                + [
                    f"{entry.module} matches its manifest, but loading it in a fresh process: {why}; "
                    f"a run would load it too: remove it (rm -r {entry.path})"
                ]
            ),
        )
        return info
    if entry.state == "bad":
        notes.append(f"a run will move the cached hooks aside ({entry.why}) and compile new ones")
    try:
        probe = tempfile.mkdtemp(prefix=".doctor-", dir=folder)  # what a build makes first
        os.rmdir(probe)
    except OSError as e:
        info.update(
            state="cannot compile",
            detail="; ".join(
                notes + [f"the hooks cache {folder} cannot be written ({e.strerror}): {cache.private_hint()}"]
            ),
        )
        return info
    if tools:
        info.update(state="cannot compile", detail="; ".join(notes + [tools]))
        return info
    info.update(
        state="needs compile" if entry.state == "absent" else "rebuild",
        detail="; ".join(
            notes
            + [
                f"compiled into {folder} at the first gpuprof.profile, before its first recorded step "
                f"({compile_estimate(folder)})"
            ]
        ),
    )
    return info
