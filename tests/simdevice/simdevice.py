"""The simulated device from Python: loads the stand-in driver libraries built by simbuild.py into
this process before gpuprof's first GPU start, so gpuprof's own dlopen("libcuda.so.1"),
dlopen("libcupti.so.13") and dlopen("libnvidia-ml.so.1") find them (the loader matches a library
already loaded by its soname), and exposes their control functions. Each process gets one
simulated device for its lifetime, as with a real driver: tests run each scenario in a fresh
interpreter (scenarios.py)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from simbuild import build

CUPTI_ACTIVITY_KIND_MEMCPY = 1
CUPTI_ACTIVITY_KIND_MEMSET = 2
CUPTI_ACTIVITY_KIND_RUNTIME = 5
CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10
CUPTI_ERROR_NOT_COMPATIBLE = 14
CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35

KERNEL, COPY, SET = 0, 1, 2

_STAT_FIELDS = (
    "kernels kernel_ns memcpys memcpy_ns memsets memset_ns api_records external_records "
    "dropped buffers_requested buffers_refused buffers_completed completed_on_worker "
    "completed_in_flush forced_flushes unforced_flushes in_flight subscribes subscribe_refusals "
    "pushes pops timestamp_calls zero_id_pushes api_filter_calls invalid_cbid_calls api_switched_off "
    "replayed complete_cpu_ns produced callback_enables finalizes"
).split()


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STAT_FIELDS]


class Replay(ctypes.Structure):
    """cupti_sim.c's simdev_replay_t: an API call and / or the device work it started, with its
    recorded times (timestamp-callback units) and properties."""

    _fields_ = [
        ("api_kind", ctypes.c_int),
        ("cbid", ctypes.c_uint32),
        ("api_start", ctypes.c_uint64),
        ("api_end", ctypes.c_uint64),
        ("what", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("start", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("correlation", ctypes.c_uint32),
        ("device", ctypes.c_uint32),
        ("stream", ctypes.c_uint32),
        ("grid", ctypes.c_int32 * 3),
        ("block", ctypes.c_int32 * 3),
        ("registers", ctypes.c_uint16),
        ("shared_mem", ctypes.c_int32),
        ("bytes", ctypes.c_uint64),
        ("copy_kind", ctypes.c_uint8),
        ("src_kind", ctypes.c_uint8),
        ("dst_kind", ctypes.c_uint8),
    ]


class CudaDevice(ctypes.Structure):
    """cuda_sim.c's simcuda_device_t: what the stand-in driver answers for one device."""

    _fields_ = [
        ("name", ctypes.c_char * 96),
        ("pci_bus_id", ctypes.c_char * 16),
        ("total_mem", ctypes.c_uint64),
    ] + [
        (n, ctypes.c_int)
        for n in (
            "major minor max_threads_per_block max_threads_per_sm regs_per_block regs_per_sm warp_size "
            "shared_per_block shared_per_sm shared_per_block_optin num_sms max_blocks_per_sm"
        ).split()
    ]


