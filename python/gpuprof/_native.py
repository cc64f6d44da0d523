"""The torch-free native core (docs/design.md, "Two native pieces"): always loaded. The LibTorch
hooks, loaded only by a live session, are gpuprof.collect.hooks."""

from __future__ import annotations

from . import _core  # noqa: F401  (re-exported: the core never needs torch)
