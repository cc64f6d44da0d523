"""GPU session bookkeeping that runs on any machine (tests/gpu proves collection on a GPU)."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")


def test_a_profile_never_stopped_is_released_at_interpreter_exit():
    # A training script that exits inside a profile (an exception caught at top level, sys.exit in
    # the loop) leaves the session started: gpuprof's atexit handler releases it while torch and
    # the driver are alive. Our handler is registered before gpuprof's, so it runs after it.
    script = textwrap.dedent("""
        import atexit, sys
        def after_gpuprof():
            from gpuprof.collect import gpu as g
            print("unreleased", len(g._unreleased), "enabled", g._core.gpu_enabled(), flush=True)
        atexit.register(after_gpuprof)
        import torch, gpuprof
        from gpuprof.collect import gpu as g
        prof = gpuprof.profile()
        prof.__enter__()
        for _ in range(2):
            torch.randn(8, 8) @ torch.randn(8, 8)
            prof.step()
        print("started", len(g._unreleased), flush=True)
        sys.exit(0)   # never prof.__exit__
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "started 1" in out.stdout, out.stdout + out.stderr
    assert "unreleased 0 enabled False" in out.stdout, out.stdout + out.stderr


def test_devices_in_use_is_empty_before_cuda_is_initialised():
    import torch

    from gpuprof.collect.gpu import devices_in_use

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("CUDA initialised in this process")
    assert devices_in_use() == []
