"""GPU and distributed scenarios as hand-built report dicts: each has one bottleneck, stated in
numbers, and fires its rule with the bound worked out here; a well-tuned run fires nothing.

These are the report sections the GPU analysis and the trace importer write (devices, kernels,
operators, copies, syncs, memory, distributedInfo); Report.from_dict(...).advise() runs the same
rules a live session or `gpuprof analyze` runs.
"""

import json

import pytest

from gpuprof.advice import RULE_IDS, advise
from gpuprof.report.model import CATEGORIES, SCHEMA_VERSION, Report

GiB = 2**30
STEPS = 10


def report(pct, *, step_us=100_000.0, steps=STEPS, **sections):
    """A report whose mean step is `step_us` split as `pct` (% per category; Other takes the rest)."""
    pct = dict(pct)
    pct["other"] = round(100.0 - sum(pct.values()), 6)
    assert pct["other"] >= 0
    cats = {k: pct.get(k, 0.0) for k, _ in CATEGORIES}
    row = {"total_us": step_us, **{f"{k}_us": step_us * v / 100 for k, v in cats.items()}}
    average = {**row, **{f"{k}_pct": v for k, v in cats.items()}}
    data = {
        "schema_version": SCHEMA_VERSION,
        "source": {"kind": sections.pop("kind", "trace")},
        "steps": [{"step": i, **row} for i in range(steps)],
        "average": average,
        "dataloaders": sections.pop("dataloaders", []),
        "host": sections.pop("host", {}),
        "counts": {"events": 1000, "dropped": 0, "skipped": 0, "steps": steps},
        "metadata": sections.pop("metadata", {}),
    }
    data.update(sections)
    return Report.from_dict(data)


def device(**kw):
    d = {
        "id": 0,
        "name": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.0",
        "utilization_pct": 92.0,
        "sm_efficiency_pct": 85.0,
        "achieved_occupancy_pct": 50.0,
        "tensor_core_pct": 60.0,
        "tc_eligible_pct": 70.0,
        "memory_total_bytes": 80 * GiB,
        "peak_allocated_bytes": 60 * GiB,
    }
    d.update(kw)
    return d


LOADER = {
    "iterator": "_MultiProcessingDataLoaderIter",
    "dataset": "ImageFolder",
    "dataset_length": 50000,
    "batch_size": 64,
    "num_workers": 8,
    "pin_memory": True,
    "prefetch_factor": 2,
    "persistent_workers": True,
    "batches_seen": 10,
}
BIG_KERNELS = [
    {
        "name": "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32",
        "calls": 2000,
        "total_us": 920_000.0,
        "mean_blocks_per_sm": 4.0,
    }
]
HOST16 = {"cpus_available": 16, "cpu_count": 64, "cuda_available": True, "cuda_device_count": 1}


def clean(**over):
    """A well-tuned single-GPU run: kernels 92% of the step, pinned copies hidden, data ready, one
    `.item()` per step for logging (GPU idle 100-93 = 7%, minus DataLoader 1% = 6%: under host_sync's
    10%), tensor cores on, memory 75% used. Nothing to recommend."""
    sections = dict(
        kind="live",
        host=HOST16,
        dataloaders=[LOADER],
        devices=[device()],
        kernels=BIG_KERNELS,
        copies=[
            {
                "kind": "HtoD",
                "count": 20,
                "bytes": 20 * 12 * 2**20,
                "total_us": 20_000.0,
                "host_memory": "pinned",
            }
        ],
        syncs=[
            {
                "name": "cudaStreamSynchronize",
                "op": "aten::_local_scalar_dense",
                "count": 10,
                "total_us": 500.0,
            }
        ],
        operators=[
            {
                "name": "Optimizer.step#AdamW.step",
                "calls": 10,
                "host_total_us": 20_000.0,
                "device_total_us": 15_000.0,
            }
        ],
    )
    sections.update(over)
    return report({"kernel": 92, "memcpy": 1, "runtime": 2, "dataloader": 1, "cpu_exec": 3}, **sections)


def rules(r):
    return [a["rule"] for a in r.advise()]


def fired(r, rule):
    by_rule = {a["rule"]: a for a in r.advise()}
    assert rule in by_rule, f"{rule} did not fire; fired: {list(by_rule)}"
    return by_rule[rule]