class SimDevice:
    def __init__(self, libdir: Path | None = None) -> None:
        self.libdir = Path(libdir or build())
        mode = ctypes.RTLD_GLOBAL
        self.cuda = ctypes.CDLL(str(self.libdir / "libcuda.so.1"), mode=mode)
        self.cupti = ctypes.CDLL(str(self.libdir / "libcupti.so.13"), mode=mode)
        self.nvml = ctypes.CDLL(str(self.libdir / "libnvidia-ml.so.1"), mode=mode)
        os.environ["GPUPROF_CUPTI"] = str(self.libdir / "libcupti.so.13")
        u64, c_int = ctypes.c_uint64, ctypes.c_int
        self.cupti.simdev_set_rule.argtypes = [c_int, u64, c_int, u64, c_int, u64]
        self.cupti.simdev_launch.argtypes = [c_int, ctypes.c_char_p, u64, u64, c_int, c_int]
        self.cupti.simdev_take_subscriber.argtypes = [c_int]
        self.cupti.simdev_refuse_kind.argtypes = [c_int, c_int]
        self.cupti.simdev_hold_completions.argtypes = [c_int]
        self.cupti.simdev_stats.argtypes = [ctypes.POINTER(_Stats)]
        self.cupti.simdev_record_size.restype = ctypes.c_size_t
        self.cupti.simdev_stats_size.restype = ctypes.c_size_t
        if self.cupti.simdev_stats_size() != ctypes.sizeof(_Stats):
            raise RuntimeError("simdevice.py's _STAT_FIELDS do not match cupti_sim.c's simdev_stats_t")
        self.cupti.simdev_replay.argtypes = [ctypes.POINTER(Replay)]
        self.cupti.simdev_cbid_count.restype = ctypes.c_uint32
        self.cupti.simdev_produce_start.argtypes = [u64, u64]
        self.cupti.simdev_produce_join.argtypes = [ctypes.POINTER(u64), ctypes.POINTER(u64)]
        self.cupti.cuptiGetCallbackName.argtypes = [c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)]
        self.cuda.simcuda_set_devices.argtypes = [c_int, ctypes.POINTER(CudaDevice)]
        self.nvml.simnvml_set.argtypes = [ctypes.c_uint] * 4 + [c_int]
        self.nvml.simnvml_set_energy_delay.argtypes = [ctypes.c_uint]
        self.nvml.simnvml_reads.restype = u64
        self.nvml.simnvml_set_devices.argtypes = [c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.nvml.simnvml_set_device.argtypes = [c_int] + [ctypes.c_uint] * 4
        self.cupti.simdev_set_launch_device.argtypes = [ctypes.c_uint32]
        self.cupti.simdev_graph_launch.argtypes = [ctypes.c_uint32, ctypes.c_char_p, c_int, u64, c_int]

    def set_rule(self, kernels_per_op=1, kernel_ns=0, copy_every=0, copy_ns=0, set_every=0, set_ns=0) -> None:
        """At each external-id push (each host operator gpuprof's hooks see): `kernels_per_op`
        kernels of `kernel_ns`, one 4 KiB host-to-device copy every `copy_every` operators, one
        1 KiB memset every `set_every`."""
        self.cupti.simdev_set_rule(kernels_per_op, kernel_ns, copy_every, copy_ns, set_every, set_ns)

    def launch(
        self, what=KERNEL, name: str | None = None, device_ns=1000, nbytes=0, in_flight=False, count=1
    ):
        self.cupti.simdev_launch(
            what, name.encode() if name else None, device_ns, nbytes, int(in_flight), count
        )

    def graph_launch(self, graph_id: int, nodes: int, node_ns: int, name: str | None = None, count=1) -> None:
        """Replay a captured CUDA graph of `nodes` kernels (`node_ns` each, all named `name`)
        `count` times: one cudaGraphLaunch call a replay, its kernels carrying `graph_id`."""
        self.cupti.simdev_graph_launch(graph_id, name.encode() if name else None, nodes, node_ns, count)

    def take_subscriber(self, taken=True) -> None:
        self.cupti.simdev_take_subscriber(int(taken))

    def refuse_kind(self, kind: int, result: int) -> None:
        self.cupti.simdev_refuse_kind(kind, result)

    def hold_completions(self, hold: bool) -> None:
        self.cupti.simdev_hold_completions(int(hold))

    def record_size(self, kind: int) -> int:
        """Bytes one record of `kind` takes in a buffer (the CUDA 13 struct, 8-byte aligned)."""
        return (int(self.cupti.simdev_record_size(kind)) + 7) & ~7

    def kind_enabled(self, kind: int) -> bool:
        return bool(self.cupti.simdev_kind_enabled(kind))

    def stats(self) -> dict:
        s = _Stats()
        self.cupti.simdev_stats(ctypes.byref(s))
        return {n: int(getattr(s, n)) for n in _STAT_FIELDS}

    def set_devices(self, devices: list[dict]) -> None:
        """The devices the stand-in driver presents (before the profiler's first GPU start), each a
        dict of `_core.trace_devices` keys (id 0..n-1 in order) and an optional `pci_bus_id`."""
        arr = (CudaDevice * len(devices))()
        for i, d in enumerate(devices):
            arr[i] = CudaDevice(
                d["name"].encode()[:95],
                d.get("pci_bus_id", f"0000:{0x19 + i:02x}:00.0").encode(),
                int(d["total_global_mem"]),
                *(
                    int(d[k])
                    for k in (
                        "compute_major compute_minor max_threads_per_block max_threads_per_sm regs_per_block "
                        "regs_per_sm warp_size shared_mem_per_block shared_mem_per_sm "
                        "shared_mem_per_block_optin num_sms max_blocks_per_sm"
                    ).split()
                ),
            )
        if self.cuda.simcuda_set_devices(len(devices), arr) != 0:
            raise ValueError(f"the stand-in driver takes 1 to 16 devices, not {len(devices)}")

    def api_ids(self, domain: int) -> dict:
        """{API name without its version suffix: callback id} of a CUPTI callback domain (1: driver,
        2: runtime), as cuptiGetCallbackName names them; the first id of a name wins."""
        out: dict = {}
        name = ctypes.c_char_p()
        for cbid in range(int(self.cupti.simdev_cbid_count(domain))):
            if self.cupti.cuptiGetCallbackName(domain, cbid, ctypes.byref(name)) == 0 and name.value:
                out.setdefault(name.value.decode().rsplit("_v", 1)[0], cbid)
        return out

    def produce(self, rate_per_s: int, seconds: float) -> None:
        """Start the device's own producer thread: `rate_per_s` kernel records a second (each as
        CUPTI would make it) for `seconds`."""
        if self.cupti.simdev_produce_start(int(rate_per_s), int(seconds * 1e9)) != 0:
            raise RuntimeError("the stand-in's producer is already running (or rate 0)")

    def produce_join(self) -> dict:
        """Wait for the producer: its wall time and the most it fell behind its schedule."""
        elapsed, lag = ctypes.c_uint64(), ctypes.c_uint64()
        self.cupti.simdev_produce_join(ctypes.byref(elapsed), ctypes.byref(lag))
        return {"elapsed_s": elapsed.value / 1e9, "max_lag_ms": lag.value / 1e6}

    def replay(self, w: Replay) -> None:
        self.cupti.simdev_replay(ctypes.byref(w))

    def set_nvml(self, util_gpu=87, util_mem=41, power_mw=350000, sm_mhz=1980, energy=True) -> None:
        self.nvml.simnvml_set(util_gpu, util_mem, power_mw, sm_mhz, int(energy))

    def set_energy_read_delay(self, us: int) -> None:
        """How long each read of NVML's total-energy counter takes (the value is read halfway)."""
        self.nvml.simnvml_set_energy_delay(us)

    def set_nvml_devices(self, pci_bus_ids: list[str]) -> None:
        """The devices NVML lists, in its index order, by PCI bus id (before gpuprof's first start)."""
        arr = (ctypes.c_char_p * len(pci_bus_ids))(*(p.encode() for p in pci_bus_ids))
        if self.nvml.simnvml_set_devices(len(pci_bus_ids), arr) != 0:
            raise RuntimeError("NVML's device list is set before nvmlInit, with 1 to 8 devices")

    def set_nvml_device(self, index: int, util_gpu: int, util_mem: int, power_mw: int, sm_mhz: int) -> None:
        """One NVML device's readings, by NVML index."""
        self.nvml.simnvml_set_device(index, util_gpu, util_mem, power_mw, sm_mhz)

    def set_launch_device(self, device: int) -> None:
        """Launches from now on run on `device` (cudaSetDevice)."""
        self.cupti.simdev_set_launch_device(device)

    def nvml_reads(self) -> int:
        return int(self.nvml.simnvml_reads())
