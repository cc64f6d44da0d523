"""gpuprof: where each training step's time goes, and what to change.

with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=3)) as prof:
    for batch in loader:
        train_step(batch)
        prof.step()
print(prof.report())
"""

from ._build_info import GPUPROF_VERSION as __version__
from .report import Report
from .traces.read import TraceImportError

# Names whose modules load on first use (PEP 562), so that `gpuprof analyze` and the renderers
# skip the live profiler and the exporter, and `import gpuprof` skips the advice rules.
_LAZY = {
    "analyze": "report.inputs",
    "schedule": "collect.schedule",
    "ProfilerAction": "collect.schedule",
    "profile": "session",
    "current": "session",
    "watch": "session.watch",
    "ProfilerError": "session",
    "range": "collect.ranges",
    "save": "traces.export",
    "export_chrome_trace": "traces.export",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython) -> None:
    """``%load_ext gpuprof``: the ``%%gpuprof`` cell magic (IPython is imported only here)."""
    from .integrations.jupyter import load_ipython_extension as _load

    _load(ipython)


__all__ = [
    "profile",
    "schedule",
    "range",
    "Report",
    "ProfilerAction",
    "ProfilerError",
    "current",
    "__version__",
    "analyze",
    "TraceImportError",
    "save",
    "export_chrome_trace",
    "watch",
]
