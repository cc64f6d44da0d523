from pathlib import Path

import pytest
from _traces import TRACES as SHARED_TRACES


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (CI puts ../shared beside the checkout)")
    return SHARED_TRACES


@pytest.fixture(autouse=True)
def _single_thread_torch():
    # Two cores: keep torch's intra-op pool from fighting DataLoader workers, for stable timings.
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _out_of_memory_reports_in_tmp(tmp_path_factory, monkeypatch):
    # A profiled block that runs out of memory without on_trace_ready writes gpuprof-oom-<pid>.* into
    # the working directory (docs/memory.md): in tests, into a temporary folder, not the checkout.
    monkeypatch.setenv("GPUPROF_OOM_DIR", str(tmp_path_factory.mktemp("oom")))
