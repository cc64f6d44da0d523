"""Advice on real profiler traces (../shared/traces), through `gpuprof.analyze`.

On tb_resnet50_v100_nw0 the PyTorch Profiler TensorBoard plugin fired two recommendations (its
checked-in expected_overview.json): DataLoader (33.4% of the step) and mixed precision (68% of
kernel time launched by tensor-core-eligible operators, 0% on tensor cores, compute capability 7.0).
gpuprof must fire both, with the same figures as evidence.
"""

import json

import pytest

import gpuprof

RESNET = "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz"


def _advice(report):
    return {a["rule"]: a for a in report.advice}


def test_resnet50_v100_nw0_fires_the_plugins_dataloader_and_mixed_precision(shared_traces):
    expected = json.loads((shared_traces / "tb_resnet50_v100_nw0" / "expected_overview.json").read_text())
    assert {r["rule"] for r in expected["recommendations_fired"]} == {"dataloader", "mixed_precision"}
    report = gpuprof.analyze(shared_traces / RESNET)
    advice = _advice(report)
    assert {"dataloader", "mixed_precision"} <= set(advice)

    dl = advice["dataloader"]
    # The plugin: 33.37% of the average step in DataLoader. The bound is that whole share.
    assert dl["evidence"]["dataloader_pct"] == pytest.approx(expected["average_pct"]["DataLoader"], abs=0.5)
    assert dl["saving_bound_pct"] == pytest.approx(33.4, abs=0.5)
    assert dl["confidence"] == "medium"  # a trace does not carry the DataLoader's settings
    assert "num_workers=N" in dl["fix"] and "pin_memory=True" in dl["fix"]

    mp = advice["mixed_precision"]
    # The plugin: 68% eligible, 0% on tensor cores, on a V100 (7.0): FP16 autocast + GradScaler.
    assert mp["evidence"]["tc_eligible_pct"] == pytest.approx(68, abs=3)
    assert mp["evidence"]["tensor_core_pct"] == 0
    assert mp["evidence"]["compute_capability"] == 7.0
    assert "torch.float16" in mp["fix"] and "GradScaler" in mp["fix"]
    # Bound: kernel share (55.5%) x eligible share (68%) = ~37.7% of the step.
    assert mp["saving_bound_pct"] == pytest.approx(55.5 * 0.68, abs=2.5)

    # Ranked by the bound, and no rule fires that the numbers contradict: utilization is 55.5%
    # (not < 50%), memory is far from 90%, there is one GPU and no distributed job.
    bounds = [a["saving_bound_pct"] for a in report.advice]
    assert bounds == sorted(bounds, reverse=True)
    assert not {"low_utilization", "data_parallel", "nccl_backend", "communication", "no_gpu_work"} & set(
        advice
    )
    assert "Top recommendations" in report.to_text()


# (trace, rules that must fire, rules that must not, why)
OTHER_TRACES = [
    (
        "hta_2xv100_ddp/rank0.json.gz",
        {"communication", "mixed_precision"},
        {"nccl_backend", "data_parallel", "no_gpu_work", "low_utilization"},
        "DDP on 2 V100s over NCCL: 25% of the step is exposed communication (> 10%), FP32 with 42% of "
        "kernel time eligible for tensor cores; NCCL already, one GPU per process, utilization 56%",
    ),
    (
        "hta_v100_ns/rank-0.pt.trace.json.gz",
        {"mixed_precision"},
        {"low_utilization", "dataloader", "communication", "host_sync"},
        "a GPU-bound V100 run (kernels 97% of the step) in FP32 with 67% of kernel time eligible",
    ),
    (
        "hta_cpu_only/rank-34.pt.trace.json.gz",
        {"communication"},
        {"mixed_precision", "low_utilization", "no_gpu_work", "nccl_backend"},
        "a CPU-only gloo job: communication is 85% of the step; no GPU, so no GPU rule",
    ),
]


@pytest.mark.parametrize(
    "trace, must, must_not, why", OTHER_TRACES, ids=[t[0].split("/")[0] for t in OTHER_TRACES]
)
def test_other_real_traces_fire_what_their_numbers_show(shared_traces, trace, must, must_not, why):
    report = gpuprof.analyze(shared_traces / trace)
    fired = set(_advice(report))
    assert must <= fired, f"{why}: expected {must}, fired {fired}"
    assert not (must_not & fired), f"{why}: should not fire {must_not & fired}"
    comm = _advice(report).get("communication")
    if comm:  # the bound is the exposed communication share of the breakdown
        assert comm["saving_bound_pct"] == pytest.approx(report.average["communication_pct"], abs=0.05)
