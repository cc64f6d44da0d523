"""The critical_path rule (docs/advice.md#critical_path) on hand-built critical paths: which cause it
names, its fix, and its bound."""

from __future__ import annotations

import pytest

from gpuprof.advice._facts import Facts
from gpuprof.advice.rules import CRITICAL_PATH_MIN_PCT, critical_path

CAUSES = (
    "cpu_bound",
    "data_loading",
    "gpu_compute_bound",
    "gpu_communication_bound",
    "gpu_kernel_kernel_overhead",
    "gpu_kernel_launch_overhead",
)


def _data(*steps: tuple[float, dict, float], held_by=None) -> dict:
    """steps: (length_us, {cause: pct}, launch_calls_pct)."""
    rows = []
    for i, (length, pct, launch_calls) in enumerate(steps, start=1):
        row = {
            "step": i,
            "length_us": length,
            "by_cause_pct": {**dict.fromkeys(CAUSES, 0.0), **pct},
            "launch_calls_pct": launch_calls,
            "top": [],
        }
        if held_by:
            row["held_by"] = held_by
        rows.append(row)
    return {"critical_path": {"steps": rows}}


def test_launch_bound_chain_asks_for_cuda_graphs():
    # Two steps of 10 and 30 ms: launching (calls + delay) is 20+10 = 30% of the first and
    # 40+10 = 50% of the second; weighted by length, 0.25 x 30 + 0.75 x 50 = 45%.
    rec = critical_path(
        Facts(
            _data(
                (
                    10_000.0,
                    {"cpu_bound": 80.0, "gpu_kernel_launch_overhead": 10.0, "gpu_compute_bound": 10.0},
                    20.0,
                ),
                (
                    30_000.0,
                    {"cpu_bound": 80.0, "gpu_kernel_launch_overhead": 10.0, "gpu_compute_bound": 10.0},
                    40.0,
                ),
            )
        )
    )
    assert rec["rule"] == "critical_path"
    assert rec["saving_bound_pct"] == 45.0
    assert rec["evidence"]["critical_path_share_pct"] == 45.0
    assert "torch.compile" in rec["fix"] and "CUDAGraph" in rec["fix"]


def test_data_loading_chain_asks_for_workers_and_communication_for_buckets():
    rec = critical_path(Facts(_data((1000.0, {"data_loading": 60.0, "cpu_bound": 40.0}, 0.0))))
    assert rec["saving_bound_pct"] == 60.0 and "num_workers" in rec["fix"]
    rec = critical_path(
        Facts(_data((1000.0, {"gpu_communication_bound": 35.0, "gpu_compute_bound": 65.0}, 0.0)))
    )
    assert rec["saving_bound_pct"] == 35.0 and "bucket_cap_mb" in rec["fix"]


def test_waiting_for_a_rank_names_it_and_its_own_cause():
    held = [{"rank": 1, "wait_us": 400.0, "its_cause": "data_loading", "its_top": []}]
    data = _data((1000.0, {"waiting_for_rank_1": 40.0, "gpu_compute_bound": 60.0}, 0.0), held_by=held)
    rec = critical_path(Facts(data))
    assert rec["saving_bound_pct"] == 40.0
    assert "rank 1" in rec["title"] and "waiting for the DataLoader" in rec["evidence"]["summary"]
    assert rec["fix"].startswith("rank 1 arrives late")


@pytest.mark.parametrize(
    "data",
    [
        {},  # a report from before the critical path
        _data((1000.0, {"gpu_compute_bound": 75.0, "cpu_bound": 25.0}, 20.0)),  # compute sets it
        _data((1000.0, {"data_loading": CRITICAL_PATH_MIN_PCT - 0.1, "cpu_bound": 70.1}, 0.0)),
    ],
)
def test_nothing_to_say_when_no_fixable_cause_reaches_the_threshold(data):
    assert critical_path(Facts(data)) is None


def test_a_cause_its_own_rule_advises_on_is_left_to_that_rule():
    # The DataLoader takes 60% of the breakdown's step: the dataloader rule speaks with its measured
    # fix, and the chain's 60% data loading adds nothing to it.
    data = _data((1000.0, {"data_loading": 60.0, "cpu_bound": 40.0}, 0.0))
    data.update(
        steps=[{"step": 1, "total_us": 1000.0, "dataloader_us": 600.0}],
        average={"total_us": 1000.0, "dataloader_us": 600.0, "dataloader_pct": 60.0},
        counts={"steps": 1},
    )
    assert critical_path(Facts(data)) is None
