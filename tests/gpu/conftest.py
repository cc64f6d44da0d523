"""tests/gpu: proofs that need an NVIDIA GPU. Every test here is marked `gpu` and is skipped, with
the reason, on a machine without one (or where the validation kernels were not built)."""

import os

import pytest

# Stock torch.profiler (Kineto) keeps CUPTI's single subscriber from its first use until the
# process exits (it unsubscribes only with TEARDOWN_CUPTI=1), so every gpuprof test that runs after
# a torch.profiler test in this session would find CUPTI taken and run host-only. Set before torch
# is imported.
os.environ.setdefault("TEARDOWN_CUPTI", "1")


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (torch.cuda.is_available() is False)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _cupti_released_by_torch_profiler():
    """A test that used torch.profiler leaves Kineto's CUPTI teardown (TEARDOWN_CUPTI above) pending:
    it is prepared on a Kineto thread and runs inside the next CUDA runtime or driver call. Make
    those calls before each test, so a gpuprof session starting at once finds CUPTI free."""
    import time

    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for _ in range(10):
            torch.cuda.synchronize()
            time.sleep(0.01)
    yield


@pytest.fixture(scope="session")
def kernels():
    try:
        from gpuprof import _kernels
    except ImportError:
        pytest.skip("gpuprof._kernels was not built (nvcc not found when gpuprof was built)")
    return _kernels


@pytest.fixture(scope="session")
def cuda():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # context up before any timing
    return torch