# ---- clean scenarios ----------------------------------------------------------------------------
def test_a_well_tuned_gpu_run_gets_no_advice():
    assert rules(clean()) == []


def test_a_report_with_only_the_foundation_keys_gets_no_advice():
    # An old CPU report: no GPU sections, no host facts, DataLoader 2%: nothing is measured that
    # could trigger a rule, and missing sections must not crash any rule.
    assert rules(report({"dataloader": 2, "cpu_exec": 90})) == []


def test_malformed_sections_do_not_crash_the_advice():
    # Strings where numbers belong, rows that are not objects: every rule reads through _facts,
    # which treats them as not measured.
    r = clean(
        devices=[{"id": 0, "utilization_pct": "n/a", "compute_capability": None}, 7],
        kernels="not a table",
        copies=[{"kind": None, "bytes": "big"}],
        syncs=[None],
    )
    assert rules(r) == []


# ---- no_gpu_work ----------------------------------------------------------------------------------
def test_no_gpu_work_when_cuda_is_available_but_no_kernel_ran():
    # CUDA available, 10 steps of 95% CPU work, no kernel and no copy: the model stayed on the CPU.
    # Bound: the CPU-exec share (95%), the work that would move to the GPU.
    r = report({"cpu_exec": 95, "dataloader": 3}, host=HOST16, kind="live")
    a = fired(r, "no_gpu_work")
    assert a["saving_bound_pct"] == 95.0
    assert a["confidence"] == "medium"  # no GPU section: collection may have been off
    assert "model.to(device)" in a["fix"]
    # With GPU collection on (a device row) and still no work: high confidence.
    r = report({"cpu_exec": 95}, host=HOST16, devices=[device(utilization_pct=0.0)])
    assert fired(r, "no_gpu_work")["confidence"] == "high"


def test_no_gpu_work_stays_quiet_without_cuda_or_when_unknown():
    assert "no_gpu_work" not in rules(report({"cpu_exec": 95}, host={**HOST16, "cuda_available": False}))
    assert "no_gpu_work" not in rules(report({"cpu_exec": 95}, host={"cpus_available": 16}))


# ---- dataloader (imported trace: settings unknown) -------------------------------------------------
@pytest.mark.parametrize("share, fires", [(4.9, False), (5.0, False), (5.1, True), (33.4, True)])
def test_dataloader_threshold_is_the_plugins_5_percent(share, fires):
    r = report({"kernel": 50, "dataloader": share})
    assert ("dataloader" in rules(r)) is fires
    if fires:
        a = fired(r, "dataloader")
        assert a["saving_bound_pct"] == round(share, 1)
        assert a["confidence"] == "medium" and "not in this trace" in a["confidence_reason"]


def test_dataloader_without_workers_feeding_a_gpu_sizes_workers_from_the_cpus():
    # The example: 16 CPUs, num_workers=0, DataLoader 73% of a 100 ms step. The main
    # process loads a batch in 73 ms while the rest of the step takes 27 ms: 73/27 = 2.7 -> 3
    # workers break even, 4 with one for jitter (of the 16 CPUs). The GPU ran, so pin_memory too.
    r = report(
        {"kernel": 20, "dataloader": 73},
        kind="live",
        host=HOST16,
        devices=[device(utilization_pct=20.0)],
        kernels=BIG_KERNELS,
        dataloaders=[
            {
                **LOADER,
                "num_workers": 0,
                "pin_memory": False,
                "prefetch_factor": None,
                "persistent_workers": False,
            }
        ],
    )
    a = fired(r, "dataloader")
    assert rules(r)[0] == "dataloader" and a["saving_bound_pct"] == 73.0 and a["confidence"] == "high"
    assert a["fix"].startswith(
        "DataLoader(..., num_workers=4, persistent_workers=True, pin_memory=True): "
        "4 of the 16 CPUs this process may use; DataLoader is 73% of the step "
        "with num_workers=0"
    )


