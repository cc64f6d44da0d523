"""The user's NVTX ranges on a real GPU: torch.cuda.nvtx ranges made inside a gpuprof session come
into the trace as Nvtx events (named, on the calling thread, around the kernel launches made inside
them), and gpuprof's own ranges (ProfilerStep#N, gpuprof.range, emitted in the "gpuprof" NVTX
domain) are not doubled. Each case runs in a fresh interpreter: NVTX looks up its injection library
once per library, at its first NVTX call, which another test of this process may already have made."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_SCRIPT = r"""
import json, threading
import torch
import gpuprof
from gpuprof._native import _core

x = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
with gpuprof.profile() as prof:
    for i in range(3):
        torch.cuda.nvtx.range_push(f"user step {i}")
        y = x @ x
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.mark("user mark")
        with gpuprof.range("gpuprof range"):
            z = x + x
        prof.step()
report = prof.report()
t = report.trace
print(json.dumps({
    "tid": threading.get_native_id(),
    "metadata": report.to_dict()["metadata"],
    "nvtx": _core.trace_events(t, "nvtx"),
    "launches": _core.trace_events(t, "runtime") + _core.trace_events(t, "driver"),
    "kernels": _core.trace_events(t, "kernel"),
    "steps": _core.trace_events(t, "step"),
    "user_ranges": _core.trace_events(t, "user_range"),
}))
"""


def _run(env_extra):
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)
    env.update(env_extra)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(out):
    md = out["metadata"]
    assert md.get("gpu_collection", "").startswith("on"), md.get("gpu_collection")
    assert md.get("nvtx_ranges", "").startswith("on"), md.get("nvtx_ranges")
    nvtx = out["nvtx"]
    names = sorted(e["name"] for e in nvtx)
    # Three user ranges and three marks; nothing of gpuprof's own domain.
    assert names == sorted([f"user step {i}" for i in range(3)] + ["user mark"] * 3), names
    assert not any(n.startswith("ProfilerStep#") or n == "gpuprof range" for n in names)
    # gpuprof's own ranges are there once each, as step and user-range events.
    assert sorted(e["name"] for e in out["steps"]) == [f"ProfilerStep#{i}" for i in range(3)]
    assert [e["name"] for e in out["user_ranges"]].count("gpuprof range") == 3
    kernel_correlations = {k["correlation"] for k in out["kernels"]}
    for r in (e for e in nvtx if e["name"].startswith("user step")):
        assert r["tid"] == out["tid"], (r, out["tid"])  # the thread that pushed it
        assert r["dur_ns"] > 0
        inside = [
            launch
            for launch in out["launches"]
            if launch["correlation"] in kernel_correlations
            and r["start_ns"] <= launch["start_ns"]
            and launch["start_ns"] + launch["dur_ns"] <= r["start_ns"] + r["dur_ns"]
        ]
        assert inside, f"no kernel launch inside {r}"  # the matmul's launch
        assert all(launch["tid"] == out["tid"] for launch in inside)
    for m in (e for e in nvtx if e["name"] == "user mark"):
        assert m["dur_ns"] == 0 and m["tid"] == out["tid"]


def test_without_injection_no_user_range_is_collected_and_the_note_says_how():
    # gpuprof never sets NVTX_INJECTION64_PATH itself: the user's ranges are not seen, gpuprof's own
    # are there once each, and the metadata gives the variable's value to set.
    out = _run({})
    assert out["nvtx"] == []
    assert out["metadata"]["nvtx_ranges"].startswith(
        "off: to collect your own NVTX ranges, start Python with"
    )
    assert sorted(e["name"] for e in out["steps"]) == [f"ProfilerStep#{i}" for i in range(3)]


def test_user_nvtx_ranges_with_injection_set_before_python_starts():
    from gpuprof.collect.gpu import nvtx_injection_path

    out = _run({"NVTX_INJECTION64_PATH": nvtx_injection_path()})
    _check(out)
    assert "names gpuprof's libcupti" in out["metadata"]["nvtx_ranges"]
