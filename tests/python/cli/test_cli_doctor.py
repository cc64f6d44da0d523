"""``gpuprof doctor``: what this machine allows, read the way a session would find it out."""

import json
import os
import shutil
import subprocess
import sys

import pytest


def _doctor(*extra_env, prefix=()):
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    env.pop("GPUPROF_INFLATER", None)
    env.update(dict(extra_env))
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "gpuprof", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_doctor_on_this_cpu_machine():
    facts = _doctor()
    import torch

    assert facts["torch"] == torch.__version__ and facts["hooks"]["state"] == "ok"
    if not torch.cuda.is_available():
        assert facts["cuda"]["state"] == "--"
        # The reason is the very message a session would log, not a guess.
        from gpuprof._native import _core

        status = _core.gpu_start()
        _core.gpu_release()
        assert not status["enabled"]
        assert facts["gpu_collection"] == {"state": "--", "detail": status["message"]}
    n = len(os.sched_getaffinity(0))
    assert facts["cpus"]["detail"].startswith(f"{n} CPU{'' if n == 1 else 's'} available")


def test_doctor_reports_the_clock_and_the_nvtx_injection_it_finds():
    facts = _doctor(
        ("GPUPROF_CLOCK", "monotonic"), ("NVTX_INJECTION64_PATH", "/opt/nsys/libToolsInjection64.so")
    )
    assert facts["clock"]["detail"].startswith("CLOCK_MONOTONIC on the hot path")
    inj = facts["nvtx_injection"]
    assert inj["state"] == "--"
    if facts["gpu_collection"]["state"] != "ok":  # no GPU collection here: no NVTX advice either
        assert inj["detail"] == "NVTX ranges are collected with the GPU collection (off here)"
    elif "no libcupti" not in inj["detail"]:
        assert "another NVTX tool" in inj["detail"] and "/opt/nsys/libToolsInjection64.so" in inj["detail"]


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset and two CPUs"
)
def test_doctor_counts_the_cpus_the_process_may_use_not_the_machine():
    facts = _doctor(prefix=("taskset", "-c", "0"))
    assert facts["cpus"]["detail"].startswith(f"1 CPU available to this process (of {os.cpu_count()})")


def test_doctor_text_has_one_line_per_finding():
    done = subprocess.run(
        [sys.executable, "-m", "gpuprof", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpuprof ") and lines[1].startswith("torch: ")
    keys = [ln.split(":")[0].split()[-1] for ln in lines[2:]]
    assert keys == ["hooks", "cuda", "gpu_collection", "nvml", "nvtx_injection", "clock", "cpus", "gzip"]
    assert all(ln[:2] in ("ok", "--", "!!") for ln in lines[2:])


def test_doctor_names_the_gzip_decoder_of_the_build_and_the_environment():
    from gpuprof._build_info import GPUPROF_INFLATER

    default, forced = _doctor()["gzip"], _doctor(("GPUPROF_INFLATER", "zlib"))["gzip"]
    if GPUPROF_INFLATER == "isa-l":
        assert default == {"state": "ok", "detail": ".json.gz traces inflated with ISA-L's igzip"}
        assert forced["state"] == "ok" and forced["detail"].startswith(".json.gz traces inflated with zlib (")
    else:  # a build without ISA-L says how to get it, whatever the environment asks for
        assert GPUPROF_INFLATER == "zlib"
        assert (
            default == forced
            and default["state"] == "--"
            and "apt-get install libisal-dev" in default["detail"]
        )
