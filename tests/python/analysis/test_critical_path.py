"""The critical path (docs/metrics.md, "Critical path") on the stored traces, against Holistic Trace
Analysis, across hand-built ranks, and in every format.

The walk's rules are specified on hand-built timelines in tests/cpp/critical_path_test.cpp. HTA's
numbers here are traceinsight 0.6.1's `critical_path_analysis` for the second ProfilerStep, run by
bench/hta_critical_path.py (HTA_DISABLE_NS_ROUNDING=1) and recorded in
bench/results/hta_critical_path-2026-11-29.json.
"""

from __future__ import annotations

import copy
import json

import pytest
from _traces import TRACES
from report_samples import cpu_report_dict

from gpuprof import _core_testing as builders
from gpuprof._native import _core
from gpuprof.analysis.ranks import attach, cross_rank, summary_from_report
from gpuprof.report.build import analyze_file, build_report, cross_rank_report
from gpuprof.report.model import Report
from gpuprof.report.sections import printable

CAUSES = {
    "cpu_bound",
    "data_loading",
    "gpu_compute_bound",
    "gpu_communication_bound",
    "gpu_kernel_kernel_overhead",
    "gpu_kernel_launch_overhead",
}
STORED = [
    "hta_a100_nccl/rank0.json.gz",
    "hta_v100_ns/rank-0.pt.trace.json.gz",
    "hta_2xv100_ddp/rank0.json.gz",
    "hta_mi250_rocm/rank0.json.gz",
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
]


@pytest.fixture(scope="module")
def analysed():
    if not TRACES.is_dir():
        pytest.skip(f"the stored traces are absent: {TRACES}")
    return {rel: analyze_file(str(TRACES / rel)).data for rel in STORED}


def _step(data: dict, n: int) -> dict:
    return next(s for s in data["critical_path"]["steps"] if s["step"] == n)


@pytest.mark.parametrize("rel", STORED)
def test_every_step_has_a_chain_as_long_as_the_step_with_causes_adding_to_100(analysed, rel):
    d = analysed[rel]
    paths = d["critical_path"]["steps"]
    assert [p["step"] for p in paths] == [s["step"] for s in d["steps"]]
    for p, s in zip(paths, d["steps"]):
        assert p["length_us"] == pytest.approx(s["total_us"], abs=1e-3)
        assert set(p["by_cause_pct"]) == CAUSES
        assert sum(p["by_cause_pct"].values()) == pytest.approx(100.0, abs=1e-6)
        assert 0 < len(p["top"]) <= 5
        assert [t["us"] for t in p["top"]] == sorted((t["us"] for t in p["top"]), reverse=True)
        assert sum(t["pct"] for t in p["top"]) <= 100.0 + 1e-6


def test_kernel_bound_resnet_step_equals_hta(analysed):
    # HTA's path through step 102 of the V100 ResNet trace: 95,736.087 us, 98.804% gpu_compute_bound
    # and 1.196% kernel-kernel gaps (the host is far ahead: every kernel is queued). Ours runs the
    # same chain; the length differs by 0.77 us (HTA starts at the launch call of the step's first
    # kernel, we at the step's start, inside the previous step's last kernel).
    p = _step(analysed["hta_v100_ns/rank-0.pt.trace.json.gz"], 102)
    assert p["length_us"] == pytest.approx(95736.087, abs=1.0)
    assert p["by_cause_pct"]["gpu_compute_bound"] == pytest.approx(98.804, abs=0.01)
    assert p["by_cause_pct"]["gpu_kernel_kernel_overhead"] == pytest.approx(1.196, abs=0.01)


def test_host_bound_steps_equal_hta(analysed):
    # The A100 NCCL trace's step 5 and the DDP trace's step 3: HTA's path is 100% cpu_bound (the
    # device finishes before the host does), and so is ours; on the DDP step the operator with most
    # time on it is the same, CompiledFunctionBackward at 91,833 us.
    assert _step(analysed["hta_a100_nccl/rank0.json.gz"], 5)["by_cause_pct"]["cpu_bound"] == 100.0
    ddp = _step(analysed["hta_2xv100_ddp/rank0.json.gz"], 3)
    assert ddp["by_cause_pct"]["cpu_bound"] == 100.0
    assert (ddp["top"][0]["name"], ddp["top"][0]["us"]) == ("CompiledFunctionBackward", 91833.0)


def test_dataloader_wait_on_the_tensorboard_resnet_is_data_loading(analysed):
    # One DataLoader without workers: the loop waits for every batch inside __next__ (29-37% of
    # each step, the breakdown's DataLoader time), and the chain runs through that wait on the main
    # thread: all of it in the last step, all but 0.5-0.7 ms (under 1.1%) in the others. HTA cannot
    # compare here: its analysis stops on a copy whose launch call it does not find.
    d = analysed["tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz"]
    for p, s in zip(d["critical_path"]["steps"], d["steps"]):
        on_chain = p["by_cause_pct"]["data_loading"] * p["length_us"] / 100
        assert 0.985 * s["dataloader_us"] <= on_chain <= s["dataloader_us"] + 1e-3
        assert p["top"][0]["name"].startswith("enumerate(DataLoader)#")