def test_dataloader_with_workers_below_the_cpus_raises_them_and_prefetch():
    # 2 workers on 16 CPUs, DataLoader 40% of a 100 ms step: each worker delivers a batch every
    # 2 steps, so a batch costs about 2 x 100 ms = 200 ms; the rest of the step is 60 ms, so
    # 200/60 = 3.3 -> 4 workers break even, 5 with one for jitter; 5 <= 16 CPUs.
    r = report(
        {"kernel": 55, "dataloader": 40},
        kind="live",
        host=HOST16,
        devices=[device()],
        kernels=BIG_KERNELS,
        dataloaders=[{**LOADER, "num_workers": 2, "persistent_workers": False}],
    )
    a = fired(r, "dataloader")
    assert a["evidence"]["workers_needed_est"] == 5
    assert "num_workers=5, persistent_workers=True, pin_memory=True, prefetch_factor=4" in a["fix"]
    assert "persistent_workers keeps workers alive" in a["fix"]
    assert a["change"] == {
        "DataLoader": {"num_workers": 5, "persistent_workers": True, "pin_memory": True, "prefetch_factor": 4}
    }


# ---- pin_memory ---------------------------------------------------------------------------------
def test_pageable_host_to_device_copies_fire_pin_memory():
    # 20 pageable H2D copies over 10 steps = 2 per step, 2 x 4 MiB in 2 x 1.2 ms = 2.4 ms of a 100 ms
    # step = 2.4%; the breakdown's exposed copy time is 3%, so the bound is min(2.4, 3) = 2.4%.
    r = clean(
        copies=[
            {
                "kind": "HtoD",
                "count": 20,
                "bytes": 20 * 4 * 2**20,
                "total_us": 24_000.0,
                "host_memory": "pageable",
            }
        ]
    )
    r._data["average"].update(memcpy_us=3000.0, memcpy_pct=3.0)
    a = fired(r, "pin_memory")
    assert a["saving_bound_pct"] == 2.4 and a["confidence"] == "high"
    assert a["evidence"]["h2d_copies_per_step"] == 2
    assert "pin_memory=True" in a["fix"] and "non_blocking=True" in a["fix"]


def test_loader_without_pinning_feeding_a_gpu_fires_pin_memory_from_the_breakdown():
    # Copy rows without a memory kind, a loader with pin_memory=False, copies 4% of the step.
    r = report(
        {"kernel": 80, "memcpy": 4},
        kind="live",
        host=HOST16,
        devices=[device()],
        kernels=BIG_KERNELS,
        dataloaders=[{**LOADER, "pin_memory": False}],
    )
    a = fired(r, "pin_memory")
    assert a["saving_bound_pct"] == 4.0 and a["confidence"] == "medium"


# ---- host_sync ----------------------------------------------------------------------------------
def test_item_in_the_loop_fires_host_sync_naming_the_op():
    # 300 syncs from aten::_local_scalar_dense over 10 steps = 30 per step, blocking the host
    # 300 ms + 2 ms over 10 steps = 30.2 ms of each 100 ms step. Kernels are 55% of the step and
    # there is no DataLoader wait, so the GPU idles 45%. Without the syncs the step cannot be shorter
    # than the host's own work (100 - 30.2 ms) nor than the GPU's: bound = min(30.2, 45) = 30.2%.
    r = report(
        {"kernel": 55, "runtime": 15, "cpu_exec": 25},
        devices=[device(utilization_pct=55.0)],
        kernels=BIG_KERNELS,
        syncs=[
            {
                "name": "cudaStreamSynchronize",
                "op": "aten::_local_scalar_dense",
                "count": 300,
                "total_us": 300_000.0,
            },
            {
                "name": "cudaDeviceSynchronize",
                "op": "torch.cuda.synchronize",
                "count": 10,
                "total_us": 2_000.0,
            },
        ],
    )
    a = fired(r, "host_sync")
    assert a["saving_bound_pct"] == 30.2 and a["confidence"] == "high"
    assert a["evidence"]["syncs_per_step"] == 31 and a["evidence"]["top_op"] == "aten::_local_scalar_dense"
    assert ".item()" in a["fix"] and "mostly in aten::_local_scalar_dense" in a["title"]


def test_syncs_on_a_host_bound_step_do_not_fire():
    # 8 event syncs per step but only 40 us blocked per 100 ms step: the host is busy with its own
    # work (CPU exec 71%), not waiting; removing the syncs saves at most 0.04%, below 1%.
    r = report(
        {"kernel": 17, "runtime": 5, "cpu_exec": 71},
        devices=[device(utilization_pct=23.0)],
        kernels=BIG_KERNELS,
        syncs=[{"name": "cudaEventSynchronize", "op": "", "count": 80, "total_us": 400.0}],
    )
    assert "host_sync" not in rules(r)
    # The same syncs blocking 20 ms per step do fire, and the fix speaks of events, not of an op.
    r._data["syncs"][0]["total_us"] = 200_000.0
    a = fired(r, "host_sync")
    assert a["saving_bound_pct"] == 20.0 and "cudaEventSynchronize outside any op" in a["fix"]


