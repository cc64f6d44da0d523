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
    "pushes pops timestamp_calls zero_id_pushes api_filter_calls invalid_cbid_calls"
).split()


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in _STAT_FIELDS]


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
        self.nvml.simnvml_set.argtypes = [ctypes.c_uint] * 4 + [c_int]
        self.nvml.simnvml_reads.restype = u64

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

    def set_nvml(self, util_gpu=87, util_mem=41, power_mw=350000, sm_mhz=1980, energy=True) -> None:
        self.nvml.simnvml_set(util_gpu, util_mem, power_mw, sm_mhz, int(energy))

    def nvml_reads(self) -> int:
        return int(self.nvml.simnvml_reads())
