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
