"""Loading the two native pieces (DESIGN.md): the torch-free core, always; the LibTorch hooks, only
when a live session needs them, and only beside the torch they were built for."""

from __future__ import annotations

import importlib.metadata

from . import _build_info
from . import _core  # noqa: F401  (re-exported: the core never needs torch)

_hooks = None


class TorchMismatchError(ImportError):
    pass


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata: cheap, and loads no LibTorch."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _same_release(built: str, installed: str) -> bool:
    # The wheel metadata and torch.__version__ agree on the local tag ("2.13.0+cpu"); compare whole.
    return built == installed


def check_torch_version() -> None:
    """Raise ImportError when gpuprof's hooks were built for another torch than the installed one:
    loading them would fail with undefined symbols, or worse, misbehave."""
    built = _build_info.TORCH_VERSION
    if not built:
        return
    installed = installed_torch_version()
    if installed is not None and not _same_release(built, installed):
        raise TorchMismatchError(
            f"gpuprof was built against torch {built}, but torch {installed} is installed. "
            "Its RecordFunction hooks link LibTorch and must be rebuilt for this torch: "
            "pip install --force-reinstall --no-build-isolation --no-deps gpuprof "
            "(or, from a source checkout: pip install --no-build-isolation .)"
        )


def hooks():
    """The LibTorch hooks module, loaded on first use (after torch itself)."""
    global _hooks
    if _hooks is None:
        if not _build_info.TORCH_VERSION:
            raise RuntimeError(
                "gpuprof was built without its torch hooks (torch was not importable when it was "
                "built), so it can analyse traces but not profile a live run. Install torch, then "
                "rebuild gpuprof in that environment: pip install --no-build-isolation --no-deps "
                "--force-reinstall gpuprof"
            )
        check_torch_version()
        import torch  # noqa: F401  (loads LibTorch so that the hooks resolve against it)
        from . import _torchhooks

        _hooks = _torchhooks
    return _hooks