# ---- across ranks -----------------------------------------------------------------------------------
def _rank(rank: int, compute_us: float, allreduce_us: float) -> dict:
    """A rank summary whose one step's chain is its compute kernel, then the all-reduce kernel."""
    length = compute_us + allreduce_us
    path = {
        "step": 1,
        "length_us": length,
        "by_cause_pct": {
            **dict.fromkeys(CAUSES, 0.0),
            "gpu_compute_bound": 100.0 * compute_us / length,
            "gpu_communication_bound": 100.0 * allreduce_us / length,
        },
        "top": [
            {"name": "volta_sgemm", "kind": "kernel", "us": compute_us, "pct": 100.0 * compute_us / length}
        ],
    }
    return {
        "rank": rank,
        "world_size": 2,
        "steps": [{"step": 1, "total_us": length, "communication_us": allreduce_us}],
        "average": {},
        "collectives": [["allreduce", "0", "default_pg", "[0, 1]", 2]],
        "collective_calls": [[0, 1, allreduce_us, length, 4096]],
        "critical_path": [path],
    }


def test_rank_one_long_kernel_holds_rank_zero_allreduce():
    # Rank 1's GEMM runs 14 ms, rank 0's 10 ms; both then all-reduce. The transfer itself takes 2 ms
    # (what rank 1, arriving last, spends in it); rank 0 spends 6 ms in it: 4 ms waiting for rank 1.
    # Rank 0's 16 ms chain: 10 ms compute (62.5%), 2 ms communication (12.5%) and 4 ms waiting for
    # rank 1 (25%), and rank 1's own chain there is mostly gpu_compute_bound.
    out = cross_rank([_rank(0, 10_000.0, 6_000.0), _rank(1, 14_000.0, 2_000.0)])
    assert set(out["critical_path"]) == {0}  # rank 1 waited for no one: its chain is unchanged
    (step,) = out["critical_path"][0]
    pct = step["by_cause_pct"]
    assert pct["gpu_compute_bound"] == pytest.approx(62.5)
    assert pct["gpu_communication_bound"] == pytest.approx(12.5)
    assert pct["waiting_for_rank_1"] == pytest.approx(25.0)
    assert sum(pct.values()) == pytest.approx(100.0)
    assert step["held_by"] == [
        {
            "rank": 1,
            "wait_us": 4000.0,
            "its_cause": "gpu_compute_bound",
            "its_top": [{"name": "volta_sgemm", "kind": "kernel", "us": 14000.0, "pct": 87.5}],
        }
    ]
    # The rank-0 report the folder makes carries the held chain.
    data = {
        "critical_path": {"steps": [_rank(0, 10_000.0, 6_000.0)["critical_path"][0]]},
        "distributed": {"rank": 0},
    }
    attach(data, out)
    assert data["critical_path"]["steps"][0]["by_cause_pct"]["waiting_for_rank_1"] == pytest.approx(25.0)


def test_waiting_beyond_the_communication_on_the_chain_is_capped_by_it():
    # Rank 0 waited 4 ms in its all-reduce, but only 1 ms of communication is on its chain (the rest
    # ran beside compute): 1 ms moves to waiting_for_rank_1, never more than the chain holds.
    r0 = _rank(0, 10_000.0, 6_000.0)
    r0["critical_path"][0]["by_cause_pct"].update(
        {"gpu_compute_bound": 93.75, "gpu_communication_bound": 6.25}
    )
    out = cross_rank([r0, _rank(1, 14_000.0, 2_000.0)])
    pct = out["critical_path"][0][0]["by_cause_pct"]
    assert pct["waiting_for_rank_1"] == pytest.approx(6.25)
    assert pct["gpu_communication_bound"] == pytest.approx(0.0)


