"""gpuprof where users install it (the issue "installs wherever PyTorch users are"): environments
built by .ci/install-envs.sh, which .ci/test runs and points GPUPROF_INSTALL_ENVS at.

* A repaired wheel in a fresh venv with no torch: trace analysis, every report format, diff, check,
  doctor, and a live session that says torch is missing (tests/install/wheel_smoke.py).
* PyPI's CUDA build of torch 2.14.1 (headers need C++20; its API differs from 2.13's), checkout
  installed with a plain `pip install .`: a profiled loop records operators (hooks compiled on
  first use), and `gpuprof analyze` reads the trace that loop exported.
* The same wheel, which carries the hooks prebuilt for torch 2.13.0 and 2.14.1, in a fresh venv on
  each: the first profile records operators with no compiler to be found (stand-ins for every
  compiler name on PATH record any call), and nothing is compiled or cached."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ENVS = os.environ.get("GPUPROF_INSTALL_ENVS")
pytestmark = pytest.mark.skipif(
    not ENVS,
    reason="GPUPROF_INSTALL_ENVS is not set: .ci/test builds these environments with "
    ".ci/install-envs.sh (bash .ci/install-envs.sh, then export GPUPROF_INSTALL_ENVS=build)",
)


def _env_python(name: str) -> Path:
    python = (
        (ROOT / ENVS / name / "bin" / "python")
        if not Path(ENVS).is_absolute()
        else Path(ENVS) / name / "bin" / "python"
    )
    assert python.exists(), f"{python} is missing: run .ci/install-envs.sh"
    return python


def test_wheel_in_a_venv_without_torch():
    python = _env_python("venv-notorch")
    proc = subprocess.run(
        [str(python), str(ROOT / "tests" / "install" / "wheel_smoke.py")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wheel smoke test passed" in proc.stdout


LOOP = """
import json, sys, torch, gpuprof
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.Adam(m.parameters())
with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=3)) as prof:
    for _ in range(5):
        m(torch.randn(16, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
prof.export_chrome_trace(sys.argv[1])
r = prof.report().to_dict()
print(json.dumps({"torch": torch.__version__, "steps": len(r["steps"]),
                  "operators": sorted({o["name"] for o in r["operators"]})}))
"""


def test_torch_2_14_cuda_build_profiles_a_loop_and_analyses_its_trace(tmp_path):
    python = _env_python("venv-torch214")
    trace = tmp_path / "loop.pt.trace.json"
    env = {**os.environ, "GPUPROF_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [str(python), "-c", LOOP, str(trace)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    live = json.loads(proc.stdout.strip().splitlines()[-1])
    assert live["torch"].startswith("2.14.1+cu"), live  # PyPI's CUDA build, run on the CPU
    assert live["steps"] == 3
    assert {"aten::addmm", "aten::relu", "aten::linear"} <= set(live["operators"]), live
    assert "compiling its operator hooks for torch 2.14.1" in proc.stderr
    assert "Traceback" not in proc.stderr

    # A second process with this torch finds the hooks in the cache: operators again, no compile,
    # and `gpuprof doctor` says so.
    again = subprocess.run(
        [str(python), "-c", LOOP, str(tmp_path / "again.json")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "aten::addmm" in json.loads(again.stdout.strip().splitlines()[-1])["operators"]
    assert "compiling" not in again.stderr, again.stderr
    doctor = subprocess.run(
        [str(python.parent / "gpuprof"), "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert "operator hooks for torch 2.14.1" in doctor.stdout and ": cached (" in doctor.stdout, doctor.stdout

    out = tmp_path / "analysed.json"
    proc = subprocess.run(
        [str(python.parent / "gpuprof"), "analyze", str(trace), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    analysed = json.loads(out.read_text())
    assert len(analysed["steps"]) == 3
    assert {"aten::addmm", "aten::relu"} <= {o["name"] for o in analysed["operators"]}


FIRST = """
import json, sys, time
started = time.monotonic()
import torch, gpuprof
from gpuprof.collect import hooks
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.Adam(m.parameters())
with gpuprof.profile() as prof:  # no schedule: the first step is recorded
    for _ in range(3):
        m(torch.randn(16, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
r = prof.report().to_dict()
print(json.dumps({"torch": torch.__version__, "steps": len(r["steps"]),
                  "operators": sorted({o["name"] for o in r["operators"]}),
                  "hooks": hooks.hooks().__file__, "seconds": time.monotonic() - started}))
"""

COMPILERS = ("c++", "g++", "gcc", "cc", "clang", "clang++", "x86_64-linux-gnu-g++", "nvcc", "ld")


@pytest.mark.parametrize("venv, release", [("venv-wheel213", "2.13.0"), ("venv-wheel214", "2.14.1")])
def test_the_wheel_records_operators_in_the_first_profile_without_a_compiler(tmp_path, venv, release):
    python = _env_python(venv)
    stand_ins = tmp_path / "compilers"
    stand_ins.mkdir()
    called = tmp_path / "compiler-called"
    for name in COMPILERS:  # on PATH, so that a compile would be tried, and recorded
        tool = stand_ins / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {called}\nexit 1\n')
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CC", "PYTHONPATH")}
    env.update(
        PATH=f"{python.parent}{os.pathsep}{stand_ins}",
        GPUPROF_CACHE_DIR=str(tmp_path / "cache"),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
    )
    proc = subprocess.run(
        [str(python), "-c", FIRST], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first["torch"].startswith(release + "+"), first
    assert first["steps"] == 3
    assert {"aten::addmm", "aten::relu", "aten::linear"} <= set(first["operators"]), first
    assert f"/gpuprof/_hooks_prebuilt/torch-{release}-" in first["hooks"], first["hooks"]
    assert not called.exists(), called.read_text()
    assert "gpuprof:" not in proc.stderr, proc.stderr  # nothing compiled, nothing to say
    assert not list((tmp_path / "cache").glob("hooks/torch-*")), "a cache entry was made"
