"""Scenarios on the simulated device, one per interpreter (a driver, CUPTI and NVML are loaded once
per process, as on a real machine): `python3 scenarios.py NAME OUT.json` runs a real torch CPU
training loop under gpuprof.profile with the real CUPTI collector and NVML sampler attached to the
stand-ins, and writes the report (Report.to_dict()), the stand-in's own counts and what the
scenario observed. test_simdevice.py states what each must show."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simdevice import (  # noqa: E402
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ERROR_INSUFFICIENT_PRIVILEGES,
    CUPTI_ERROR_NOT_COMPATIBLE,
    KERNEL,
    SimDevice,
)

KERNEL_NS = 2_000  # short beside a CPU operator: the simulated device never falls behind the host
COPY_NS = 1_500
SET_NS = 700
STEPS = 4
ENERGY_READ_US = 30_000


def _loop(prof, steps: int = STEPS, between=None) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 8)
    for i in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if between is not None:
            between(i)
        prof.step()


def _profile(**kw):
    import gpuprof

    return gpuprof.profile(**kw)


def live(dev: SimDevice) -> dict:
    """Every operator launches one kernel; every 7th a copy, every 11th a memset."""
    dev.set_rule(
        kernels_per_op=1, kernel_ns=KERNEL_NS, copy_every=7, copy_ns=COPY_NS, set_every=11, set_ns=SET_NS
    )
    with _profile() as prof:
        _loop(prof)
    dev.set_rule(0)
    return {"report": prof.report().to_dict()}


def slow_energy_reads(dev: SimDevice) -> dict:
    """Each read of the energy counter takes ENERGY_READ_US (an H200's took 2.2-2.8 ms, up to 16):
    the time each prof.step() call takes on the training thread."""
    import torch

    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)
    dev.set_energy_read_delay(ENERGY_READ_US)
    step_call_ms = []
    model = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    with _profile() as prof:
        for _ in range(8):
            model(x).sum().backward()
            time.sleep(0.005)
            t = time.perf_counter()
            prof.step()
            step_call_ms.append((time.perf_counter() - t) * 1e3)
    dev.set_energy_read_delay(0)
    dev.set_rule(0)
    return {"report": prof.report().to_dict(), "step_call_ms": step_call_ms}


def in_flight(dev: SimDevice) -> dict:
    """Work still running on the device when the span ends: the forced flush hands it over with no
    times (CUPTI's documented behaviour), and the report counts it."""

    def launch(i: int) -> None:
        dev.launch(KERNEL, "_Z8finishedv", device_ns=5_000, count=3)
        dev.launch(KERNEL, "_Z8unfinishedv", in_flight=True, count=2)

    with _profile() as prof:
        _loop(prof, between=launch)
    return {"report": prof.report().to_dict()}


def starved(dev: SimDevice) -> dict:
    """More records than gpuprof's buffers hold while none is handed back: CUPTI asks for another,
    gpuprof refuses (its pool is bounded), and CUPTI drops records and counts them."""
    import gpuprof.collect.gpu as g

    real_start = g._core.gpu_start
    # The smallest pool gpuprof accepts: 2 buffers of 64 KiB (the profile's defaults hold 128 MiB).
    g._core.gpu_start = lambda dirs, _b, _n, *rest: real_start(dirs, 64 << 10, 2, *rest)
    per_launch = dev.record_size(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) + dev.record_size(
        CUPTI_ACTIVITY_KIND_RUNTIME
    )  # a kernel and its runtime call
    launches = 3 * (64 << 10) // per_launch + 100  # more than two buffers hold

    def burst(i: int) -> None:
        if i == 1:
            dev.hold_completions(True)
            dev.launch(KERNEL, "_Z5burstv", device_ns=100, count=launches)
            dev.hold_completions(False)

    try:
        with _profile() as prof:
            _loop(prof, between=burst)
    finally:
        g._core.gpu_start = real_start
    return {"report": prof.report().to_dict(), "launches": launches}


def kind_refused(dev: SimDevice) -> dict:
    """CUPTI refuses copy records (optional: kernels continue, the notes say why), then, in a
    second session, kernel records (required: host-only, the report says why), then in a third
    for want of privileges."""
    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS, copy_every=5, copy_ns=COPY_NS)
    dev.refuse_kind(CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ERROR_NOT_COMPATIBLE)
    with _profile() as prof:
        _loop(prof)
    first = prof.report().to_dict()
    dev.refuse_kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ERROR_NOT_COMPATIBLE)
    with _profile() as prof:
        _loop(prof)
    second = prof.report().to_dict()
    # A machine where profiling is restricted to admin users refuses the kernel kind so.
    dev.refuse_kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    with _profile() as prof:
        _loop(prof, steps=1)
    return {"report": first, "second": second, "third": prof.report().to_dict()}


