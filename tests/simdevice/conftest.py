"""The simulated device's tests: the stand-ins are built once per run (simbuild.py, cached by source
hash). Where they cannot be built (no C compiler, no CUDA 13 headers) the tests skip, except under
GPUPROF_SIMDEVICE_REQUIRED=1 (.ci/test), where that is a failure."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simbuild import BuildError, build  # noqa: E402


@pytest.fixture(scope="session")
def simdevice_libdir() -> Path:
    try:
        return build()
    except BuildError as e:
        if os.environ.get("GPUPROF_SIMDEVICE_REQUIRED") == "1":
            pytest.fail(f"the simulated device could not be built (GPUPROF_SIMDEVICE_REQUIRED=1): {e}")
        pytest.skip(f"the simulated device could not be built: {e}")
