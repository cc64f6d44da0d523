"""tests/gpu: run on a machine with an NVIDIA GPU and a working driver; skipped elsewhere."""

import pytest


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    for item in items:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