def subscriber_taken(dev: SimDevice) -> dict:
    """Another profiler (Nsight Systems, torch.profiler) holds CUPTI's one subscriber slot: gpuprof
    profiles host-side only and says why; once it is given back, the next session gets the GPU."""
    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)
    dev.take_subscriber(True)
    with _profile() as prof:
        _loop(prof)
    first = prof.report().to_dict()
    dev.take_subscriber(False)
    with _profile() as prof:
        _loop(prof)
    return {"report": first, "second": prof.report().to_dict()}


def records_rate(dev: SimDevice) -> dict:
    """Decode cost: a million kernel records through the collector in one span."""
    n = int(os.environ.get("SIMDEVICE_RATE_RECORDS", "1000000"))
    out = {}

    def burst(i: int) -> None:
        if i == 1:
            import gpuprof._core as core

            t = time.perf_counter()
            dev.launch(KERNEL, "_Z4ratev", device_ns=10, count=n // 2)  # a runtime record + a kernel each
            out["emit_s"] = time.perf_counter() - t
            core.gpu_flush()  # forced: returns once every buffer is decoded into the staging trace
            out["emit_and_decode_s"] = time.perf_counter() - t
            out["records_per_s"] = n / out["emit_and_decode_s"]

    with _profile(max_events=4 * n) as prof:
        _loop(prof, steps=3, between=burst)
    t = time.perf_counter()
    report = prof.report().to_dict()
    out["report_s"] = time.perf_counter() - t
    out["report"] = {k: report[k] for k in ("metadata", "counts", "kernels")}
    return out


def forked_workers(dev: SimDevice) -> dict:
    """A DataLoader with two forked workers, iterated inside the span."""
    import torch

    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)
    data = torch.utils.data.TensorDataset(torch.randn(STEPS * 8, 64), torch.randn(STEPS * 8, 8))
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="fork")
    model = torch.nn.Linear(64, 8)
    batches = 0
    with _profile() as prof:
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            batches += 1
            prof.step()
    return {"report": prof.report().to_dict(), "batches": batches}


GRAPH_ID, GRAPH_NODES, GRAPH_REPLAYS, GRAPH_NODE_NS = 7, 5, 3, 3_000


def cuda_graphs(dev: SimDevice) -> dict:
    """A captured CUDA graph of GRAPH_NODES kernels replayed GRAPH_REPLAYS times a step (one
    cudaGraphLaunch each, its kernels carrying the graph's id) inside the range "graph_replay",
    itself inside "outer", beside the operators' own kernels."""
    import gpuprof

    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)

    def replay(i: int) -> None:
        with gpuprof.range("outer"), gpuprof.range("graph_replay"):
            dev.graph_launch(
                GRAPH_ID, GRAPH_NODES, GRAPH_NODE_NS, name="_Z10graph_nodev", count=GRAPH_REPLAYS
            )

    with _profile() as prof:
        _loop(prof, between=replay)
    dev.set_rule(0)
    return {"report": prof.report().to_dict()}


H100 = {
    "name": "NVIDIA H100 80GB HBM3", "total_global_mem": 85520809984, "compute_major": 9, "compute_minor": 0,
    "max_threads_per_block": 1024, "max_threads_per_sm": 2048, "regs_per_block": 65536, "regs_per_sm": 65536,
    "warp_size": 32, "shared_mem_per_block": 49152, "shared_mem_per_sm": 233472,
    "shared_mem_per_block_optin": 232448, "num_sms": 132, "max_blocks_per_sm": 32,
}  # fmt: skip
MULTI_PCI = ["0000:19:00.0", "0000:3b:00.0"]  # CUDA ordinals 0 and 1
MULTI_NVML = [(35, 20, 150_000, 1410), (90, 60, 600_000, 1980)]  # by CUDA ordinal: util, mem, mW, MHz
MULTI_KERNELS = [(3, 5_000), (2, 7_000)]  # by CUDA ordinal: kernels per step, ns each


def multi_gpu(dev: SimDevice) -> dict:
    """Two H100s at different PCI bus ids, listed by NVML in the other order (NVML's index order
    need not be CUDA's: the sampler must find each by its bus id). Each step launches 3 kernels of
    5 us on GPU 0 and 2 of 7 us on GPU 1, each named for its device; NVML serves other readings for
    each."""
    dev.set_devices([dict(H100, pci_bus_id=p) for p in MULTI_PCI])
    dev.set_nvml_devices(list(reversed(MULTI_PCI)))
    for ordinal, readings in enumerate(MULTI_NVML):
        dev.set_nvml_device(len(MULTI_PCI) - 1 - ordinal, *readings)

    def launch(i: int) -> None:
        for device, (count, ns) in enumerate(MULTI_KERNELS):
            dev.set_launch_device(device)
            dev.launch(KERNEL, f"_Z4gpu{device}v", device_ns=ns, count=count)
        dev.set_launch_device(0)

    with _profile() as prof:
        _loop(prof, between=launch)
        time.sleep(0.25)  # at least two NVML samples of each device in the span (every 100 ms)
        prof.step()
    return {"report": prof.report().to_dict()}


