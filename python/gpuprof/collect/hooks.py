"""The LibTorch hooks (``_torchhooks``) for the torch that is installed now.

The hooks include torch's C++ headers and link LibTorch, so one compiled module serves exactly one
torch build. What breaks that binary interface is the torch source revision
(``torch.version.git_version``: the same for ``2.13.0+cpu`` and ``2.13.0+cu130``, different for every
release), the C++ std::string ABI torch was built with, and the CPython version; local version
labels (``+cpu``, ``+cu130``) do not. So:

* a module prebuilt when gpuprof itself was built (``pip install --no-build-isolation .`` with torch
  importable) is used when it was built for this very torch build;
* otherwise the hooks are compiled on first use with torch's own extension builder (which brings
  the C++ standard and ABI flags of the installed torch) and cached per torch build, under
  ``$GPUPROF_CACHE_DIR`` or ``$XDG_CACHE_HOME/gpuprof`` (``~/.cache/gpuprof``). A torch upgrade is
  a new cache entry: compiled once, then reused. Many ranks starting at once compile once (an
  flock on the cache entry; the others wait, then load what it built).

Nothing here is imported by trace analysis: only a live ``gpuprof.profile`` session loads torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

from .. import _build_info

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the gpuprof package
SOURCE_DIR = _PACKAGE_DIR / "_hooks_src"
_SOURCES = ("torch_module.cpp", "torch_hooks.cpp")
_READY = "READY"  # in a cache entry: its module was built and loaded


class HooksUnavailable(ImportError):
    """The hooks cannot be had for this torch: the message is one line, with the command that fixes
    it."""


_loaded = None  # the hooks module, once loaded in this process


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata: cheap, and loads no LibTorch."""
    import importlib.metadata  # here, not at import: 12 ms that trace analysis never needs

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def hooks():
    """The hooks module, loaded (and compiled, the first time with this torch) on first use.
    Raises HooksUnavailable with a one-line message when it cannot be had."""
    global _loaded
    if _loaded is None:
        _loaded = load()
    return _loaded


def torch_build(torch) -> dict:
    """What identifies the installed torch's C++ binary interface."""
    return {
        "version": str(torch.__version__),
        "git_version": str(getattr(torch.version, "git_version", "") or ""),
        "cxx11_abi": str(int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))),
    }


