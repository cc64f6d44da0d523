"""gpuprof: where each training step's time goes, and what to change.

    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=3)) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    print(prof.report())
"""

from ._native import check_torch_version as _check_torch_version

_check_torch_version()

from ._build_info import GPUPROF_VERSION as __version__  # noqa: E402
from .profiler import ProfilerError, current, profile  # noqa: E402
from .ranges import range  # noqa: E402,A004
from .report import Report  # noqa: E402
from .schedule import ProfilerAction, schedule  # noqa: E402
from .analyze import TraceImportError, analyze  # noqa: E402  (trace import, issue 4)
from .export import export_chrome_trace, save  # noqa: E402  (trace export, issue 4)


def load_ipython_extension(ipython) -> None:
    """``%load_ext gpuprof``: the ``%%gpuprof`` cell magic (IPython is imported only here)."""
    from .jupyter import load_ipython_extension as _load

    _load(ipython)


__all__ = ["profile", "schedule", "range", "Report", "ProfilerAction", "ProfilerError", "current",
           "__version__"]
__all__ += ["analyze", "TraceImportError", "save", "export_chrome_trace"]   # issue 4
