"""Energy per step on a real GPU (docs/metrics.md, "Energy"): gpuprof's `steps[].energy_j` against
NVML's total-energy counter read directly (ctypes on libnvidia-ml) at the same step boundaries, over
a busy matmul loop. Both read the same counter, but not at the same moment: the direct reading is
taken on the training thread at the boundary, gpuprof's by its NVML thread just after (it is asked
for, not waited for), and the counter advances in updates (on an H200 it stayed unchanged for up to
75 ms, then jumped). So at every boundary the energy so far (the sum of the steps before it) must
agree within one update and the sampler's delay, taken as the mean power times 0.15 s (the whole
span's energy too, at the last boundary); each step, the difference of two boundaries, within twice
that.

With $GPUPROF_GPU_FIGURES set (tests/gpu/run_on_gpu.sh sets it), the figures go to energy.json
there: per-step joules both ways, the power-samples integration of the same steps beside the
counter, and the cost of one boundary reading."""

import ctypes
import json
import os
import time

import pytest

import gpuprof
from gpuprof import _core_testing as builders
from gpuprof._native import _core

pytestmark = pytest.mark.gpu

STEPS = 8
STEP_S = 0.3


class _Nvml:
    """The one NVML call this test needs, straight from the driver's library."""

    def __init__(self, torch, device: int):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            pytest.skip(f"libnvidia-ml.so.1 cannot be loaded: {e}")
        assert self.lib.nvmlInit_v2() == 0
        self.handle = ctypes.c_void_p()
        props = torch.cuda.get_device_properties(device)
        bus = getattr(props, "pci_bus_id", None)
        found = -1
        if bus is not None:
            pci = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0".encode()
            found = self.lib.nvmlDeviceGetHandleByPciBusId_v2(pci, ctypes.byref(self.handle))
        if found != 0:
            assert self.lib.nvmlDeviceGetHandleByIndex_v2(device, ctypes.byref(self.handle)) == 0
        if not hasattr(self.lib, "nvmlDeviceGetTotalEnergyConsumption"):
            pytest.skip("this driver's NVML has no nvmlDeviceGetTotalEnergyConsumption")
        if self.energy_mj() is None:
            pytest.skip("this GPU has no NVML energy counter (older than Volta): nothing to compare with")

    def energy_mj(self):
        mj = ctypes.c_ulonglong()
        r = self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(mj))
        return mj.value if r == 0 else None


def _busy_step(torch, a, b):
    """About STEP_S of back-to-back matmuls, finished on the device before the step ends."""
    start = time.perf_counter()
    while time.perf_counter() - start < STEP_S:
        for _ in range(8):
            a @ b
        torch.cuda.synchronize()


def test_energy_per_step_matches_nvml_read_directly(cuda):
    torch = cuda
    device = torch.cuda.current_device()
    nvml = _Nvml(torch, device)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    _busy_step(torch, a, b)  # clocks up before the first step
    direct = []
    with gpuprof.profile(batch_size=64) as prof:
        direct.append(nvml.energy_mj())  # the first step starts here (after GPU collection started)
        for _ in range(STEPS):
            _busy_step(torch, a, b)
            direct.append(nvml.energy_mj())  # then gpuprof's own reading, inside prof.step()
            prof.step()
    report = prof.report()
    data = report.to_dict()
    assert data["metadata"].get("gpu_collection", "").startswith("on"), data["metadata"]
    assert "energy" in data, f"no energy table: {data['metadata'].get('gpu_samples')}"
    (row,) = [r for r in data["energy"] if r["device"] == device]
    assert row["method"] == "counter", row
    steps = report.steps
    assert len(steps) == STEPS
    nvml_j = [(b - a) / 1000.0 for a, b in zip(direct, direct[1:])]
    ours = [s["energy_j"] for s in steps]
    one_update_j = report.average["mean_power_w"] * 0.15
    so_far_ours = so_far_nvml = 0.0
    for k, (mine, theirs) in enumerate(zip(ours, nvml_j)):
        so_far_ours, so_far_nvml = so_far_ours + mine, so_far_nvml + theirs
        assert so_far_ours == pytest.approx(so_far_nvml, abs=one_update_j), (k, ours, nvml_j)
        assert mine == pytest.approx(theirs, abs=2 * one_update_j), (k, ours, nvml_j)
    assert report.average["energy_per_sample_j"] == pytest.approx(report.average["energy_j"] / 64)
    for s in steps:  # a busy GPU draws more than nothing and less than a kilowatt
        assert 10.0 < s["mean_power_w"] < 1500.0, s

    # The same steps from the power samples alone (the rule for GPUs without the counter), beside
    # the counter: a figure, not a pass/fail (NVML's power reading may be a one-second average).
    power_only = _core.Trace()
    for s in steps:
        power_only.add_event("step", f"ProfilerStep#{s['step']}", s["start_ns"], s["end_ns"] - s["start_ns"])
    for g in report.gpu_samples:
        if g["device"] == device and g["power_w"] is not None:
            builders.add_gpu_sample(
                power_only, g["ts_ns"], device=device, power_mw=int(round(g["power_w"] * 1000))
            )
    integrated = _core.step_energy(power_only, [(s["start_ns"], s["end_ns"]) for s in steps])
    trapezoid_j = [step[0] for step in integrated["steps"]]

    # What one boundary reading costs on the training thread (one NVML call per device).
    with gpuprof.profile():
        t0 = time.perf_counter()
        for _ in range(200):
            _core.gpu_sample_energy()
        read_us = (time.perf_counter() - t0) / 200 * 1e6

    figures = {
        "device": torch.cuda.get_device_name(device),
        "steps": [
            {"gpuprof_j": mine, "nvml_direct_j": theirs, "power_samples_j": trap, "dur_us": s["total_us"]}
            for mine, theirs, trap, s in zip(ours, nvml_j, trapezoid_j, steps)
        ],
        "sum_gpuprof_j": sum(ours),
        "sum_nvml_direct_j": sum(nvml_j),
        "sum_power_samples_j": sum(j for j in trapezoid_j if j is not None),
        "mean_power_w": report.average["mean_power_w"],
        "boundary_read_us": read_us,
        "gpu_energy": data["metadata"].get("gpu_energy"),
    }
    out = os.environ.get("GPUPROF_GPU_FIGURES")
    if out:
        with open(os.path.join(out, "energy.json"), "w") as f:
            json.dump(figures, f, indent=2)
    print(json.dumps(figures, indent=2))