# ---- launch_bound -------------------------------------------------------------------------------
def test_many_tiny_kernels_fire_launch_bound():
    # 5000 kernels over 10 steps = 500 per step, 8 us each = 4 ms of a 20 ms step (20%); runtime
    # 35% + CPU exec 40% = 75% host; GPU idle 80% with no DataLoader wait: the bound is 80%.
    r = report(
        {"kernel": 20, "runtime": 35, "cpu_exec": 40},
        step_us=20_000.0,
        devices=[device(utilization_pct=20.0, sm_efficiency_pct=60.0 * 0.2)],
        kernels=[{"name": "vectorized_elementwise_kernel", "calls": 5000, "total_us": 40_000.0}],
        dataloaders=[LOADER],
    )
    a = fired(r, "launch_bound")
    assert a["saving_bound_pct"] == 80.0
    assert a["evidence"]["launches_per_step"] == 500 and a["evidence"]["mean_kernel_us"] == 8.0
    assert (
        "torch.compile(model, mode='reduce-overhead')" in a["fix"] and "batch_size=128 (now 64)" in a["fix"]
    )


# ---- cuda_graphs, eager_fallback (torch.compile) ------------------------------------------------
def _compiled(kernel_launches: int, **over):
    """launch_bound's case, the kernels Inductor's: 5000 Triton kernels over 10 steps, 8 us each."""
    name = "triton_poi_fused_add_mul_0"
    row = {"kernel": name, "backend": "triton", "time_on": "device", "calls": 5000, "total_us": 40_000.0}
    return report(
        {"kernel": 20, "runtime": 35, "cpu_exec": 40},
        step_us=20_000.0,
        devices=[device(utilization_pct=20.0, sm_efficiency_pct=60.0 * 0.2)],
        kernels=[{"name": name, "calls": 5000, "total_us": 40_000.0}],
        launch_stats=[{"name": name, "launches": kernel_launches}],
        compiled={"region_calls": 10, "compiled_kernels": [row], **over},
        dataloaders=[LOADER],
    )


def test_a_compiled_model_launching_its_kernels_one_by_one_fires_cuda_graphs_instead_of_launch_bound():
    r = _compiled(kernel_launches=5000)
    a = fired(r, "cuda_graphs")
    assert a["saving_bound_pct"] == 80.0  # GPU idle 80%, no DataLoader wait
    assert a["evidence"]["generated_launches_per_step"] == 500 and a["evidence"]["mean_kernel_us"] == 8.0
    assert 'mode="reduce-overhead"' in a["fix"]
    assert "launch_bound" not in rules(r)  # one cause, said once


def test_kernels_replayed_from_a_cuda_graph_do_not_fire_cuda_graphs():
    # 5000 kernel calls, 100 launch calls: the rest were replayed from captured graphs
    assert "cuda_graphs" not in rules(_compiled(kernel_launches=100))


def test_operators_left_to_eager_kernels_fire_eager_fallback_from_5pct_of_the_span():
    # The span: 10 steps of 20 ms = 200 ms. aten::kthvalue's 12 ms are 6% (>= 5%): fires; 8 ms,
    # 4%, does not.
    def fallback(host_us):
        row = {"op": "aten::kthvalue", "sources": ["/m.py:7"], "calls": 10, "host_total_us": host_us}
        return report({"cpu_exec": 90}, step_us=20_000.0, compiled={"region_calls": 10, "fallbacks": [row]})

    a = fired(fallback(12_000.0), "eager_fallback")
    assert a["saving_bound_pct"] == 6.0
    assert a["evidence"]["top_op"] == "aten::kthvalue" and "/m.py:7" in a["fix"]
    assert "register_decomposition" in a["fix"]
    assert "eager_fallback" not in rules(fallback(8_000.0))


