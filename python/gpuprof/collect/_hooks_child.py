"""The operator hooks' builds and load checks, each run in a child process by collect/hooks.py, so that
a compiler's failure, a module whose initialisation raises or a module that crashes (a file cut
short: SIGBUS; a bad build: SIGSEGV) ends that child, never the training run.

    python -m gpuprof.collect._hooks_child build BUILD_DIR SOURCE_DIR PACKAGE_DIR
        compiles the hooks with torch's extension builder into BUILD_DIR, then loads the module
        and calls it, as a session would; prints ``built PATH``.
    python -m gpuprof.collect._hooks_child check MODULE_FILE
        loads MODULE_FILE as a session would (torch first, then gpuprof's core, then the module)
        and calls it; prints ``loads``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

SOURCES = ("torch_module.cpp", "torch_hooks.cpp")


def _quiet_torch_import():
    import logging

    # Importing a CUDA build of torch (or its extension builder) on a machine without the CUDA
    # toolkit logs a warning about CUDA_HOME; the hooks are plain C++, so it does not concern them.
    logging.disable(logging.WARNING)
    try:
        import torch  # noqa: F401
        from torch.utils import cpp_extension
    finally:
        logging.disable(logging.NOTSET)
    return cpp_extension


def load_module(path: Path):
    """The module in the file at ``path``, loaded the way a session loads it. The loader returns the
    object already mapped from a path it has loaded before, so every build has a path of its own."""
    spec = importlib.util.spec_from_file_location("_torchhooks", str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.installed()  # a call into LibTorch's side: the module is usable, not just mapped
    return module


def _ninja_dir() -> str | None:
    try:
        import ninja  # the PyPI wheel: a binary inside the package, not necessarily on PATH

        return str(ninja.BIN_DIR)
    except Exception:
        found = shutil.which("ninja")
        return str(Path(found).parent) if found else None


def build(build_dir: Path, source_dir: Path, package_dir: Path) -> Path:
    cpp_extension = _quiet_torch_import()
    from gpuprof import _native  # noqa: F401  (the core library the hooks link, loaded first)

    build_dir.mkdir(parents=True, exist_ok=True)
    ninja_dir = _ninja_dir()
    if ninja_dir and ninja_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = ninja_dir + os.pathsep + os.environ.get("PATH", "")
    module = cpp_extension.load(
        name="_torchhooks",
        sources=[str(source_dir / s) for s in SOURCES],
        extra_include_paths=[str(source_dir), str(source_dir / "include")],
        extra_cflags=["-O2"],
        # The torch-free core, from this very package (its folder is the hooks' run path).
        extra_ldflags=[f"-L{package_dir}", "-l:libgpuprof_core.so", f"-Wl,-rpath,{package_dir}"],
        build_directory=str(build_dir),
        verbose=True,  # the compiler's command lines and output go to the build log
    )
    module.installed()
    return Path(module.__file__)


def check(path: Path) -> None:
    _quiet_torch_import()
    from gpuprof import _native  # noqa: F401

    load_module(path)


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"] and len(argv) == 4:
        built = build(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        print(f"built {built}", flush=True)
        return 0
    if argv[:1] == ["check"] and len(argv) == 2:
        check(Path(argv[1]))
        print("loads", flush=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
