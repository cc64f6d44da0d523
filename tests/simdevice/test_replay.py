"""tests/simdevice/replay.py: a GPU trace replayed through the simulated device under the real CUPTI
collector (host events through the collector's entry point at the trace's times, API calls and the
device work they started through the stand-in CUPTI, inside their operator's external id) gives the
report `gpuprof analyze` gives of the same trace: every step's time per category, GPU utilization,
SM efficiency and achieved occupancy per device, kernel, kernel-by-operator and copy rows.

A hand-built trace states the expected numbers; the stored GPU traces (../shared/traces; skipped
without them) are real ones. What the live collector cannot record the same way is taken out of the
stored side first (replay.py's docstring: state queries gpuprof switches off, HIP calls with no CUDA
namesake, Kineto's GPU annotations and its per-kernel occupancy estimate); on the four CUDA traces
the replay also agrees with the untouched trace."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[1].parent / "shared" / "traces"
sys.path.insert(0, str(HERE))
GPU_TRACES = [
    "hta_a100_nccl/rank0.json.gz",
    "hta_2xv100_ddp/rank0.json.gz",
    "hta_v100_ns/rank-0.pt.trace.json.gz",
    "hta_mi250_rocm/rank0.json.gz",
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
]
A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "totalGlobalMem": 85899345920,
    "computeMajor": 8,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 167936,
    "numSms": 108,
    "sharedMemPerBlockOptin": 166912,
}


def run_replay(trace: Path, out: Path) -> dict:
    r = subprocess.run(
        [sys.executable, str(HERE / "replay.py"), str(trace), "--json", str(out)],
        env=dict(os.environ, GPUPROF_CLOCK="monotonic"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.is_file(), f"replay wrote nothing:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    res = json.loads(out.read_text())
    assert res["differences"] == [], "\n".join(res["differences"][:20])
    assert r.returncode == 0, r.stderr[-3000:]
    assert res["gpu_collection"].startswith("on (CUPTI")
    assert res["dropped"] == "0" and res["stats"]["dropped"] == 0
    # The calls gpuprof switches off were made, and CUPTI recorded none of them.
    assert res["stats"]["api_switched_off"] == res["calls_gpuprof_switches_off"]
    return res


def _x(cat, name, ts, dur, tid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def hand_trace() -> dict:
    """Two 1 ms steps (and a third, short one) on one A100. Step 1: aten::mm launches `gemm` (400 us
    of device time, 216 blocks of 256 threads on 108 SMs: 2 blocks per SM), aten::copy_ a 1 MiB
    host-to-device copy (100 us), and a cudaStreamIsCapturing query in between. Step 2: aten::mm
    launches `gemm` again (600 us) and aten::zero_ a 50 us memset."""
    k = {
        "grid": [216, 1, 1],
        "block": [256, 1, 1],
        "registers per thread": 32,
        "shared memory": 0,
        "device": 0,
        "stream": 7,
        "context": 1,
    }
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, **{"External id": 1}),
        _x("cpu_op", "aten::mm", 100, 200, **{"External id": 10}),
        _x("cuda_runtime", "cudaLaunchKernel", 150, 20, correlation=1, **{"External id": 10}),
        _x("kernel", "gemm", 300, 400, tid=7, correlation=1, **{"External id": 10}, **k),
        _x("cpu_op", "aten::copy_", 400, 100, **{"External id": 11}),
        _x("cuda_runtime", "cudaMemcpyAsync", 420, 30, correlation=2, **{"External id": 11}),
        _x("cuda_runtime", "cudaStreamIsCapturing", 460, 10, correlation=3, **{"External id": 11}),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            700,
            100,
            tid=7,
            correlation=2,
            bytes=1 << 20,
            device=0,
            stream=7,
            context=1,
            **{"External id": 11},
        ),
        _x("user_annotation", "ProfilerStep#2", 1000, 1000, **{"External id": 2}),
        _x("cpu_op", "aten::mm", 1100, 200, **{"External id": 20}),
        _x("cuda_runtime", "cudaLaunchKernel", 1150, 20, correlation=4, **{"External id": 20}),
        _x("kernel", "gemm", 1200, 600, tid=7, correlation=4, **{"External id": 20}, **k),
        _x("cpu_op", "aten::zero_", 1820, 20, **{"External id": 21}),
        _x("cuda_runtime", "cudaMemsetAsync", 1825, 10, correlation=5, **{"External id": 21}),
        _x(
            "gpu_memset",
            "Memset (Device)",
            1850,
            50,
            tid=7,
            correlation=5,
            bytes=4096,
            device=0,
            stream=7,
            context=1,
            **{"External id": 21},
        ),
        _x("user_annotation", "ProfilerStep#3", 2000, 100, **{"External id": 3}),
        _x("cpu_op", "aten::add", 2010, 50, **{"External id": 30}),
    ]
    return {"schemaVersion": 1, "deviceProperties": [A100], "traceEvents": ev}


def test_replay_of_a_hand_built_trace(simdevice_libdir, tmp_path):
    trace = tmp_path / "hand.json"
    trace.write_text(json.dumps(hand_trace()))
    res = run_replay(trace, tmp_path / "replay.json")
    rep = res["replayed"]
    steps = rep["steps"]
    assert sorted(steps) == ["1", "2"], steps  # the short last step is dropped on both sides
    assert steps["1"]["kernel_us"] == pytest.approx(400.0, abs=1e-3)
    assert steps["1"]["memcpy_us"] == pytest.approx(100.0, abs=1e-3)
    assert steps["2"]["kernel_us"] == pytest.approx(600.0, abs=1e-3)
    assert steps["2"]["memset_us"] == pytest.approx(50.0, abs=1e-3)
    # The kernel ran 1000 of the 2000 us the two steps span; 2 blocks per SM: every SM busy.
    dev = rep["devices"]["0"]
    assert dev["utilization_pct"] == pytest.approx(50.0, abs=0.01)
    assert dev["sm_efficiency_pct"] == pytest.approx(50.0, abs=0.01)
    assert dev["achieved_occupancy_pct"] is not None
    assert rep["kernel_ops"] == {"gemm <- aten::mm": [2, pytest.approx(1000.0, abs=1e-3)]}
    assert rep["kernels"] == {"gemm": [2, pytest.approx(1000.0, abs=1e-3)]}
    assert res["calls_gpuprof_switches_off"] == 1  # the cudaStreamIsCapturing query
    st = res["stats"]
    assert (st["kernels"], st["memcpys"], st["memsets"]) == (2, 1, 1)
    assert st["external_records"] == st["api_records"] == 4  # each recorded call, inside its push


@pytest.mark.parametrize("name", GPU_TRACES)
def test_replay_agrees_with_analyze(name, simdevice_libdir, tmp_path):
    trace = TRACES / name
    if not trace.is_file():
        pytest.skip(f"{trace} absent (the stored traces live in ../shared/traces beside the checkout)")
    res = run_replay(trace, tmp_path / "replay.json")
    rep, ana = res["replayed"], res["analyzed"]
    assert len(rep["steps"]) == len(ana["steps"]) > 0
    assert rep["devices"] and all(d["utilization_pct"] > 0 for d in rep["devices"].values())
    assert len(rep["kernel_ops"]) >= len(rep["kernels"]) > 0
    # Every stored kernel, copy and set was delivered through gpuprof's buffers.
    with gzip.open(trace, "rt") as f:
        cats = [e.get("cat") for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    st = res["stats"]
    assert st["kernels"] == sum(c in ("kernel", "Kernel") for c in cats)
    assert st["memcpys"] + st["memsets"] == sum(
        c in ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset") for c in cats
    )
    assert st["pushes"] == st["pops"]
    if "mi250" not in name:  # CUDA traces: the untouched trace's analysis agrees too
        from replay import compare

        def keyed(t):
            return {k: {n: v if isinstance(v, dict) else tuple(v) for n, v in t[k].items()} for k in t}

        assert compare(keyed(rep), keyed(res["analyzed_as_stored"])) == []