# ---- mixed_precision ------------------------------------------------------------------------------
def test_fp32_on_a_v100_fires_mixed_precision_with_fp16_and_a_grad_scaler():
    # The plugin's case (tb_resnet50_v100_nw0): compute capability 7.0, 68% of kernel time from
    # eligible operators, 0% on tensor cores; kernels are 55.5% of the step, so at most
    # 55.5 x 68% = 37.7% of the step is FP32 work tensor cores could take.
    r = report(
        {"kernel": 55.5, "dataloader": 33.4},
        devices=[
            device(
                name="Tesla V100-DGXS-32GB",
                compute_capability="7.0",
                utilization_pct=55.5,
                tensor_core_pct=0.0,
                tc_eligible_pct=68.0,
            )
        ],
    )
    a = fired(r, "mixed_precision")
    assert a["saving_bound_pct"] == 37.7 and a["confidence"] == "high"
    assert "torch.float16" in a["fix"] and "GradScaler" in a["fix"] and "no BF16/TF32" in a["fix"]
    assert rules(r)[:2] == ["mixed_precision", "dataloader"]  # 37.7% ranks above 33.4%


def test_fp32_on_an_a100_suggests_bf16_and_tf32():
    r = clean(devices=[device(tensor_core_pct=5.0, tc_eligible_pct=70.0)])
    a = fired(r, "mixed_precision")
    assert a["saving_bound_pct"] == round(92 * 0.65, 1)
    assert "torch.bfloat16" in a["fix"] and "set_float32_matmul_precision('high')" in a["fix"]


@pytest.mark.parametrize(
    "dev",
    [
        device(tensor_core_pct=40.0, tc_eligible_pct=70.0),  # mostly on TC
        device(compute_capability="6.1", tensor_core_pct=0.0),  # Pascal: none
        device(tc_eligible_pct=0.0, tensor_core_pct=0.0),
    ],
)  # nothing eligible
def test_mixed_precision_stays_quiet_when_it_cannot_help(dev):
    assert "mixed_precision" not in rules(clean(devices=[dev]))


# ---- channels_last ------------------------------------------------------------------------------
def test_layout_conversions_in_a_conv_net_fire_channels_last():
    # 30 ms of nchwToNhwc/nhwcToNchw kernels over 10 steps = 3 ms per 100 ms step = 3%.
    kernels = BIG_KERNELS + [
        {
            "name": "void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true>",
            "calls": 400,
            "total_us": 18_000.0,
        },
        {
            "name": "void cudnn::ops::nhwcToNchwKernel<__half, __half, float, true, false>",
            "calls": 200,
            "total_us": 12_000.0,
        },
    ]
    r = clean(
        kernels=kernels,
        operators=[
            {
                "name": "aten::cudnn_convolution",
                "calls": 530,
                "host_total_us": 9000.0,
                "device_total_us": 400_000.0,
            }
        ],
    )
    a = fired(r, "channels_last")
    assert a["saving_bound_pct"] == 3.0
    assert "torch.channels_last" in a["fix"]
    assert "channels_last" not in rules(clean(kernels=kernels, operators=[]))  # not a conv net


# ---- optimizer ----------------------------------------------------------------------------------
def test_slow_optimizer_step_fires_optimizer_with_fused():
    # AdamW.step: 150 ms of host time over 10 steps = 15 ms of a 100 ms step = 15%; foreach kernels
    # (multi_tensor_apply) already run, so the next step is fused=True.
    r = clean(
        operators=[
            {
                "name": "Optimizer.step#AdamW.step",
                "calls": 10,
                "host_total_us": 150_000.0,
                "device_total_us": 120_000.0,
            }
        ],
        kernels=BIG_KERNELS
        + [{"name": "void at::native::multi_tensor_apply_kernel<...>", "calls": 400, "total_us": 60_000.0}],
    )
    a = fired(r, "optimizer")
    assert a["saving_bound_pct"] == 15.0
    assert "torch.optim.AdamW(params, ..., fused=True)" in a["fix"]
    # Already fused: nothing to say.
    fused = clean(
        operators=r._data["operators"],
        kernels=BIG_KERNELS
        + [
            {
                "name": "void at::native::(anonymous)::fused_adam_kernel<...>",
                "calls": 10,
                "total_us": 30_000.0,
            }
        ],
    )
    assert "optimizer" not in rules(fused)


