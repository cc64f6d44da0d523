"""One GPU's utilization, memory in use and power draw, read from NVML through ctypes, for watching
a run (session/watch.py): a handful of NVML calls once a second, on a thread of their own
(NvmlPoller), no CUPTI. The live session's NVML sampling is the C++ collector's (gpu.py)."""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Optional

log = logging.getLogger("gpuprof")


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class NvmlReader:
    """``read()`` -> {"gpu_util_pct", "gpu_mem_bytes", "gpu_power_w"} for one device (a field NVML
    does not give is None), or None when NVML cannot be loaded or the device not opened; ``why``
    then says what went wrong."""

    def __init__(self, device: int, pci_bus_id: str = "") -> None:
        """``device``: NVML's index, used when ``pci_bus_id`` ("0000:3b:00.0", which names the
        same GPU whatever CUDA_VISIBLE_DEVICES hides) is not given or not found."""
        self.device = device
        self.why = ""
        self._lib = None
        self._handle = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                self.why = "nvmlInit failed"
                return
            handle = ctypes.c_void_p()
            found = bool(pci_bus_id) and (
                lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode("ascii"), ctypes.byref(handle)) == 0
            )
            if (
                not found
                and lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(device), ctypes.byref(handle)) != 0
            ):
                self.why = f"NVML cannot open GPU {device}"
                return
            self._lib, self._handle = lib, handle
        except (OSError, AttributeError) as e:
            self.why = f"NVML not loadable: {e}"

    @property
    def ok(self) -> bool:
        return self._handle is not None

    def read(self) -> Optional[dict]:
        if self._handle is None:
            return None
        lib, h = self._lib, self._handle
        util, mem, power = _Utilization(), _Memory(), ctypes.c_uint()
        return {
            "gpu_util_pct": util.gpu
            if lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0
            else None,
            "gpu_mem_bytes": mem.used if lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0 else None,
            "gpu_power_w": power.value / 1000.0
            if lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(power)) == 0
            else None,
        }

    def close(self) -> None:
        if self._lib is not None:
            try:
                self._lib.nvmlShutdown()
            except Exception:
                pass
            self._lib = self._handle = None


class NvmlPoller:
    """NVML's utilization, memory and power of one GPU, read every ``every_s`` on a thread of its
    own, never on the training thread: one NVML call took milliseconds on an H200 (2.2-2.8 ms for
    the energy counter, up to 16). ``latest``: the last reading as (gpu_util_pct, gpu_mem_bytes,
    gpu_power_w), None before the first."""

    def __init__(self, device: int, bus: str, every_s: float) -> None:
        self.latest: Optional[tuple] = None
        self._device, self._bus, self._every_s = device, bus, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuprof-watch-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reader = NvmlReader(self._device, self._bus)
        if not reader.ok:
            log.warning("gpuprof watch: no GPU utilization or power (%s)", reader.why)
            return
        try:
            while True:
                reading = reader.read()
                if reading is not None:
                    self.latest = (reading["gpu_util_pct"], reading["gpu_mem_bytes"], reading["gpu_power_w"])
                if self._stop.wait(self._every_s):
                    return
        except Exception as e:  # a failing NVML must not end the run: the GPU fields stay as they were
            log.warning("gpuprof watch: reading NVML failed (%s); GPU utilization and power stop", e)
        finally:
            reader.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
