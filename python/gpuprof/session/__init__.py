"""The live session, above the stages: ``gpuprof.profile`` records a training loop (collect), builds
each span's report (analysis, advice, report) and hands it on (on_trace_ready, the writers)."""

from .profile import DEFAULT_KEEP_REPORTS, profile
from .state import ProfilerError, current

__all__ = ["DEFAULT_KEEP_REPORTS", "ProfilerError", "current", "profile"]
