"""Facts about the host and the job this process runs in, which every stage may read: the CPUs
the process may use, and its rank in a distributed job. Imports nothing of gpuprof, and never
imports torch itself (only what the user's program has imported: ``sys.modules``)."""

from __future__ import annotations

import os
import sys
from typing import Optional


def cpus_available() -> int:
    """CPUs this process may run on (its affinity mask: what SLURM or taskset granted)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_budget() -> tuple[float, str]:
    """The CPUs this process may use, and what set the number: the affinity mask (taskset, SLURM's
    binding), SLURM's ``--cpus-per-task`` when it is smaller, or a cgroup CPU quota (a container's
    ``--cpus``) when that is smaller still."""
    n, source = float(cpus_available()), "affinity mask"
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and 0 < int(slurm) < n:
        n, source = float(slurm), "SLURM_CPUS_PER_TASK"
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and float(period) > 0 and 0 < float(quota) / float(period) < n:
            n, source = float(quota) / float(period), "cgroup cpu.max"
    except (OSError, ValueError):
        pass
    return n, source


def dist_if_initialized():
    """torch.distributed when the program imported torch and initialised a process group, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        return None
    return None


LAUNCHER_VARIABLES = (
    ("RANK", "WORLD_SIZE", "torchrun"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"),
    ("PMI_RANK", "PMI_SIZE", "mpirun (MPICH, Intel MPI)"),
    ("SLURM_PROCID", "SLURM_NTASKS", "srun"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK"),
)


def job_rank(environ: Optional[dict] = None) -> tuple[int, int, str]:
    """(rank, world size, where they came from) of this process in its job: torch.distributed's
    when the process group is initialised (the truth), else the first launcher whose variables are
    set (``LAUNCHER_VARIABLES``), else (0, 1, ""). Reads no torch the program has not imported."""
    dist = dist_if_initialized()
    if dist is not None:
        try:
            if dist.get_world_size() > 1:
                return dist.get_rank(), dist.get_world_size(), "torch.distributed"
        except Exception:
            pass
    env = os.environ if environ is None else environ
    for rank_var, size_var, launcher in LAUNCHER_VARIABLES:
        r, w = env.get(rank_var, "").strip(), env.get(size_var, "").strip()
        if r.isdigit() and w.isdigit() and int(r) < int(w):
            return int(r), int(w), launcher
    return 0, 1, ""


def cuda_host_facts() -> dict:
    """``cuda_available`` and ``cuda_device_count``, asked of torch only when the user's program has
    imported it already (this module never imports torch itself); {} when it cannot be told."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return {}
    try:
        available = bool(cuda.is_available())
        facts = {
            "cuda_available": available,
            "cuda_device_count": int(cuda.device_count()) if available else 0,
        }
        if available:  # FLOPs: "high"/"medium" run fp32 matrix work as TF32 (its peak is the tf32 row)
            facts["float32_matmul_precision"] = str(torch.get_float32_matmul_precision())
        return facts
    except Exception:  # a broken driver install must not cost the user the report
        return {}


def cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # a broken CUDA setup: no device levels either
        return False


def cuda_allocator_levels(cuda, device: Optional[int] = None) -> tuple[int, int, int, int]:
    """torch's caching allocator on ``device`` (the current one by default): (allocated, reserved,
    peak allocated, peak reserved) bytes, from the nested statistics: ``memory_stats()`` and the
    ``memory_allocated()`` family flatten them into some 200 keys in Python at every call (75 us
    against 10 us on an H200)."""
    stats = cuda.memory_stats_as_nested_dict() if device is None else cuda.memory_stats_as_nested_dict(device)
    alloc = stats.get("allocated_bytes", {}).get("all", {})
    res = stats.get("reserved_bytes", {}).get("all", {})
    allocated, reserved = int(alloc.get("current", 0)), int(res.get("current", 0))
    return allocated, reserved, int(alloc.get("peak", allocated)), int(res.get("peak", reserved))


def cpu_budget_facts() -> dict:
    """The CPUs this process may use for DataLoader workers and what set the number."""
    cpus, source = cpu_budget()
    return {"cpu_budget": round(cpus, 2), "cpu_budget_source": source}