# ---- low_utilization / batch_size / memory_capacity --------------------------------------------
def test_low_utilization_with_little_memory_room_suggests_a_larger_batch_with_low_confidence():
    # Utilization 30% (< 50%), kernels 30% of the step, no DataLoader wait: 70% idle; memory 70%
    # used, so memory_capacity's "room for a larger batch" does not apply.
    r = report(
        {"kernel": 30, "cpu_exec": 60},
        dataloaders=[LOADER],
        devices=[device(utilization_pct=30.0, sm_efficiency_pct=25.0, peak_allocated_bytes=56 * GiB)],
    )
    a = fired(r, "low_utilization")
    assert a["saving_bound_pct"] == 70.0 and a["confidence"] == "low"
    assert "DataLoader(..., batch_size=128) (now 64)" in a["fix"]
    assert "memory_capacity" not in rules(r)


def test_small_grids_fire_batch_size():
    # Busy GPU (80% utilization) but Est. SM efficiency 30%: while kernels run, 30/80 = 37.5% of the
    # SMs have work; kernels are 80% of the step, so filling the SMs saves at most 80 x 62.5% = 50%.
    r = report(
        {"kernel": 80, "cpu_exec": 10},
        dataloaders=[LOADER],
        devices=[device(utilization_pct=80.0, sm_efficiency_pct=30.0)],
        kernels=[{"name": "sgemm_32x32", "calls": 1000, "total_us": 800_000.0, "mean_blocks_per_sm": 0.4}],
    )
    a = fired(r, "batch_size")
    assert a["saving_bound_pct"] == 50.0 and a["evidence"]["mean_blocks_per_sm"] == 0.4


def test_low_sm_efficiency_with_large_grids_is_not_called_small_kernels():
    # The same SM efficiency, but the kernel table says 22 blocks per SM: the grids fill the GPU
    # (the low efficiency comes from kernels without block counts, e.g. collectives), so no rule
    # may tell the user their kernels are too small.
    r = report(
        {"kernel": 80, "cpu_exec": 10},
        dataloaders=[LOADER],
        devices=[device(utilization_pct=80.0, sm_efficiency_pct=30.0, peak_allocated_bytes=6 * GiB)],
        kernels=[{"name": "sgemm_128x128", "calls": 1000, "total_us": 800_000.0, "mean_blocks_per_sm": 22.0}],
    )
    assert not {"batch_size", "memory_capacity"} & set(rules(r))


def test_memory_above_90_percent_fires_memory_capacity():
    # 31 GiB peak of a 32 GiB V100 = 96.9% > 90%: a safety rule, bound 0 (it ranks last).
    r = clean(devices=[device(memory_total_bytes=32 * GiB, peak_allocated_bytes=31 * GiB)])
    a = fired(r, "memory_capacity")
    assert a["saving_bound_pct"] == 0.0 and a["evidence"]["peak_memory_pct"] == 96.88
    assert "checkpoint" in a["fix"]


def test_host_memory_rows_are_not_device_memory():
    # The clean run (60 of 80 GiB on the GPU: 75%) plus host rows of a live session: 120 GiB of
    # resident memory and a CPU allocator level of 79 GiB. Neither is device memory, so neither may
    # push the GPU's peak over 90% or stand in for its capacity.
    host_rows = [
        {
            "step": i,
            "device": -1,
            "peak_allocated_bytes": 79 * GiB,
            "peak_reserved_bytes": None,
            "capacity_bytes": None,
            "peak_rss_bytes": 120 * GiB,
        }
        for i in range(STEPS)
    ]
    assert "memory_capacity" not in rules(clean(memory=host_rows))


def test_memory_mostly_free_with_low_utilization_gives_the_batch_factor():
    # Peak 4 GiB of 80 GiB = 5%; 80% of capacity / 5% = 16 -> capped at 8x: batch 64 -> 512.
    r = report(
        {"kernel": 30, "cpu_exec": 60},
        dataloaders=[LOADER],
        devices=[device(utilization_pct=30.0, peak_allocated_bytes=4 * GiB)],
    )
    a = fired(r, "memory_capacity")
    assert a["evidence"]["batch_factor"] == 8 and "DataLoader(..., batch_size=512) (now 64)" in a["fix"]
    assert a["saving_bound_pct"] == 70.0
    assert "low_utilization" not in rules(r)  # the same finding is not reported twice


