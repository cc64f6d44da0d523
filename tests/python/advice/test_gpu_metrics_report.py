"""The GPU metrics in the Report: new keys beside the foundation's, never instead of them."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from _gpu_step import conv_step_trace  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof import _core_testing as builders  # noqa: E402
from gpuprof._native import _core  # noqa: E402
from gpuprof.report.build import build_report  # noqa: E402

FOUNDATION_KEYS = {
    "schema_version",
    "steps",
    "average",
    "dataloaders",
    "host",
    "counts",
    "source",
    "metadata",
}
GPU_KEYS = {"devices", "kernels", "operators", "copies", "syncs", "memory"}


def test_cpu_loop_report_has_operator_table_and_empty_gpu_sections():
    # A CPU-only loop: no device ran anything, so no devices, kernels, copies or device memory
    # rows (the memory table has the host's resident set size only, one row per step); the
    # operator table still lists the host ops (Linear's addmm and its backward are eligible ops).
    model = torch.nn.Linear(32, 8)
    with gpuprof.profile() as prof:
        for _ in range(3):
            model(torch.randn(16, 32)).sum().backward()
            prof.step()
    data = prof.report().to_dict()
    assert FOUNDATION_KEYS <= set(data) and GPU_KEYS <= set(data)
    assert data["devices"] == [] and data["kernels"] == [] and data["copies"] == []
    assert [r["step"] for r in data["memory"]] == [0, 1, 2]
    for r in data["memory"]:
        assert r["device"] == -1 and r["peak_allocated_bytes"] is None and r["peak_rss_bytes"] > 0
    ops = {r["name"]: r for r in data["operators"]}
    assert ops["aten::linear"]["calls"] == 3 and ops["aten::linear"]["tc_eligible"]
    assert ops["aten::addmm"]["tc_eligible"]
    assert not ops["aten::sum"]["tc_eligible"]
    for r in data["operators"]:
        assert 0.0 <= r["host_self_us"] <= r["host_total_us"] + 1e-6
        assert r["device_total_us"] == 0.0
    # linear holds addmm: its self time excludes its children's.
    assert ops["aten::linear"]["host_self_us"] < ops["aten::linear"]["host_total_us"]
    json.dumps(data)


def test_report_from_hand_built_gpu_trace():
    # _gpu_step.py: a 400 us kernel in a 1 ms step, launched by aten::conv2d; a 1 MB pinned copy.
    t = conv_step_trace()
    data = build_report(t).to_dict()
    dev = data["devices"][0]
    # Kernel 400 of 1000 us: utilization 40 %, SM efficiency 40 % (share 1), occupancy 50 %.
    assert dev["utilization_pct"] == pytest.approx(40.0)
    assert dev["sm_efficiency_pct"] == pytest.approx(40.0)
    assert dev["achieved_occupancy_pct"] == pytest.approx(50.0)
    assert dev["tensor_core_pct"] == 0.0 and dev["tc_eligible_pct"] == pytest.approx(100.0)
    assert dev["compute_capability"] == "7.0" and dev["memory_total_bytes"] == 32 << 30
    assert dev["peak_allocated_bytes"] == 4096
    assert data["kernels"][0]["mean_blocks_per_sm"] == pytest.approx(2.0)
    assert data["copies"] == [
        {
            "kind": "HtoD",
            "host_memory": "pinned",
            "count": 1,
            "bytes": 1_000_000,
            "total_us": 100.0,
            "gb_per_s": 10.0,
        }
    ]
    conv = next(r for r in data["operators"] if r["name"] == "aten::conv2d")
    assert conv["device_self_us"] == 400.0 and conv["tc_eligible"]
    assert data["memory"] == [
        {
            "step": 0,
            "ts_ns": 0,
            "device": 0,
            "peak_allocated_bytes": 4096,
            "peak_reserved_bytes": 8192,
            "capacity_bytes": 32 << 30,
            "peak_rss_bytes": None,
        }
    ]


def test_bad_builder_input_is_a_clear_error():
    t = _core.Trace()
    with pytest.raises(ValueError, match="grid of kernel 'k' must have 3 numbers"):
        builders.add_kernel(t, "k", 0, 10, grid=[1, 2])
    with pytest.raises(ValueError, match="unknown copy kind 'sideways'"):
        builders.add_copy(t, "c", 0, 10, copy_kind="sideways")
    with pytest.raises(ValueError, match="negative duration"):
        builders.add_kernel(t, "k", 0, -1)
    t.add_event("runtime", "cudaLaunchKernel", 0, 1)
    with pytest.raises(ValueError, match="not one"):
        builders.set_input_shapes(t, 0, "[[1]]")
    with pytest.raises(IndexError):
        builders.set_input_shapes(t, 5, "[[1]]")


def test_operators_grouped_by_input_shapes_when_recorded():
    # Two batches of 8 rows and one of 32: with record_shapes, operators_by_shape splits aten::linear
    # into a row per input-shape signature (2 calls and 1 call) while operators keeps one row of the
    # 3 calls, their times the sum of the two; without, operators is the same one row and there is
    # no by-shape view.
    model = torch.nn.Linear(16, 4)

    def run(record_shapes: bool) -> dict:
        with gpuprof.profile(record_shapes=record_shapes) as prof:
            for n in (8, 8, 32):
                model(torch.randn(n, 16))
                prof.step()
        return prof.report().to_dict()

    shaped = run(True)
    by_shape = [r for r in shaped["operators_by_shape"] if r["name"] == "aten::linear"]
    assert {r["input_shapes"]: r["calls"] for r in by_shape} == {
        "[[8, 16], [4, 16], [4]]": 2,
        "[[32, 16], [4, 16], [4]]": 1,
    }
    (linear,) = [r for r in shaped["operators"] if r["name"] == "aten::linear"]
    assert linear["calls"] == 3 and "input_shapes" not in linear
    assert linear["host_total_us"] == pytest.approx(sum(r["host_total_us"] for r in by_shape), abs=1e-3)
    assert linear["host_self_us"] == pytest.approx(sum(r["host_self_us"] for r in by_shape), abs=1e-3)
    plain = run(False)
    assert plain["operators_by_shape"] == []
    assert [r["calls"] for r in plain["operators"] if r["name"] == "aten::linear"] == [3]


def test_tables_scale_n_log_n():
    # 30k ops inside one outer op, each launching a kernel (90k events). Linking and the tables are
    # a sort plus hash lookups: tens of milliseconds. A pairwise containment search would be ~1e9
    # comparisons, far past the (generous, CI-proof) bound.
    import time

    n = 30_000
    t = _core.Trace()
    d = _core.DeviceProps()
    d.num_sms = 80
    builders.add_device(t, d)
    t.add_event("step", "ProfilerStep#1", 0, 10 * n + 100)
    t.add_event("host_op", "aten::linear", 0, 10 * n + 50, external_id=1)
    for i in range(n):
        ts = 10 * i + 1
        t.add_event("host_op", "aten::addmm", ts, 8, external_id=i + 2)
        t.add_event("runtime", "cudaLaunchKernel", ts + 1, 2, correlation=i + 1, external_id=i + 2)
        builders.add_kernel(
            t,
            f"gemm_{i % 50}",
            ts + 4,
            5,
            correlation=i + 1,
            grid=[80, 1, 1],
            block=[128, 1, 1],
            registers_per_thread=32,
            shared_mem_bytes=0,
        )
    start = time.perf_counter()
    tables = _core.gpu_tables(t)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0
    ops = {r["name"]: r for r in tables["operators"]}
    assert ops["aten::addmm"]["calls"] == n and ops["aten::addmm"]["device_self_us"] == pytest.approx(
        n * 0.005
    )
    assert ops["aten::linear"]["device_total_us"] == pytest.approx(n * 0.005)
    assert len(tables["kernels"]) == 50 and tables["devices"][0]["tc_eligible_pct"] == pytest.approx(100.0)


def test_cpu_only_reports_say_nothing_of_gpus():
    """A run where no GPU ran anything: no tensor-core column in the operator table, and the
    advice speaks of processes, not GPUs (the data loader and communication fixes)."""
    model = torch.nn.Linear(32, 8)
    with gpuprof.profile() as prof:
        for _ in range(3):
            model(torch.randn(16, 32)).sum().backward()
            prof.step()
    report = prof.report()
    assert "tc eligible" not in report.to_text(color=False) and "tc eligible" not in report.to_markdown()
    assert "tc eligible" in build_report(conv_step_trace()).to_text(color=False)  # a GPU run keeps it
    from gpuprof.advice import rules

    data = report.to_dict()
    data["average"] = dict(
        data["average"], communication_us=50_000.0, communication_pct=50.0, total_us=100_000.0
    )
    data["distributed"] = {"world_size": 2, "backend": "gloo"}
    comm = rules.communication(rules.Facts(data))
    assert comm is not None and "per-process batch" in comm["fix"] and "GPU" not in comm["fix"]