def _gemm_then_allreduce(rank: int, gemm_ms: float, allreduce_ms: float):
    """One 18 ms step of a 2-rank NCCL job: a GEMM launched at 0.51 ms runs from 1 ms, the
    all-reduce queued behind it on the same stream, and a cudaStreamSynchronize from 0.8 ms until
    50 us after the all-reduce ends."""
    t = _core.Trace()
    d = _core.DeviceProps()
    d.id, d.name, d.num_sms = 0, "NVIDIA H100 80GB HBM3", 132
    builders.add_device(t, d)
    t.metadata = {
        "distributedInfo": json.dumps(
            {
                "backend": "nccl",
                "rank": rank,
                "world_size": 2,
                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}],
            }
        )
    }
    ms = 1_000_000
    t.add_event("step", "ProfilerStep#1", 0, 18 * ms)
    t.add_event("host_op", "aten::mm", ms // 2, ms // 10, external_id=1, tid=1)
    t.add_event("runtime", "cudaLaunchKernel", 510_000, 20_000, correlation=1, external_id=1, tid=1)
    builders.add_kernel(t, "volta_sgemm", 1 * ms, int(gemm_ms * ms), correlation=1, stream=7)
    t.add_event("host_op", "record_param_comms", 700_000, 50_000, external_id=2, tid=1)
    builders.add_collective_info(t, 2, name="allreduce", in_nelems=1 << 20, out_nelems=1 << 20, dtype="Float")
    t.add_event("runtime", "cudaLaunchKernel", 710_000, 20_000, correlation=2, external_id=2, tid=1)
    end = int((1 + gemm_ms + allreduce_ms) * ms)
    builders.add_kernel(
        t,
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        int((1 + gemm_ms) * ms),
        int(allreduce_ms * ms),
        correlation=2,
        stream=7,
    )
    t.add_event("runtime", "cudaStreamSynchronize", 800_000, end + 50_000 - 800_000, tid=1)
    return t


def test_rank_one_long_kernel_holds_rank_zero_allreduce_in_a_job():
    # Rank 0's GEMM runs 10 ms, rank 1's 14 ms. Both all-reduces end together at 17 ms: rank 1's
    # took 2 ms (the transfer: it arrived last), rank 0's 6 ms. Rank 0's chain, from 18 ms back:
    # the host after the synchronisation (0.95 ms) and the synchronisation's return (0.05 ms),
    # the all-reduce (6 ms), the GEMM it was queued behind (10 ms), the GEMM's launch from 0.51 ms
    # (0.49 ms) and the host before it (0.51 ms). Of the 6 ms all-reduce, 4 ms is waiting for rank
    # 1: 22.2% of the 18 ms step, 2 ms (11.1%) stays communication. Rank 1's own chain is mostly its
    # 14 ms GEMM.
    results = []
    for rank, gemm, allreduce in ((0, 10.0, 6.0), (1, 14.0, 2.0)):
        data = build_report(_gemm_then_allreduce(rank, gemm, allreduce)).to_dict()
        results.append((summary_from_report(data), data))
    report = cross_rank_report(results)
    (step,) = report.data["critical_path"]["steps"]
    pct = step["by_cause_pct"]
    assert step["length_us"] == pytest.approx(18_000.0)
    assert pct["waiting_for_rank_1"] == pytest.approx(100 * 4 / 18)
    assert pct["gpu_communication_bound"] == pytest.approx(100 * 2 / 18)
    assert pct["gpu_compute_bound"] == pytest.approx(100 * 10 / 18)
    assert pct["gpu_kernel_launch_overhead"] == pytest.approx(100 * 0.49 / 18)
    assert pct["cpu_bound"] == pytest.approx(100 * 1.51 / 18)
    assert sum(pct.values()) == pytest.approx(100.0)
    assert [(h["rank"], h["wait_us"], h["its_cause"]) for h in step["held_by"]] == [
        (1, 4000.0, "gpu_compute_bound")
    ]
    # Rank 0's own names stay (the ranks exchange only each step's first one).
    assert [t["name"] for t in step["top"]][:2] == ["volta_sgemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    text = report.to_text(color=False, width=200)
    assert "waiting for rank 1 22.2%" in text
    assert (
        "waited 4.000 ms in collectives for rank 1, whose own path in this step is mostly GPU compute" in text
    )


# ---- rendered ------------------------------------------------------------------------------------------
def _report_with_path(name: str) -> Report:
    d = copy.deepcopy(cpu_report_dict())
    step = d["steps"][0]["step"]
    d["critical_path"] = {
        "steps": [
            {
                "step": step,
                "length_us": 20_000.0,
                "by_cause_pct": {**dict.fromkeys(CAUSES, 0.0), "data_loading": 75.0, "cpu_bound": 25.0},
                "launch_calls_pct": 0.0,
                "top": [
                    {"name": name, "kind": "user_range", "us": 15_000.0, "pct": 75.0},
                    {
                        "name": "void gemm<" + "float, " * 40 + ">",
                        "kind": "kernel",
                        "us": 1_000.0,
                        "pct": 5.0,
                    },
                ],
            }
        ]
    }
    return Report.from_dict(json.loads(json.dumps(d)))


def test_every_format_shows_each_step_its_causes_and_top_names_inert():
    hostile = "\x1b]0;pwned\x07<b>enumerate(DataLoader)#x</b>"
    r = _report_with_path(hostile)
    text = r.to_text(color=False, width=200)
    assert "Critical path" in text
    assert "20.000 ms: data loading 75.0%, CPU 25.0%" in text
    assert printable(hostile) in text and "\x1b" not in text
    # A long kernel name is cut in the terminal (96 characters), whole in Markdown and HTML.
    assert "  1,000.0 us (5.0%) void gemm<float, float, " in text
    assert ("void gemm<" + "float, " * 40)[:93] + "..." in text
    md = r.to_markdown()
    assert "float, " * 40 in md
    assert "### Critical path" in md and "\x1b" not in md
    html = r.to_html()
    assert '<ul id="critical-path">' in html
    assert "<b>enumerate" not in html and "&lt;b&gt;enumerate" in html
    assert r.to_dict()["critical_path"]["steps"][0]["by_cause_pct"]["data_loading"] == 75.0
