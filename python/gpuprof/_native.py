"""Loading the two native pieces (docs/design.md): the torch-free core, always; the LibTorch hooks,
only when a live session needs them, built for the torch installed now (see _hooks.py)."""

from __future__ import annotations

from . import _core  # noqa: F401  (re-exported: the core never needs torch)

_hooks = None


def installed_torch_version() -> str | None:
    """The installed torch's version, read from its metadata: cheap, and loads no LibTorch."""
    import importlib.metadata   # here, not at import: 12 ms that trace analysis never needs

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def hooks():
    """The LibTorch hooks module, loaded (and compiled, the first time with this torch) on first
    use. Raises _hooks.HooksUnavailable with a one-line message when it cannot be had."""
    global _hooks
    if _hooks is None:
        from ._hooks import load

        _hooks = load()
    return _hooks
