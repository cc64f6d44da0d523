"""The memory rules on hand-built report dicts (the memory view's sections as the analysis writes
them): each scenario states its numbers, and the rule's evidence and fix are worked out here."""

from __future__ import annotations

from test_advice_scenarios import LOADER, GiB, device, fired, report, rules

from gpuprof.cli import main

MiB = 1 << 20


def _peak(bytes_, reserved=None, step=3):
    return {
        "t_us": 1.0,
        "step": step,
        "bytes": bytes_,
        "reserved_bytes": reserved,
        "top_ops": [],
        "top_modules": [],
    }


def test_batch_headroom_from_the_activation_bytes_per_sample():
    # Peak 20 GiB of 80: 4 GiB of parameters, gradients and Adam state (1 + 1 + 2) and 16 GiB of
    # activations at batch 64 (256 MiB a sample). 80% of 80 GiB = 64 GiB: (64 - 4) GiB / 256 MiB =
    # 240 samples = 3.75x the batch -> 3x (the capacity-only estimate, 0.8 / 25% = 3.2, agrees).
    composition = {
        "parameters": GiB,
        "gradients": GiB,
        "optimizer_state": 2 * GiB,
        "activations": 16 * GiB,
        "temporary": 0,
        "unknown": 0,
    }
    r = report(
        {"kernel": 30, "cpu_exec": 60},
        dataloaders=[LOADER],
        devices=[device(utilization_pct=30.0, peak_allocated_bytes=20 * GiB)],
        memory_peak={"0": _peak(20 * GiB)},
        memory_composition={"0": composition},
    )
    a = fired(r, "memory_capacity")
    assert a["evidence"]["per_sample_activation_bytes"] == 256 * MiB
    assert a["evidence"]["batch_that_fits_80pct"] == 240
    assert a["evidence"]["batch_factor"] == 3 and "batch_size=192) (now 64)" in a["fix"]
    assert "256.0 MiB a sample" in a["fix"]


def test_fragmentation_near_capacity_fires_with_expandable_segments():
    # At the peak 50 GiB allocated in 72 GiB reserved of 80: 22 GiB (31% of reserved) cached but
    # unallocated, reserved at 90% of the device.
    r = report({"kernel": 90}, devices=[device()], memory_peak={"0": _peak(50 * GiB, 72 * GiB)})
    a = fired(r, "memory_fragmentation")
    assert a["evidence"]["reserved_unallocated_bytes"] == 22 * GiB
    assert "expandable_segments:True" in a["fix"] and a["saving_bound_pct"] == 0.0
    # The same gap far from capacity (24 of 80 GiB reserved), or a small one near it: quiet.
    assert "memory_fragmentation" not in rules(
        report({"kernel": 90}, devices=[device()], memory_peak={"0": _peak(2 * GiB, 24 * GiB)})
    )
    assert "memory_fragmentation" not in rules(
        report({"kernel": 90}, devices=[device()], memory_peak={"0": _peak(70 * GiB, 72 * GiB)})
    )


def test_memory_leak_states_the_rate_and_the_steps_left():
    # GPU 0's level at step ends rises 200 MB a step; peak 60 GiB of 80: (80 - 60) GiB / 200 MB =
    # 107 steps until the device is full.
    growth = {
        "mb_per_step": 200.0,
        "bytes_per_step": 200e6,
        "flagged": True,
        "steps": [1, 2, 3, 4, 5],
        "end_bytes": [40 * GiB + int(i * 200e6) for i in range(5)],
        "rising_steps": 4,
        "steps_counted": 4,
        "ops": [{"name": "aten::cat", "bytes_per_step": 200e6, "count": 4}],
        "modules": [],
    }
    r = report(
        {"kernel": 90}, devices=[device()], memory_peak={"0": _peak(60 * GiB)}, memory_growth={"0": growth}
    )
    a = fired(r, "memory_leak")
    assert a["evidence"]["steps_to_full"] == round(20 * GiB / 200e6) == 107
    assert a["evidence"]["top_op"] == "aten::cat" and "aten::cat" in a["evidence"]["summary"]
    assert "tensors the named operators make" in a["fix"]  # not a loss: the general fix
    assert "memory_leak" not in rules(
        report({"kernel": 90}, devices=[device()], memory_growth={"0": {**growth, "flagged": False}})
    )


def test_peak_memory_pct_budget(tmp_path):
    # 60 GiB of 80 at the peak: 75%.
    r = report({"kernel": 90}, devices=[device()], memory_peak={"0": _peak(60 * GiB)})
    path = tmp_path / "r.json"
    r.to_json(path)
    assert main(["check", str(path), "--max", "peak_memory_pct=80"]) == 0
    assert main(["check", str(path), "--max", "peak_memory_pct=70"]) == 1
    # A report without a memory view says what to do.
    bare = report({"kernel": 90}, devices=[device()])
    bare.to_json(tmp_path / "bare.json")
    assert main(["check", str(tmp_path / "bare.json"), "--max", "peak_memory_pct=80"]) == 2
