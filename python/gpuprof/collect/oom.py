"""What gpuprof reads when an out-of-memory error ends a profiled block: the error's own numbers, the
allocator's statistics and the tensors the models and optimizers hold at that moment.

torch raises ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` is the same class) from its
CUDA caching allocator (and other device allocators) with a message that states the request and the
device's state ("Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which
1.19 GiB is free. ... Of the allocated memory 75.1 GiB is allocated by PyTorch, and 1.3 GiB is
reserved by PyTorch but unallocated."); its CPU allocator raises a RuntimeError ("DefaultCPUAllocator:
can't allocate memory: you tried to allocate 1125899906842624 bytes"). Both are read here; the
error itself is never changed and always raised again by the caller.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Optional

log = logging.getLogger("gpuprof")

_UNITS = {"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|B|KiB|MiB|GiB|TiB)"
_CPU_FAILURE = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit.lower()])


def _find(pattern: str, text: str) -> Optional[int]:
    m = re.search(pattern, text)
    return _bytes(m.group(1), m.group(2)) if m else None


def is_out_of_memory(exc: Optional[BaseException]) -> bool:
    """torch's out-of-memory errors: ``torch.OutOfMemoryError`` (any device), and the CPU
    allocator's failure (a RuntimeError)."""
    if exc is None:
        return False
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if isinstance(oom, type) and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _CPU_FAILURE)


def parse_message(message: str) -> dict:
    """The numbers an out-of-memory message states (absent ones are left out): ``device`` (a GPU
    index, -1 for the CPU allocator), ``requested_bytes``, ``capacity_bytes``, ``free_bytes``,
    ``allocated_bytes`` (by PyTorch), ``reserved_unallocated_bytes``, ``process_bytes`` (all of
    this process's memory on the device, PyTorch's and others')."""
    out: dict = {}
    if any(s in message for s in _CPU_FAILURE):
        out["device"] = -1
        m = re.search(r"you tried to allocate ([0-9]+) bytes", message)
        if m:
            out["requested_bytes"] = int(m.group(1))
        return out
    m = re.search(r"GPU ([0-9]+) has a total capacity of " + _SIZE, message)
    if m:
        out["device"] = int(m.group(1))
        out["capacity_bytes"] = _bytes(m.group(2), m.group(3))
    for key, pattern in (
        ("requested_bytes", r"Tried to allocate " + _SIZE),
        ("free_bytes", r"of which " + _SIZE + r" is free"),
        ("process_bytes", r"this process has " + _SIZE + r" memory in use"),
        ("allocated_bytes", _SIZE + r" is allocated by PyTorch"),
        ("reserved_unallocated_bytes", _SIZE + r" is reserved by PyTorch but unallocated"),
    ):
        v = _find(pattern, message)
        if v is not None:
            out[key] = v
    return out


def host_capacity_bytes() -> Optional[int]:
    """The memory this process may use on the host: the machine's RAM, or a cgroup's limit when
    lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limit = int(text)
            total = limit if total is None else min(total, limit)
        break
    return total


def allocator_state(device: int) -> dict:
    """The CUDA caching allocator's statistics on ``device`` now, and what the driver says is free:
    {} where torch has not initialised CUDA (or for the host)."""
    torch = sys.modules.get("torch")
    try:
        if device < 0 or torch is None or not torch.cuda.is_initialized():
            return {}
        stats = torch.cuda.memory_stats(device)
        out = {
            "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
            "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
            "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
            "inactive_split_bytes": int(stats.get("inactive_split_bytes.all.current", 0)),
            "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0)),
        }
        free, total = torch.cuda.mem_get_info(device)
        out["free_bytes"], out["capacity_bytes"] = int(free), int(total)
        return out
    except Exception as e:  # a failing device must not cost the report
        log.debug("gpuprof: could not read the allocator's statistics: %s", e)
        return {}


def failure_facts(exc: BaseException, tensors, batch_size: Optional[int]) -> dict:
    """Everything the out-of-memory report needs from the moment of the failure (docs/memory.md)."""
    message = str(exc)
    facts: dict = {"error": type(exc).__name__, "message": message[:4000]}
    facts.update(parse_message(message))
    device = facts.get("device")
    if device is None:
        torch = sys.modules.get("torch")
        try:
            device = torch.cuda.current_device() if torch is not None and torch.cuda.is_initialized() else -1
        except Exception:  # no usable device: the host
            device = -1
        facts["device"] = device
    state = allocator_state(device)
    facts["allocator"] = state
    for key in ("capacity_bytes", "free_bytes", "allocated_bytes"):
        if key not in facts and key in state:
            facts[key] = state[key]
    if "reserved_unallocated_bytes" not in facts and "reserved_bytes" in state:
        facts["reserved_unallocated_bytes"] = max(0, state["reserved_bytes"] - state["allocated_bytes"])
    if device < 0 and "capacity_bytes" not in facts:
        capacity = host_capacity_bytes()
        if capacity:
            facts["capacity_bytes"] = capacity
    try:
        facts["tensors"] = {str(d): v for d, v in tensors.bytes_by_device().items()}
    except Exception as e:  # what the tensors cannot tell, the report leaves out
        log.debug("gpuprof: could not read the models' tensors at the failure: %s", e)
        facts["tensors"] = {}
    facts["batch_size"] = batch_size
    return facts
