"""What set the steps' length: the critical path's largest fixable cause (docs/advice.md#critical_path)."""

from __future__ import annotations

from typing import Optional

from .._facts import Facts
from .base import CRITICAL_PATH_MIN_PCT, Recommendation, recommendation
from .distributed import communication, straggler
from .host import launch_bound
from .input_pipeline import dataloader

# The rule that already advises on each cause with its own measurements: when it speaks, this one
# does not repeat it.
_COVERED_BY = {
    "launching": launch_bound,
    "data_loading": dataloader,
    "communication": communication,
    "waiting": straggler,
}

_CAUSE_WORDS = {
    "cpu_bound": "host operators and Python",
    "data_loading": "waiting for the DataLoader",
    "gpu_compute_bound": "GPU kernels",
    "gpu_communication_bound": "communication kernels",
    "gpu_kernel_kernel_overhead": "gaps between queued kernels",
    "gpu_kernel_launch_overhead": "kernel launches",
}


def _fix(kind: str, rank=None, its_cause=None) -> str:
    if kind == "launching":
        return (
            "model = torch.compile(model, mode='reduce-overhead') (fewer, fused kernels replayed as a "
            "CUDA graph), or capture the step with torch.cuda.CUDAGraph / torch.cuda.graph"
        )
    if kind == "data_loading":
        return (
            "DataLoader(..., num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=4) so "
            "batches are ready before the loop asks (the dataloader rule gives N where it was measured); "
            "move decoding and augmentation out of the main process"
        )
    if kind == "communication":
        return (
            "DDP(model, bucket_cap_mb=25 or less, gradient_as_bucket_view=True) so all-reduces start "
            "while the backward pass still runs, and `with model.no_sync():` on all but every k-th step"
        )
    words = _CAUSE_WORDS.get(its_cause or "", "its own work")
    return (
        f"rank {rank} arrives late at the collectives; its own critical path is mostly {words}: "
        f"fix that on rank {rank} (its report's critical_path section), or give it less work"
    )


def critical_path(f: Facts) -> Optional[Recommendation]:
    shares = f.critical_path_pct
    if not shares:
        return None
    waits = {k: v for k, v in shares.items() if k.startswith("waiting_for_rank_")}
    candidates = [
        ("launching", shares.get("gpu_kernel_launch_overhead", 0.0) + shares.get("launch_calls", 0.0)),
        ("data_loading", shares.get("data_loading", 0.0)),
        ("communication", shares.get("gpu_communication_bound", 0.0)),
    ]
    if waits:
        key = max(waits, key=lambda k: (waits[k], k))
        candidates.append((key, waits[key]))
    kind, share = max(candidates, key=lambda c: c[1])
    if share < CRITICAL_PATH_MIN_PCT:
        return None
    if _COVERED_BY["waiting" if kind.startswith("waiting_for_rank_") else kind](f) is not None:
        return None
    rank = its = None
    if kind.startswith("waiting_for_rank_"):
        rank = int(kind.rsplit("_", 1)[1])
        its = f.critical_path_held_by.get(rank)
        what = f"waiting in collectives for rank {rank}"
    else:
        what = {
            "launching": "launching kernels (launch calls and launch delay)",
            "data_loading": "waiting for the DataLoader",
            "communication": "communication kernels",
        }[kind]
    return recommendation(
        "critical_path",
        f"The steps' critical path is {share:.0f}% {what}",
        summary=f"{share:.0f}% of the chain of work that set each step's length is {what}"
        + (
            f"; rank {rank}'s own chain is mostly {_CAUSE_WORDS.get(its or '', its)}"
            if rank is not None
            else ""
        ),
        numbers={
            "critical_path_share_pct": share,
            **{f"{k}_pct": v for k, v in sorted(shares.items()) if k != "launch_calls"},
            "launch_calls_pct": shares.get("launch_calls", 0.0),
        },
        bound_pct=share,
        confidence="medium",
        confidence_reason="the chain is measured; removing one cause can let another chain of the step "
        "become the longest, so the saving is at most this share",
        fix=_fix("waiting" if rank is not None else kind, rank, its),
    )