class OtherClient:
    """Another CUPTI client in the process, through CUPTI's public API as torch.profiler's Kineto
    uses it: it subscribes, registers its own buffer callbacks (CUPTI's registrations are
    process-wide: they replace gpuprof's), enables kernel records, and at the end flushes and either
    detaches CUPTI (cuptiFinalize: Kineto with TEARDOWN_CUPTI=1) or keeps its subscription (Kineto's
    default)."""

    BUFFER = 1 << 20

    def __init__(self, dev: SimDevice) -> None:
        import ctypes

        self.c, self.cupti = ctypes, dev.cupti
        self.buffers: dict = {}
        self.kernels: list = []
        self.subscriber = ctypes.c_void_p()
        request_t = ctypes.CFUNCTYPE(
            None,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        )
        complete_t = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
        )
        self._request, self._complete = request_t(self.request), complete_t(self.complete)

    def request(self, buf, size, max_records) -> None:
        b = self.c.create_string_buffer(self.BUFFER)
        self.buffers[self.c.addressof(b)] = b
        buf[0], size[0], max_records[0] = self.c.addressof(b), self.BUFFER, 0

    def complete(self, ctx, stream, buf, size, valid) -> None:
        c = self.c
        rec = c.c_void_p()
        get = self.cupti.cuptiActivityGetNextRecord
        get.argtypes = [c.c_void_p, c.c_size_t, c.POINTER(c.c_void_p)]
        while get(buf, valid, c.byref(rec)) == 0:
            kind = c.cast(rec, c.POINTER(c.c_int)).contents.value
            if kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
                self.kernels.append(rec.value)
        self.buffers.pop(buf, None)

    def start(self) -> int:
        r = self.cupti.cuptiSubscribe(self.c.byref(self.subscriber), None, None)
        if r == 0:
            self.cupti.cuptiActivityRegisterCallbacks(self._request, self._complete)
            self.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
        return r

    def stop(self, finalize: bool) -> None:
        self.cupti.cuptiActivityFlushAll(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
        if finalize:
            self.cupti.cuptiFinalize()


def other_client_between(dev: SimDevice) -> dict:
    """A gpuprof session, another CUPTI client's (torch.profiler's) session that gives CUPTI back
    with cuptiFinalize, a second gpuprof session, then another client that keeps its subscription,
    and a third gpuprof session."""
    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)
    reports = []
    with _profile() as prof:
        _loop(prof)
    reports.append(prof.report().to_dict())
    first = OtherClient(dev)
    subscribed = [first.start()]
    dev.launch(KERNEL, "_Z6othersv", device_ns=3_000, count=50)  # the other client's own work
    first.stop(finalize=True)
    with _profile() as prof:
        _loop(prof)
    reports.append(prof.report().to_dict())
    second = OtherClient(dev)
    subscribed.append(second.start())
    second.stop(finalize=False)
    with _profile() as prof:
        _loop(prof)
    reports.append(prof.report().to_dict())
    return {
        "report": reports[0],
        "second": reports[1],
        "third": reports[2],
        "other_subscribed": subscribed,
        "other_kernels": len(first.kernels),
    }


def exit_inside(dev: SimDevice) -> dict:
    """sys.exit() inside an open span, work still being launched: written out first, then exit."""
    dev.set_rule(kernels_per_op=1, kernel_ns=KERNEL_NS)
    prof = _profile()
    prof.start()
    _loop(prof, steps=2)
    dev.launch(KERNEL, "_Z7at_exitv", device_ns=1000, count=1000)
    out = {"stats": dev.stats(), "nvml_reads": dev.nvml_reads(), "seconds": 0.0}
    Path(sys.argv[2]).write_text(json.dumps(out))
    sys.exit(0)


SCENARIOS = {
    f.__name__: f
    for f in (
        live,
        in_flight,
        slow_energy_reads,
        starved,
        kind_refused,
        subscriber_taken,
        records_rate,
        forked_workers,
        exit_inside,
        multi_gpu,
        other_client_between,
        cuda_graphs,
    )
}


def main() -> None:
    name, out_path = sys.argv[1], sys.argv[2]
    dev = SimDevice()
    import torch  # noqa: F401  (torch before gpuprof.profile, as in a user's script)

    t = time.perf_counter()
    result = SCENARIOS[name](dev)
    result["seconds"] = time.perf_counter() - t
    result["stats"] = dev.stats()
    result["nvml_reads"] = dev.nvml_reads()
    Path(out_path).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