def _sources_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(SOURCE_DIR.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(SOURCE_DIR).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cache_key(build: dict) -> str:
    base = build["version"].split("+", 1)[0]
    return (
        f"torch-{base}-{build['git_version'][:12] or 'nogit'}-abi{build['cxx11_abi']}-"
        f"{sys.implementation.cache_tag}-gpuprof-{_build_info.GPUPROF_VERSION}-{_sources_digest()}"
    )


def cache_root() -> Path:
    explicit = os.environ.get("GPUPROF_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gpuprof"


def prebuilt_matches(build: dict) -> bool:
    """Whether the module prebuilt with gpuprof was compiled for this torch build."""
    return (
        bool(_build_info.PREBUILT_TORCH_GIT_VERSION)
        and _build_info.PREBUILT_TORCH_GIT_VERSION == build["git_version"]
        and _build_info.PREBUILT_TORCH_CXX11_ABI == build["cxx11_abi"]
        and importlib.util.find_spec("gpuprof._torchhooks") is not None
    )


def compiler() -> str | None:
    """The C++ compiler torch's extension builder would call, if it can be found."""
    cxx = os.environ.get("CXX", "c++")
    return shutil.which(cxx)


def _ninja_dir() -> str | None:
    """Where a ninja binary is: the `ninja` wheel's (a dependency), else the one on PATH."""
    try:
        import ninja  # the PyPI wheel: a binary inside the package, not necessarily on PATH

        return str(ninja.BIN_DIR)
    except Exception:
        found = shutil.which("ninja")
        return str(Path(found).parent) if found else None


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


def status() -> dict:
    """For `gpuprof doctor`: which hooks a live session would use, without loading or building."""
    info: dict = {
        "prebuilt_for": _build_info.PREBUILT_TORCH_VERSION or None,
        "cache_dir": str(cache_root() / "hooks"),
        "compiler": compiler(),
    }
    try:
        import torch
    except Exception as e:  # not installed, or broken
        info.update(torch=None, state="no torch", detail=f"torch cannot be imported ({e})")
        return info
    build = torch_build(torch)
    key = cache_key(build)
    info.update(torch=build["version"], key=key)
    if prebuilt_matches(build):
        info.update(state="prebuilt", detail="the hooks built with gpuprof match this torch")
    elif (cache_root() / "hooks" / key / _READY).is_file():
        info.update(state="cached", detail=f"compiled earlier for this torch: {cache_root() / 'hooks' / key}")
    else:
        why = missing_build_tools()
        info.update(
            state="needs compile" if not why else "cannot compile",
            detail=("compiled on first use of gpuprof.profile (under a minute, once per torch build)")
            if not why
            else why,
        )
    return info


def _say(line: str) -> None:
    print(f"gpuprof: {line}", file=sys.stderr, flush=True)


def load():
    """The hooks module for the installed torch: prebuilt, cached, or compiled now."""
    try:
        import torch  # LibTorch first, so the hooks resolve against it
    except ImportError as e:
        raise HooksUnavailable(
            f"torch is not installed in this Python ({sys.executable}: {e}); gpuprof profiles "
            "PyTorch training, so install torch there (trace analysis works without it)"
        ) from None

    build = torch_build(torch)
    if prebuilt_matches(build):
        from .. import _torchhooks

        return _torchhooks
    key = cache_key(build)
    build_dir = cache_root() / "hooks" / key
    cached = _load_cached(build_dir)
    if cached is not None:
        return cached
    why = missing_build_tools()
    if why:
        raise HooksUnavailable(
            f"gpuprof needs its operator hooks compiled once for torch {build['version']}, but {why}."
        )
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HooksUnavailable(
            f"gpuprof cannot write its hooks cache {build_dir} ({e.strerror}); point "
            "GPUPROF_CACHE_DIR at a writable folder, e.g. `export GPUPROF_CACHE_DIR=$HOME/.cache/gpuprof`"
        ) from None
    with _build_lock(build_dir, build):
        cached = _load_cached(build_dir)  # another process (rank) compiled it while this one waited
        if cached is not None:
            return cached
        _say(
            f"compiling its operator hooks for torch {build['version']} (once per torch build, "
            f"under a minute) into {build_dir}"
        )
        started = time.monotonic()
        module = _compile(build, build_dir)
        try:
            (build_dir / _READY).write_text(f"{build['version']} {build['git_version']}\n")
        except OSError:
            pass  # a read-only cache still works: the builder finds nothing to do next time
        _say(f"hooks compiled in {time.monotonic() - started:.0f} s; later runs with this torch reuse them")
        return module


@contextlib.contextmanager
def _build_lock(build_dir: Path, build: dict):
    """One compile per cache entry, however many processes (ranks) start at once: an flock on
    build_dir/gpuprof.lock, which the kernel releases when its holder dies (a rank killed while
    compiling leaves nothing behind). Holding it, a lock file of torch's builder that is still there
    was left by a builder that died (torch's own lock is a plain file nobody removes then), so it
    is removed instead of waited on forever. Where the file system has no flock (some Lustre
    mounts), torch's lock file alone serialises the builds."""
    try:
        import fcntl

        fd = os.open(build_dir / "gpuprof.lock", os.O_RDWR | os.O_CREAT, 0o666)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except BlockingIOError:
            _say(
                f"waiting for another process that is compiling the operator hooks for torch "
                f"{build['version']} into {build_dir}"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:  # no flock on this file system
            locked = False
        if locked:
            try:
                (build_dir / "lock").unlink()
            except OSError:
                pass
        yield
    finally:
        os.close(fd)  # releases the flock


def _load_cached(build_dir: Path):
    """The module compiled earlier for this key, or None. The READY file is written only after a
    build that loaded: a process that finds none goes through torch's builder, which waits for
    another process still building there (its lock file) and then finds nothing left to do."""
    built = build_dir / "_torchhooks.so"
    if not (build_dir / _READY).is_file() or not built.is_file():
        return None
    spec = importlib.util.spec_from_file_location("_torchhooks", built)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:  # a truncated file (a build killed while linking): build it again
        try:
            built.unlink()
        except OSError:
            pass
        return None
    sys.modules.setdefault("_torchhooks", module)
    return module


def _compile(build: dict, build_dir: Path):
    import logging

    # Importing the builder from a CUDA build of torch on a machine without the CUDA toolkit logs
    # a warning about CUDA_HOME; the hooks are plain C++, so it does not concern them.
    builder_log = logging.getLogger("torch.utils.cpp_extension")
    level = builder_log.level
    builder_log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        builder_log.setLevel(level)

    ninja_dir = _ninja_dir()
    saved_path = os.environ.get("PATH", "")
    if ninja_dir and ninja_dir not in saved_path.split(os.pathsep):
        os.environ["PATH"] = ninja_dir + os.pathsep + saved_path
    try:
        return cpp_extension.load(
            name="_torchhooks",
            sources=[str(SOURCE_DIR / s) for s in _SOURCES],
            extra_include_paths=[str(SOURCE_DIR), str(SOURCE_DIR / "include")],
            extra_cflags=["-O2"],
            # The torch-free core, from this very package (its folder is the hooks' run path).
            extra_ldflags=[f"-L{_PACKAGE_DIR}", "-l:libgpuprof_core.so", f"-Wl,-rpath,{_PACKAGE_DIR}"],
            build_directory=str(build_dir),
            verbose=False,
        )
    except Exception as e:  # the compiler's own output goes to a log, the user gets one line
        log = build_dir / "build-error.log"
        try:
            log.write_text(f"{type(e).__name__}: {e}\n")
        except OSError:
            log = None
        raise HooksUnavailable(
            f"compiling gpuprof's operator hooks for torch {build['version']} failed"
            + (f" (the compiler's output is in {log})" if log else "")
            + ". Check that the compiler works (`c++ --version`; at least GCC 9, GCC 11 for torch 2.14), "
            "or set CXX to another one, then run again"
        ) from None
    finally:
        os.environ["PATH"] = saved_path
