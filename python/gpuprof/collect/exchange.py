"""Live cross-rank exchange: inside a torch.distributed job, ranks send their per-step summaries to
rank 0 at the end of each span through the job's own c10d key-value store (any backend: NCCL's
collectives are untouched, and nothing is added to the job's process groups). Nothing is sent when
torch.distributed
is not initialised or the world has one rank. A rank that died or left early makes the exchange time
out on rank 0 instead of hanging it; its report names the ranks that did not report.

Never imports torch itself: only when the user's program has (sys.modules).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Optional

from .._host import LAUNCHER_VARIABLES, job_rank  # noqa: F401 (public here too)
from .._host import dist_if_initialized as _dist

log = logging.getLogger("gpuprof")

DEFAULT_TIMEOUT_S = 60.0


def rank_info(batch_size: Optional[int] = None) -> dict:
    """rank, local_rank, world_size, hostname, backend, device of this process (one rank of 1 when
    not in a distributed job)."""
    dist = _dist()
    info = {
        "rank": 0,
        "local_rank": 0,
        "world_size": 1,
        "hostname": socket.gethostname(),
        "backend": "",
        "device": "cpu",
        "batch_size": batch_size,
    }
    if dist is not None:
        try:
            info["rank"] = dist.get_rank()
            info["world_size"] = dist.get_world_size()
            info["backend"] = str(dist.get_backend())
        except Exception:
            pass
    info["local_rank"] = int(os.environ.get("LOCAL_RANK", info["rank"]) or 0)
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            info["device"] = f"cuda:{torch.cuda.current_device()} ({torch.cuda.get_device_name()})"
    except Exception:
        pass
    return info


def distributed_info() -> Optional[dict]:
    """This rank's job as torch.profiler writes it into a trace (``distributedInfo``: backend, rank,
    world_size, pg_count and pg_config, the process groups: pg_name, pg_desc, pg_size, ranks), so
    that a live trace says what a Kineto trace says; None outside a job of several ranks."""
    dist = _dist()
    if dist is None:
        return None
    try:
        if dist.get_world_size() < 2:
            return None
        info = {
            "backend": str(dist.get_backend()),
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
        }
    except Exception:
        return None
    try:
        from torch.distributed import distributed_c10d as c10d

        groups = c10d._get_all_pg_configs()
        info["pg_count"] = len(groups)
        info["pg_config"] = [
            {k: g.get(k) for k in ("pg_name", "pg_desc", "backend_config", "pg_size", "ranks")}
            for g in groups
        ]
    except Exception:  # a torch without the process-group table: the rank facts alone
        pass
    return info


# The variables each launcher gives every process it starts: (rank, world size, launcher).
# torchrun's come first: under `srun torchrun ...` or `mpirun torchrun ...` a process is one of
# torchrun's ranks, not the launcher's task. LOCAL_RANK alone (a launcher that sets nothing else)
# is the last resort: it is only unique on one node.
_sessions = 0  # gpuprof.profile sessions entered in this process: the same count on every rank


class Exchange:
    """One per profiling session. At each span end every rank puts its summary (a few KB, pickled)
    into the job's own key-value store (torch.distributed's c10d store, the one the process group
    was set up with) and goes on; rank 0 waits for the others' keys up to the timeout and names the
    ranks whose keys did not come. No rank ever waits for another but rank 0, and rank 0 no longer
    than the timeout: a rank that died or left early hangs nobody."""

    def __init__(self, timeout_s: float, session: Optional[str] = None) -> None:
        global _sessions
        self.timeout_s = float(timeout_s)
        self.store = None
        self.broken = ""
        self.dist = _dist()
        _sessions += 1
        # The keys' prefix: the count of sessions, or a name every rank's session shares.
        self.session = _sessions if session is None else session
        if self.dist is None:
            return
        try:
            if self.dist.get_world_size() < 2:
                self.dist = None
                return
            from torch.distributed import distributed_c10d as c10d

            self.store = c10d._get_default_store()
        except Exception as e:  # never cost the user the training run
            self.broken = f"the job's torch.distributed store is not reachable: {e}"
            log.warning("gpuprof: cross-rank report off: %s", self.broken)

    @property
    def active(self) -> bool:
        return self.dist is not None and self.store is not None and not self.broken

    def gather(self, summary: dict, span: int) -> Optional[dict]:
        """On rank 0: {"summaries": [...], "missing_ranks": [...], "note": str}; on other ranks
        None."""
        import pickle
        import time

        rank = self.dist.get_rank()
        world = self.dist.get_world_size()
        prefix = f"gpuprof/{self.session}/{span}/"
        if rank != 0:
            self.store.set(prefix + str(rank), pickle.dumps(summary, protocol=4))
            return None
        keys = {r: prefix + str(r) for r in range(1, world)}
        deadline = time.monotonic() + self.timeout_s
        pending = dict(keys)
        delay = 0.005
        while pending and time.monotonic() < deadline:
            for r in [r for r, k in pending.items() if self.store.check([k])]:
                del pending[r]
            if pending:
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
        got = [summary]
        for r, k in keys.items():
            if r in pending:
                continue
            try:
                got.append(pickle.loads(self.store.get(k)))
                self.store.delete_key(k)
            except Exception as e:
                log.warning("gpuprof: summary of rank %d unreadable: %s", r, e)
                pending[r] = k
        missing = sorted(pending)
        note = ""
        if missing:
            note = (
                f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
                f"report within {self.timeout_s:g} s of rank 0's span end (exited, failed, or "
                "left the loop early)"
            )
            log.warning("gpuprof: %s", note)
        return {"summaries": got, "missing_ranks": missing, "note": note}


def is_peer_failure(exc: Optional[BaseException]) -> bool:
    """The block failed in a collective because another rank left (not an error of its own)."""
    if exc is None:
        return False
    dist = sys.modules.get("torch.distributed")
    kinds = tuple(k for k in (getattr(dist, "DistError", None),) if isinstance(k, type))
    if kinds and isinstance(exc, kinds):
        return True
    text = str(exc)
    return any(
        s in text
        for s in (
            "Connection closed by peer",
            "Connection reset by peer",
            "gloo",
            "NCCL error",
            "ProcessGroup",
        )
    )