# ---- distributed --------------------------------------------------------------------------------
def test_two_gpus_in_one_process_fire_data_parallel():
    # Two devices ran kernels, no distributedInfo: nn.DataParallel. Mean utilization 37.5%, so
    # keeping both busy saves at most 62.5%.
    r = report(
        {"kernel": 40, "cpu_exec": 50},
        devices=[device(id=0, utilization_pct=40.0), device(id=1, utilization_pct=35.0)],
    )
    a = fired(r, "data_parallel")
    assert a["saving_bound_pct"] == 62.5 and "torchrun --nproc_per_node=2" in a["fix"]
    assert "data_parallel" not in rules(
        report(
            {"kernel": 40},
            devices=[device(id=0), device(id=1)],
            metadata={"distributedInfo": json.dumps({"backend": "nccl", "rank": 0, "world_size": 2})},
        )
    )


def test_gloo_on_gpus_fires_nccl_backend_and_exposed_communication_fires_communication():
    # distributedInfo (as the importer keeps it: a JSON string in metadata) says gloo, world size 2,
    # GPU kernels ran; communication is 12% of the step (> 10%), all of it exposed.
    r = clean(metadata={"distributedInfo": json.dumps({"backend": "gloo", "rank": 0, "world_size": 2})})
    r._data["average"].update(kernel_pct=80.0, communication_pct=12.0, communication_us=12_000.0)
    a = fired(r, "nccl_backend")
    assert a["saving_bound_pct"] == 12.0 and "backend='nccl'" in a["fix"]
    c = fired(r, "communication")
    assert c["saving_bound_pct"] == 12.0 and "no_sync" in c["fix"] and c["evidence"]["world_size"] == 2


@pytest.mark.parametrize("share, fires", [(10.0, False), (10.5, True)])
def test_communication_threshold_is_the_plugins_10_percent(share, fires):
    r = report(
        {"kernel": 60, "communication": share},
        devices=[device()],
        kernels=BIG_KERNELS,
        distributed={"backend": "nccl", "world_size": 8},
    )
    assert ("communication" in rules(r)) is fires


# ---- ranking, selection, JSON ---------------------------------------------------------------------
def test_advice_is_ranked_by_the_bound_and_every_item_has_the_documented_keys():
    r = report(
        {"kernel": 55.5, "dataloader": 33.4},
        devices=[
            device(
                compute_capability="7.0",
                utilization_pct=55.5,
                tensor_core_pct=0.0,
                tc_eligible_pct=68.0,
                memory_total_bytes=32 * GiB,
                peak_allocated_bytes=31 * GiB,
            )
        ],
    )
    items = r.advise()
    assert [a["rule"] for a in items] == ["mixed_precision", "dataloader", "memory_capacity"]
    bounds = [a["saving_bound_pct"] for a in items]
    assert bounds == sorted(bounds, reverse=True)
    for a in items:
        assert set(a) - {"change"} == {
            "rule",
            "title",
            "evidence",
            "saving_bound_pct",
            "confidence",
            "confidence_reason",
            "fix",
            "docs",
        }
        assert a["rule"] in RULE_IDS and a["confidence"] in ("high", "medium", "low")
        assert a["docs"] == f"docs/advice.md#{a['rule']}" and a["evidence"]["summary"]
    assert json.loads(r.to_json())["advice"] == items  # stored in the report's JSON
    assert [a["rule"] for a in r.advise(rules=["dataloader"])] == ["dataloader"]
    with pytest.raises(ValueError, match="unknown advice rule.*nope.*known: no_gpu_work"):
        advise(r.to_dict(), rules=["nope"])


def test_renderers_show_summary_numbers_fix_and_docs():
    r = report(
        {"kernel": 55.5, "dataloader": 33.4},
        devices=[
            device(compute_capability="7.0", utilization_pct=55.5, tensor_core_pct=0.0, tc_eligible_pct=68.0)
        ],
    )
    r.advise()
    text = r.to_text(width=200)
    assert "1. Matrix and convolution work runs in FP32" in text
    assert "evidence: 68% of kernel time is launched by tensor-core-eligible operators" in text
    assert "evidence: measured: tc_eligible_pct 68.0, tensor_core_pct 0.0" in text
    md = r.to_markdown()
    assert "(`mixed_precision`, up to 38% of the step, confidence high)" in md
    assert "Docs: docs/advice.md#mixed\\_precision" in md or "Docs: docs/advice.md#mixed_precision" in md
    html = r.to_html()
    assert "GradScaler" in html and "docs/advice.md#dataloader" in html
