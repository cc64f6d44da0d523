"""The rules: one small function each, from the report's facts to one recommendation or None.

Each rule states its trigger (thresholds below, the plugin's where it had one), the measured
evidence, an Amdahl upper bound on the step-time saving (the time the fix can remove, as % of the
mean step: never more than the time the bottleneck takes) and the change in the user's own terms.
docs/advice.md explains each rule and justifies each bound; keep the two in step.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Optional

from ._facts import Facts, row_name

# Thresholds (docs/advice.md gives the plugin's: DataLoader > 5%, communication > 10%,
# utilization < 50%, memory > 90%).
DATALOADER_PCT = 5.0
CPU_BOUND_WORKER_SHARE = 0.5  # a loading worker on a CPU at least half its time competes for CPUs
COMMUNICATION_PCT = 10.0
LOW_UTILIZATION_PCT = 50.0
MEMORY_HIGH_PCT = 90.0
MEMORY_LOW_PCT = 50.0  # peak below this share of capacity = room for a larger batch
LOW_SM_EFFICIENCY_PCT = 50.0
MEMORY_HEADROOM_PCT = 80.0  # a larger batch is sized to fill this share of device memory
FRAGMENTATION_MIN_PCT = 25.0  # reserved but unallocated at the peak, % of reserved
FRAGMENTATION_MIN_BYTES = 1 << 30
FRAGMENTATION_NEAR_FULL_PCT = 80.0  # reserved at the peak, % of device memory
COPY_MIN_PCT = 1.0  # pageable copies below 1% of the step are not worth a rule
SYNC_MIN_PER_STEP = 1.0
SYNC_MIN_BOUND_PCT = 1.0  # below this a logging .item() per step is not worth a rule
UNEXPLAINED_IDLE_MIN_PCT = 5.0
LAUNCH_MAX_MEAN_KERNEL_US = 20.0
LAUNCH_MIN_PER_STEP = 100.0
LAUNCH_MIN_HOST_PCT = 20.0
OPTIMIZER_MIN_PCT = 15.0
LAYOUT_MIN_PCT = 1.0
TENSOR_CORE_MIN_CC = 7.0
LOW_MFU_PCT = 30.0  # an accelerator's MFU below this: where is the gap
LOW_MFU_CPU_PCT = 10.0  # a CPU's (estimated peak): only when matrix work fills the step
LOW_MFU_CPU_MATMUL_PCT = 50.0
SMALL_MATMUL_FLOPS = 2 * 256**3  # a matrix-class call below a 256 x 256 x 256 product is small

Recommendation = dict
Rule = Callable[[Facts], Optional[Recommendation]]


def recommendation(
    rule: str,
    title: str,
    *,
    summary: str,
    numbers: dict,
    bound_pct: float,
    confidence: str,
    confidence_reason: str,
    fix: str,
    change: Optional[dict] = None,
) -> Recommendation:
    evidence = {"summary": summary}
    evidence.update({k: (round(v, 2) if isinstance(v, float) else v) for k, v in numbers.items()})
    return {
        "rule": rule,
        "title": title,
        "evidence": evidence,
        "saving_bound_pct": round(max(0.0, min(100.0, bound_pct)), 1),
        "confidence": confidence,
        "confidence_reason": confidence_reason,
        "fix": fix,
        "docs": f"docs/advice.md#{rule}",
        # The fix's settings as data, for tools that apply it (the demo's second run does).
        **({"change": change} if change else {}),
    }


def _ms(us: float) -> str:
    return f"{us / 1000.0:.1f} ms" if us >= 1000 else f"{us:.0f} us"


def _unexplained_idle_pct(f: Facts) -> float:
    """GPU idle share of the step that waiting for the DataLoader does not explain."""
    return max(0.0, f.gpu_idle_pct - f.pct("dataloader"))


def _mean_device(f: Facts, key: str) -> Optional[float]:
    vals = [f.device_num(d, key) for d in f.busy_devices]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


# ---- no_gpu_work ----------------------------------------------------------------------------------
def no_gpu_work(f: Facts) -> Optional[Recommendation]:
    if f.cuda_available is not True or f.num_steps == 0 or f.ran_gpu_work:
        return None
    if f.devices:
        conf, why = "high", "GPU collection ran and found no kernel or copy in the recorded steps"
    else:
        conf, why = (
            "medium",
            "CUDA was available, but this report has no GPU section: if GPU activity "
            "was not collected (no CUPTI), the GPU may have worked unseen",
        )
    return recommendation(
        "no_gpu_work",
        "CUDA is available but no GPU work ran in the profiled steps",
        summary=f"CUDA was available to the process, yet the {f.num_steps} recorded steps ran no kernel and "
        f"no copy: {f.pct('cpu_exec'):.0f}% of the step is CPU work",
        numbers={
            "cuda_available": True,
            "kernel_us": f.us("kernel"),
            "cpu_exec_pct": f.pct("cpu_exec"),
            "steps": f.num_steps,
        },
        bound_pct=f.pct("cpu_exec"),
        confidence=conf,
        confidence_reason=why,
        fix="device = torch.device('cuda'); model.to(device); and in the loop x, y = x.to(device, "
        "non_blocking=True), y.to(device, non_blocking=True) (check with next(model.parameters()).device)",
    )


# ---- dataloader -----------------------------------------------------------------------------------
def _dataloader_call(settings: dict) -> str:
    return "DataLoader(..., " + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"


def dataloader(f: Facts) -> Optional[Recommendation]:
    measured = f.input_pipeline
    if measured is not None:  # the stages were measured inside the DataLoader: Little's law
        return _dataloader_measured(f, measured)
    share = f.pct("dataloader")
    if share <= DATALOADER_PCT or f.step_us <= 0:
        return None
    dl_us = f.us("dataloader")
    rest_us = max(f.step_us - dl_us, 1.0)
    dl = f.dataloader
    cpus = f.cpus_available
    uses_cuda = f.ran_gpu_work or f.cuda_available is True
    numbers: dict = {"dataloader_pct": share, "dataloader_us": dl_us, "step_us": f.step_us}
    summary_tail = f"DataLoader is {share:.0f}% of the step ({_ms(dl_us)} of {_ms(f.step_us)})"
    if dl is None:
        return recommendation(
            "dataloader",
            "The input pipeline starves the training loop",
            summary=summary_tail + "; the DataLoader settings were not recorded (imported trace)",
            numbers=numbers,
            bound_pct=share,
            confidence="medium",
            confidence_reason="the DataLoader share is measured; its settings and the CPU count are not "
            "in this trace",
            fix="DataLoader(..., num_workers=N, persistent_workers=True"
            + (", pin_memory=True" if uses_cuda else "")
            + "): worker processes load batches while "
            "the model trains; start with N = the CPUs this process may use"
            + (" (per GPU process on a multi-GPU node)" if uses_cuda else ""),
        )

    nw = int(dl.get("num_workers") or 0)
    batch = dl.get("batch_size")
    numbers.update({"num_workers": nw, "cpus_available": cpus, "batch_size": batch})
    # Time to load one batch: with no workers the main process loads it (the whole wait); with
    # nw workers each one loads a batch every nw steps, so nw * step time bounds it from above.
    load_us = dl_us if nw == 0 else nw * (dl_us + rest_us)
    # Workers hide loading when nw * (time the rest of the step takes) covers a batch's load;
    # one more than the break-even absorbs batch-to-batch jitter.
    needed = math.ceil(load_us / rest_us) + 1
    # Workers may use every CPU the process has: the training process mostly waits on the GPU (or,
    # on a CPU-only run, shares the cores with them); more workers than CPUs only adds contention.
    cap = cpus if cpus else None
    numbers["batch_load_us_est"] = load_us
    numbers["workers_needed_est"] = needed
    summary = f"{summary_tail} with num_workers={nw}" + (f" on {cpus} available CPUs" if cpus else "")

    if cpus and nw > cpus:
        settings = {"num_workers": cap, "persistent_workers": True}
        if uses_cuda:
            settings["pin_memory"] = True
        return recommendation(
            "dataloader",
            "More DataLoader workers than CPUs: they compete for the same cores",
            summary=summary + f": {nw} workers share {cpus} CPUs with the training process",
            numbers=numbers,
            bound_pct=share,
            confidence="high",
            confidence_reason="worker count and CPU affinity are recorded from the run",
            fix=f"{_dataloader_call(settings)}: {cap} of the {cpus} CPUs this process may use "
            f"(num_workers={nw} oversubscribes them; on a shared node ask the scheduler for more "
            "CPUs, e.g. SLURM --cpus-per-task, rather than adding workers)",
            change={"DataLoader": settings},
        )

    if cap is not None and nw >= cap:
        per_sample = f", about {_ms(load_us / batch)} per sample" if isinstance(batch, int) and batch else ""
        return recommendation(
            "dataloader",
            "Every CPU already loads data, and loading still starves the step",
            summary=summary + f": a batch takes about {_ms(load_us)} to load{per_sample}, "
            f"so it needs about {needed} workers and only {cap} CPUs are free for them",
            numbers=numbers,
            bound_pct=share,
            confidence="medium",
            confidence_reason="the wait is measured, its cause (decode, transforms, file I/O) is not",
            fix="Make each sample cheaper rather than adding workers: move per-sample normalisation and "
            "augmentation to the GPU on whole batches (after x = x.to(device, non_blocking=True)); "
            "store the data packed and decoded (a numpy memmap, WebDataset tar shards, LMDB) instead "
            f"of one small file per sample; or run with more CPUs (this process may use {cpus})",
        )

    target = max(nw + 1, needed if cap is None else min(cap, needed))
    settings = {"num_workers": target, "persistent_workers": True}
    if uses_cuda:
        settings["pin_memory"] = True
    if nw > 0:
        settings["prefetch_factor"] = max(4, int(dl.get("prefetch_factor") or 2))
    why = f"{target} of the {cpus} CPUs this process may use" if cpus else f"{target} workers"
    why += f"; DataLoader is {share:.0f}% of the step with num_workers={nw}"
    if cap is not None and needed > cap:
        why += (
            f"; a batch needs about {needed} workers' time, so expect part of the wait to remain: "
            "also make per-sample work cheaper (see docs)"
        )
    if nw > 0 and not dl.get("persistent_workers"):
        why += "; persistent_workers keeps workers alive between epochs instead of restarting them"
    if not uses_cuda:
        why += (
            "; on this CPU-only run the workers share the CPUs with the training computation, so "
            "expect less than the bound unless loading waits on files or the computation leaves CPUs idle"
        )
    strong = nw == 0 and share >= 20.0 and uses_cuda
    if nw > 0:
        reason = (
            "workers already run; how much more they help depends on whether loading is CPU- or I/O-bound"
        )
    elif uses_cuda:
        reason = "the loop waits for batches loaded in the training process itself, while the GPU idles"
    else:
        reason = (
            "the loop waits for batches loaded in the training process itself; on a CPU-only run "
            "workers gain most when loading waits on I/O, less when it competes for the same CPUs"
        )
    return recommendation(
        "dataloader",
        "The input pipeline starves the training loop",
        summary=summary,
        numbers=numbers,
        bound_pct=share,
        confidence="high" if strong else "medium",
        confidence_reason=reason,
        fix=f"{_dataloader_call(settings)}: {why}",
        change={"DataLoader": settings},
    )


# ---- dataloader, measured inside the DataLoader (the report's input_pipeline) ---------------------
# A live span that timed the batch's stages inside the workers sizes them by Little's law from those
# numbers (docs/advice.md#dataloader); the estimate above, from the wait alone, is for the rest.
_STAGE_WORDS = {"fetch": "loading", "transform": "transforming", "collate": "collating"}


def _stages_text(ip: dict) -> str:
    parts = []
    for key, name in (("fetch", "load"), ("transform", "transform"), ("collate", "collate")):
        s = ip.get(f"{key}_us")
        if isinstance(s, dict) and isinstance(s.get("mean"), (int, float)):
            parts.append(f"{name} {_ms(s['mean'])}")
    return " + ".join(parts)


def _law_text(ip: dict) -> str:
    law = ip["law"]
    tb, ts = law["t_batch_us"], law["t_step_us"]
    where = "worker" if ip.get("process") == "workers" else "training process (num_workers=0)"
    n = law["workers_needed"]
    return (
        f"by Little's law a batch takes T_batch = {_ms(tb)} in a {where} and a step uses one every "
        f"T_step = {_ms(ts)} of its own work, so N = ceil({tb / 1000:.2f} / {ts / 1000:.2f}) = "
        + ("1 worker keeps up" if n == 1 else f"{n} workers keep up")
    )


def _cpu_text(ip: dict) -> str:
    law = ip["law"]
    if law.get("cpu_limit") is None:
        return ""
    budget = law["cpu_budget"]
    budget_text = f"{budget:g}" if isinstance(budget, (int, float)) else str(budget)
    return (
        f"the {budget_text} CPUs this process may use ({law.get('cpu_budget_source') or 'affinity mask'}), "
        f"less {law['training_cpus']:g} busy with training, at {100 * law['worker_cpu_share']:.0f}% of a "
        f"CPU per loading worker, leave room for {law['cpu_limit']}"
        + (
            f" (while other processes kept {law['other_cpus']:g} of them busy over the run)"
            if isinstance(law.get("other_cpus"), (int, float))
            else ""
        )
    )


def _crowded(ip: dict, workers: int) -> bool:
    """The workers' CPU need does not fit in the CPUs other processes left free over the run, and
    they need CPUs (decoding, augmenting), not mostly waiting."""
    law = ip["law"]
    other, budget = law.get("other_cpus"), law.get("cpu_budget")
    share, training = law.get("worker_cpu_share") or 0.0, law.get("training_cpus") or 0.0
    if not isinstance(other, (int, float)) or not isinstance(budget, (int, float)):
        return False
    return share >= CPU_BOUND_WORKER_SHARE and workers * share > budget - training - other


def _dataloader_measured(f: Facts, ip: dict) -> Optional[Recommendation]:
    wait_pct = ip.get("wait_pct")
    if not isinstance(wait_pct, (int, float)) or wait_pct <= DATALOADER_PCT:
        return None  # the loop hardly waits: the loader is not the bottleneck
    law = ip["law"]
    nw = int(ip.get("num_workers") or 0)
    wait_us = (ip.get("wait_us") or {}).get("mean") or 0.0
    recommended = ip.get("recommended_num_workers") or max(nw, 1)
    prefetch = ip.get("recommended_prefetch_factor") or 2
    bound = ip.get("bound")
    uses_cuda = f.ran_gpu_work or f.cuda_available is True
    stage = ip.get("stage")
    dl = f.dataloader or {}
    numbers = {
        "wait_pct": wait_pct,
        "wait_us": wait_us,
        "num_workers": nw,
        "t_batch_us": law["t_batch_us"],
        "t_step_us": law["t_step_us"],
        "workers_needed": law["workers_needed"],
        "cpu_budget": law.get("cpu_budget"),
        "training_cpus": law.get("training_cpus"),
        "worker_cpu_share": law.get("worker_cpu_share"),
        "cpu_limit": law.get("cpu_limit"),
        "other_cpus": law.get("other_cpus"),
        "recommended_num_workers": recommended,
        "recommended_prefetch_factor": prefetch,
        "stage": stage,
        "bound": bound,
        "queue_empty_pct": ip.get("queue_empty_pct"),
    }
    summary = (
        f"the loop waits {_ms(wait_us)} per batch ({wait_pct:.0f}% of the step) with num_workers={nw}; "
        f"a batch takes {_ms(law['t_batch_us'])} ({_stages_text(ip)})"
        + (f", most of it {_STAGE_WORDS[stage]}" if stage in _STAGE_WORDS else "")
    )
    settings: dict = {"num_workers": recommended, "persistent_workers": True}
    if recommended > 0:
        settings["prefetch_factor"] = prefetch
    if uses_cuda:
        settings["pin_memory"] = True
    cpu = _cpu_text(ip)
    prefetch_text = (
        f"prefetch_factor={prefetch} covers a batch two standard deviations slower than the mean "
        f"({_ms((ip.get('batch_us') or {}).get('std') or 0.0)})"
    )

    def advise(title, fix, confidence, reason, change=True):
        return recommendation(
            "dataloader",
            title,
            summary=summary,
            numbers=numbers,
            bound_pct=wait_pct,
            confidence=confidence,
            confidence_reason=reason,
            fix=fix,
            change={"DataLoader": settings} if change else None,
        )

    if bound == "pin":
        pin = (ip.get("pin_us") or {}).get("mean") or 0.0
        return advise(
            "Pinning each batch takes longer than a step",
            f"the pin-memory thread takes {_ms(pin)} per batch, longer than the {_ms(law['t_step_us'])} "
            "a step needs, and one thread pins for every worker: pinning sets the pace, not loading. "
            "Pin fewer bytes: return uint8 images and convert and normalise on the GPU (4x fewer bytes "
            "to pin and copy), one stacked tensor per field rather than many small ones, larger batches "
            "(fewer, bigger copies), and copy with x.to(device, non_blocking=True)",
            "medium",
            "the pin-memory thread's time per batch and the step's own time are measured",
            change=False,
        )
    if bound == "copy":
        copy = (ip.get("transfer_us") or {}).get("mean") or 0.0
        device = (ip.get("transfer_device_us") or {}).get("mean")
        return advise(
            "Copying each batch to the device holds up the step",
            f"the batch's copy takes {_ms(copy)} of host time per batch"
            + (f" ({_ms(device)} on the device)" if isinstance(device, (int, float)) else "")
            + f", against {_ms(law['t_step_us'])} of the step's own work: "
            + ("" if dl.get("pin_memory") else "DataLoader(..., pin_memory=True) and ")
            + "x.to(device, non_blocking=True), so that the copy runs from pinned memory beside the "
            "kernels; fewer bytes (uint8 images converted and normalised on the GPU); larger batches "
            "(fewer, bigger copies)",
            "medium",
            "the copy operators' time after each batch arrives is measured; the gain from pinning "
            "depends on the link",
            change=False,
        )
    if bound == "cpu":
        limit = law.get("cpu_limit") or recommended
        over, cheaper = nw > limit, law["workers_needed"] > limit
        heavy = {
            "transform": "transforms take most of it: lighter augmentation, or augmentation on the GPU "
            "on whole batches after x = x.to(device, non_blocking=True)",
            "fetch": "loading takes most of it: a faster decoder (PIL-SIMD; torchvision.io.decode_jpeg "
            "on the GPU; DALI), or the data set pre-processed once into packed, decoded arrays (a numpy "
            "memmap, WebDataset shards)",
            "collate": "collating takes most of it: return tensors, not Python lists, from __getitem__, "
            "so that collate only stacks them",
        }.get(stage, "make each batch cheaper")
        return advise(
            "More DataLoader workers than the CPUs can run: they slow each other and the training"
            if over
            else "Loading the batches needs more CPUs than this process has",
            f"{_dataloader_call(settings)}: {cpu}, so {recommended} is the most that helps"
            + (f" (num_workers={nw} oversubscribes them)" if over else "")
            + f"; {_law_text(ip)}"
            + (
                f"; the rest of the wait needs cheaper batches: {heavy}; or more CPUs per task "
                "(SLURM --cpus-per-task, taskset)"
                if cheaper
                else "; on a shared node ask the scheduler for more CPUs (SLURM --cpus-per-task) "
                "rather than adding workers"
            ),
            "high" if over and not cheaper else "medium",
            "the batch time and the workers' CPU share are measured inside them, under this run's "
            "contention; more workers on the same CPUs slow each other",
        )
    if bound == "samples":
        slow = ip.get("slowest_samples") or []
        which = ", ".join(str(s["index"]) for s in slow[:5] if s.get("index") is not None)
        return advise(
            "A few slow samples hold up their batches",
            f"the slowest 1% of samples take {ip.get('slowest_share_pct', 0):.0f}% of the loading time"
            + (f" (indices {which}: up to {_ms(slow[0]['us'])} each)" if which and slow else "")
            + ": find what makes them slow (large files, another format, a slow path on disk or the "
            "network) and convert, cache or drop them; until then "
            f"{_dataloader_call(settings)} ({_law_text(ip)}; {prefetch_text}) rides them out",
            "medium",
            "per-sample times are measured in the workers; why those samples are slow is not",
        )
    if bound == "workers":
        crowded = _crowded(ip, recommended)
        return advise(
            "The input pipeline starves the training loop",
            f"{_dataloader_call(settings)}: {_law_text(ip)}"
            + (f"; {cpu}" if cpu else "")
            + f"; {prefetch_text}",
            "medium" if crowded else "high",
            f"other processes kept {law['other_cpus']:g} of the {law['cpu_budget']:g} CPUs busy over the "
            f"run, fewer than the {recommended} workers' CPU need is left free: they may slow the training "
            "rather than feed it; compare both settings (gpuprof diff) before keeping it"
            if crowded
            else "T_batch is measured inside the workers and T_step in the loop: Little's law gives the "
            "workers that keep up, as long as the CPUs stay as free as they were",
        )
    # By the law the workers keep up, yet the loop waits.
    empty = ip.get("queue_empty_pct")
    if isinstance(empty, (int, float)) and empty < 50:
        return advise(
            "Taking a ready batch from the workers is slow",
            f"a batch was ready in {100 - empty:.0f}% of the steps, yet taking it took {_ms(wait_us)}: the "
            "hand-over from the worker process costs that (unpickling, and for each tensor a round trip "
            "to the worker for its shared memory's file descriptor, which waits while the busy worker "
            "holds its interpreter): return fewer, larger tensors (one stacked tensor per field, not "
            "lists of small ones), no Python objects or strings in the batch, or "
            "torch.multiprocessing.set_sharing_strategy('file_system') (no round trip per tensor)",
            "medium",
            "the wait and the ready batches are measured; what the hand-over costs is inferred",
            change=False,
        )
    if nw > 0 and not dl.get("persistent_workers"):
        settings = {"persistent_workers": True}
        return advise(
            "DataLoader workers restart and refill at every epoch",
            f"{_dataloader_call(settings)}: by the law {nw} workers keep up ({_law_text(ip)}), but the "
            "loop waited while they started again",
            "medium",
            "the wait and the workers' pace are measured; the restarts are inferred",
        )
    return None


# ---- pin_memory -----------------------------------------------------------------------------------
def pin_memory(f: Facts) -> Optional[Recommendation]:
    if f.step_us <= 0:
        return None
    h2d = [c for c in f.copies if f.copy_is_h2d(c)]
    pageable = [c for c in h2d if f.copy_is_pageable(c) is True]
    dl = f.dataloader
    if pageable:
        rows, what = pageable, "host-to-device copies from pageable memory"
    elif (
        dl is not None
        and dl.get("pin_memory") is False
        and f.ran_gpu_work
        and not any(f.copy_is_pageable(c) is False for c in h2d)
    ):
        rows, what = h2d, "host-to-device copies of batches from a DataLoader with pin_memory=False"
    else:
        return None
    if rows:
        copy_us = f.per_step(sum(f.copy_total_us(c) for c in rows))
        copy_pct = 100.0 * copy_us / f.step_us
        if f.us("memcpy") > 0:  # copies hidden behind kernels do not lengthen the step
            copy_pct = min(copy_pct, f.pct("memcpy"))
    else:
        copy_us, copy_pct = f.us("memcpy"), f.pct("memcpy")
    if copy_pct < COPY_MIN_PCT:
        return None
    count = f.per_step(sum(f.copy_count(c) for c in rows))
    nbytes = f.per_step(sum(f.copy_bytes(c) for c in rows))
    gbps = nbytes / (copy_us * 1e3) if copy_us > 0 else None
    settings = (
        "DataLoader(..., pin_memory=True)"
        if dl is not None
        else "DataLoader(..., pin_memory=True) (or tensor.pin_memory() on your own host buffers)"
    )
    return recommendation(
        "pin_memory",
        "Copies to the GPU come from pageable memory and block the host",
        summary=f"{count:.0f} {what} per step, {nbytes / 1e6:.1f} MB in {_ms(copy_us)}"
        + (f" ({gbps:.1f} GB/s)" if gbps else "")
        + f": {copy_pct:.1f}% of the step",
        numbers={
            "h2d_copies_per_step": count,
            "h2d_bytes_per_step": nbytes,
            "h2d_us_per_step": copy_us,
            "copy_pct": copy_pct,
            "achieved_gbps": gbps,
            "dataloader_pin_memory": dl.get("pin_memory") if dl else None,
        },
        bound_pct=copy_pct,
        confidence="high" if pageable else "medium",
        confidence_reason=(
            "the copies' host memory kind is recorded as pageable"
            if pageable
            else "the loader does not pin; the copies' memory kind was not recorded"
        ),
        fix=f"{settings} and x = x.to(device, non_blocking=True): pinned copies run at full PCIe speed "
        "and overlap with kernels instead of blocking the host",
    )


# ---- host_sync ------------------------------------------------------------------------------------
def _sync_fix(op: str, call: str) -> str:
    if not op:  # made outside any host op: only the runtime call is known
        if "event" in call.lower():
            return (
                f"{call} outside any op: a CUDA event waited on in the loop (torch.cuda.Event.synchronize(), "
                "elapsed_time(), or timing code in a library): wait on events only outside the step"
            )
        op = call
    o = op.lower()
    if "item" in o or "local_scalar" in o:
        return (
            "`.item()` (aten::_local_scalar_dense) waits for the GPU: accumulate on the GPU "
            "(running_loss += loss.detach()) and call .item() once every N steps for logging"
        )
    if "nonzero" in o or "masked_select" in o or "unique" in o or "index" in o:
        return (
            f"{op} has a data-dependent output size, so the host waits for the GPU: use fixed-size "
            "ops (torch.where, a multiplied mask) inside the step"
        )
    if "synchron" in o:
        return "torch.cuda.synchronize() in the loop: remove it (keep it only around timing code)"
    if "to" in o or "copy" in o or "cpu" in o:
        return (
            f"{op} copies to the host and waits: keep the tensor on the GPU, or copy with "
            "non_blocking=True into a pinned buffer and read it a step later"
        )
    return (
        f"{op} blocks the host until the GPU finishes: avoid .item(), .cpu(), .tolist(), printing or "
        "`if tensor:` on CUDA tensors inside the step"
    )


def host_sync(f: Facts) -> Optional[Recommendation]:
    rows = f.syncs
    if not rows or f.num_steps == 0:
        return None
    per_step = f.per_step(sum(f.sync_count(r) for r in rows))
    idle = _unexplained_idle_pct(f)
    if per_step < SYNC_MIN_PER_STEP:
        return None
    by_op: dict[tuple, list[float]] = {}
    for r in rows:
        acc = by_op.setdefault((f.sync_op(r), f.sync_kind(r)), [0.0, 0.0])
        acc[0] += f.sync_count(r)
        acc[1] += f.sync_total_us(r)
    (op, call), (top_count, _) = max(by_op.items(), key=lambda kv: (kv[1][0], kv[1][1]))
    top_op = op or call or "unknown call"
    wait_us = f.per_step(sum(f.sync_total_us(r) for r in rows))
    # Without the syncs the step cannot be shorter than the host's own work (the step minus the
    # time it sat blocked) nor than the GPU's: the saving is at most min(blocked, GPU idle).
    bound = min(100.0 * wait_us / f.step_us, idle) if f.step_us > 0 else 0.0
    if bound < SYNC_MIN_BOUND_PCT:
        return None
    return recommendation(
        "host_sync",
        f"The host waits for the GPU {per_step:.0f} times per step (mostly in {top_op})",
        summary=f"{per_step:.1f} host-blocking synchronisations per step ({f.per_step(top_count):.1f} in "
        f"{top_op}), {_ms(wait_us)} blocked per step; the GPU idles {idle:.0f}% of the step for "
        "reasons other than input loading",
        numbers={
            "syncs_per_step": per_step,
            "top_op": top_op,
            "top_op_syncs_per_step": f.per_step(top_count),
            "blocked_us_per_step": wait_us,
            "blocked_pct": 100.0 * wait_us / f.step_us,
            "gpu_idle_not_dataloader_pct": idle,
        },
        bound_pct=bound,
        confidence="high" if per_step >= 10 else "medium",
        confidence_reason="each sync drains the GPU's queue; the gain is bounded by both the host's "
        "blocked time and the GPU's idle time, both measured",
        fix=_sync_fix(op, call),
    )


# ---- launch_bound ---------------------------------------------------------------------------------
def launch_bound(f: Facts) -> Optional[Recommendation]:
    calls = f.kernel_calls
    if calls <= 0 or f.num_steps == 0:
        return None
    per_step = f.per_step(calls)
    mean_us = f.kernel_total_us / calls
    host_pct = f.pct("runtime") + f.pct("cpu_exec")
    idle = _unexplained_idle_pct(f)
    if (
        mean_us >= LAUNCH_MAX_MEAN_KERNEL_US
        or per_step < LAUNCH_MIN_PER_STEP
        or host_pct < LAUNCH_MIN_HOST_PCT
        or idle < 2 * UNEXPLAINED_IDLE_MIN_PCT
    ):
        return None
    dl = f.dataloader
    batch = dl.get("batch_size") if dl else None
    bigger = f"batch_size={2 * batch} (now {batch})" if isinstance(batch, int) and batch else "a larger batch"
    return recommendation(
        "launch_bound",
        "Many short kernels: the GPU waits for the host to launch them",
        summary=f"{per_step:.0f} kernel launches per step averaging {mean_us:.1f} us each; the host spends "
        f"{host_pct:.0f}% of the step in launches and operators while the GPU idles {idle:.0f}%",
        numbers={
            "launches_per_step": per_step,
            "mean_kernel_us": mean_us,
            "runtime_pct": f.pct("runtime"),
            "cpu_exec_pct": f.pct("cpu_exec"),
            "gpu_idle_not_dataloader_pct": idle,
        },
        bound_pct=idle,
        confidence="medium",
        confidence_reason="short kernels and a busy host are measured; graphs remove launch cost, not "
        "the kernels' own time",
        fix="model = torch.compile(model, mode='reduce-overhead') (fuses kernels and replays them as a CUDA "
        f"graph), or capture the step with torch.cuda.graphs; or {bigger} so the same launches do "
        "more work each",
    )


# ---- low_utilization / batch_size / memory_capacity ---------------------------------------------
def _memory_room(f: Facts) -> Optional[float]:
    """Peak allocated memory as a share of the device's; None when unknown, or above 100% (which
    cannot be: the report's warnings say so, and no rule reads it as a fact)."""
    peak, total = f.peak_allocated_bytes, f.memory_total_bytes
    if peak is None or not total or peak > total:
        return None
    return 100.0 * peak / total


def _bigger_batch(f: Facts, factor: int) -> str:
    dl = f.dataloader
    batch = dl.get("batch_size") if dl else None
    if isinstance(batch, int) and batch:
        return f"DataLoader(..., batch_size={batch * factor}) (now {batch})"
    return f"a {factor}x larger batch"


def low_utilization(f: Facts) -> Optional[Recommendation]:
    util = _mean_device(f, "utilization_pct")
    if util is None or util >= LOW_UTILIZATION_PCT:
        return None
    mem_pct = _memory_room(f)
    if mem_pct is not None and mem_pct < MEMORY_LOW_PCT:
        return None  # memory_capacity says the same with the room for a larger batch
    idle = _unexplained_idle_pct(f)
    if idle < UNEXPLAINED_IDLE_MIN_PCT:
        return None  # the idle time is waiting for data: the dataloader rule covers it
    return recommendation(
        "low_utilization",
        f"The GPU runs kernels only {util:.0f}% of the time",
        summary=f"GPU utilization {util:.0f}% (< {LOW_UTILIZATION_PCT:.0f}%); {idle:.0f}% of the step the "
        "GPU idles for reasons other than input loading"
        + (f"; peak memory {mem_pct:.0f}% of the device" if mem_pct is not None else ""),
        numbers={"utilization_pct": util, "gpu_idle_not_dataloader_pct": idle, "peak_memory_pct": mem_pct},
        bound_pct=idle,
        confidence="low",
        confidence_reason="low utilization has several causes; fix host_sync/launch_bound first when "
        "they fire; a larger batch changes the optimisation (scale the learning rate)",
        fix=f"{_bigger_batch(f, 2)} if memory allows"
        + (f" (peak {mem_pct:.0f}% of device memory)" if mem_pct is not None else "")
        + ": more work per kernel launch and per step; bound is per sample",
    )


def _small_grids(f: Facts) -> bool:
    """Busy GPU whose kernels leave SMs empty: < 1 block per SM on average (kernel table), or, where
    the table has no block counts, Est. SM efficiency < 50% at utilization >= 50%."""
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    if util is None or sm is None or util < LOW_UTILIZATION_PCT:
        return False
    blocks = f.mean_blocks_per_sm()
    return blocks < 1.0 if blocks is not None else sm < LOW_SM_EFFICIENCY_PCT


def batch_size(f: Facts) -> Optional[Recommendation]:
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    blocks = f.mean_blocks_per_sm()
    if not _small_grids(f):
        return None
    mem_pct = _memory_room(f)
    if mem_pct is not None and mem_pct < MEMORY_LOW_PCT:
        return None  # memory_capacity says the same with the room for a larger batch
    fill = min(1.0, sm / util)  # mean share of the SMs busy while some kernel runs
    bound = f.pct("kernel") * (1.0 - fill)
    if bound < 1.0:
        return None
    return recommendation(
        "batch_size",
        "Kernels are too small to fill the GPU's SMs",
        summary=f"Est. SM efficiency {sm:.0f}% at {util:.0f}% utilization: while kernels run, about "
        f"{100 * fill:.0f}% of the SMs have work"
        + (f"; mean {blocks:.2f} blocks per SM" if blocks is not None else ""),
        numbers={
            "sm_efficiency_pct": sm,
            "utilization_pct": util,
            "mean_blocks_per_sm": blocks,
            "kernel_pct": f.pct("kernel"),
        },
        bound_pct=bound,
        confidence="medium",
        confidence_reason="grid sizes are measured; a larger batch fills SMs but changes the optimisation",
        fix=f"{_bigger_batch(f, 2)}, or several samples per kernel (torch.compile fuses small ops); "
        "bound is per sample",
    )


def memory_capacity(f: Facts) -> Optional[Recommendation]:
    mem_pct = _memory_room(f)
    if mem_pct is None:
        return None
    peak, total = f.peak_allocated_bytes, f.memory_total_bytes
    numbers = {"peak_allocated_bytes": peak, "memory_total_bytes": total, "peak_memory_pct": mem_pct}
    if mem_pct > MEMORY_HIGH_PCT:
        return recommendation(
            "memory_capacity",
            f"Peak device memory is {mem_pct:.0f}% of the GPU's",
            summary=f"peak allocated {peak / 2**30:.1f} GiB of {total / 2**30:.1f} GiB "
            f"(> {MEMORY_HIGH_PCT:.0f}%): "
            "one larger batch or sequence away from out-of-memory, and the allocator may be "
            "freeing and retrying",
            numbers=numbers,
            bound_pct=0.0,
            confidence="high",
            confidence_reason="allocator peak against device capacity; this rule prevents failures, "
            "it does not promise speed",
            fix="torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) on the largest blocks, "
            "autocast to bf16/fp16 (halves activations), or a smaller batch with gradient accumulation",
        )
    util = _mean_device(f, "utilization_pct")
    sm = _mean_device(f, "sm_efficiency_pct")
    underused = (util is not None and util < LOW_UTILIZATION_PCT) or _small_grids(f)
    if mem_pct >= MEMORY_LOW_PCT or not underused:
        return None
    factor = max(2, min(8, int(0.8 * 100.0 / max(mem_pct, 1.0))))
    fits = _batch_that_fits(f, MEMORY_HEADROOM_PCT / 100.0 * total)
    if fits is not None and fits[0] >= 2 * fits[1]:
        factor = max(2, min(8, fits[0] // fits[1]))
    idle = (
        _unexplained_idle_pct(f)
        if util is not None and util < LOW_UTILIZATION_PCT
        else f.pct("kernel") * (1.0 - min(1.0, (sm or 0.0) / max(util or 1.0, 1.0)))
    )
    return recommendation(
        "memory_capacity",
        f"Only {mem_pct:.0f}% of device memory used while the GPU is underused",
        summary=f"peak allocated {peak / 2**30:.2f} GiB of {total / 2**30:.1f} GiB; GPU utilization "
        + (f"{util:.0f}%" if util is not None else "unknown")
        + (f", Est. SM efficiency {sm:.0f}%" if sm is not None else ""),
        numbers={
            **numbers,
            "utilization_pct": util,
            "sm_efficiency_pct": sm,
            "batch_factor": factor,
            **(
                {"per_sample_activation_bytes": fits[2], "batch_that_fits_80pct": fits[0]}
                if fits is not None
                else {}
            ),
        },
        bound_pct=idle,
        confidence="medium",
        confidence_reason="memory headroom is measured; activations grow about linearly with the batch"
        + (" (measured per sample at the peak)" if fits is not None else ""),
        fix=f"{_bigger_batch(f, factor)}: about {factor}x the batch still fits in 80% of device memory"
        + (
            f" ({_gib(fits[2] * fits[1])} of activations at batch {fits[1]}: {_mib(fits[2])} a sample)"
            if fits is not None
            else ""
        )
        + "; scale the learning rate with it; bound is per sample",
    )


def _gib(n: float) -> str:
    """A size in the unit that reads best: GiB from 1 GiB (two decimals), else MiB or KiB."""
    if abs(n) >= 2**40:
        return f"{n / 2**40:.2f} TiB"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else _mib(n)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if abs(n) >= 2**20 else f"{n / 2**10:.1f} KiB"


def _batch_that_fits(f: Facts, budget: float) -> Optional[tuple[int, int, int]]:
    """(batch that fits in ``budget`` bytes, the batch now, activation bytes per sample) on the
    busiest GPU, from its peak's composition: activations and temporaries grow with the batch, the
    rest does not. None without a composition or a batch size."""
    batch = f.batch_size
    if not batch:
        return None
    best = None
    for device, c in f.memory_compositions.items():
        if device == "-1":
            continue
        scaled = (c.get("activations") or 0) + (c.get("temporary") or 0)
        if scaled <= 0:
            continue
        fixed = sum(c.get(k) or 0 for k in ("parameters", "gradients", "optimizer_state", "unknown"))
        per_sample = scaled // batch
        if per_sample <= 0:
            continue
        fits = int(max(0, budget - fixed) // per_sample)
        if best is None or fits < best[0]:
            best = (fits, batch, per_sample)
    return best


# ---- memory_leak / memory_fragmentation / out_of_memory --------------------------------------------
def memory_leak(f: Facts) -> Optional[Recommendation]:
    flagged = {d: g for d, g in f.memory_growth.items() if g.get("flagged")}
    if not flagged:
        return None
    device, g = max(flagged.items(), key=lambda kv: kv[1].get("bytes_per_step") or 0.0)
    where = "the host" if device == "-1" else f"GPU {device}"
    rate = float(g.get("bytes_per_step") or 0.0)
    steps = g.get("steps") or []
    ends = g.get("end_bytes") or []
    ops = g.get("ops") or []
    peak = (f.memory_peaks.get(device) or {}).get("bytes")
    capacity = f.device_capacity(device)
    left = (capacity - peak) / rate if capacity and isinstance(peak, (int, float)) and rate > 0 else None
    owners = ", ".join(
        f"{o.get('name') or '(outside any operator)'} {_mib(o.get('bytes_per_step') or 0)}/step"
        for o in ops[:3]
    )
    lossy = any("loss" in str(o.get("name", "")).lower() for o in ops[:3])
    return recommendation(
        "memory_leak",
        f"Memory on {where} grows by {rate / 1e6:.3g} MB every step",
        summary=f"allocated memory at step ends rose from {_mib(ends[0])} (step {steps[0]}) to "
        f"{_mib(ends[-1])} (step {steps[-1]}), higher at {g.get('rising_steps')} of {len(steps) - 1} "
        "step ends"
        + (f"; allocations left live across steps: {owners}" if owners else "")
        + (f"; at this rate the device is full in about {left:,.0f} steps" if left is not None else ""),
        numbers={
            "device": int(device),
            "mb_per_step": rate / 1e6,
            "steps": len(steps),
            "first_end_bytes": ends[0],
            "last_end_bytes": ends[-1],
            "steps_to_full": round(left) if left is not None else None,
            "top_op": ops[0].get("name") if ops else None,
        },
        bound_pct=0.0,
        confidence="high" if ops else "medium",
        confidence_reason="allocator levels at step ends, least-squares rate"
        + ("; the allocations that outlived their steps were matched to their operators" if ops else ""),
        fix=(
            "keep Python numbers, not tensors, for what you log or accumulate: losses.append(loss.item()) "
            "or total += loss.detach() instead of the tensor (which keeps its storage, and its graph)"
            if lossy
            else "find what keeps the tensors the named operators make alive across steps: a list or dict "
            "appended to every step (log loss.item(), keep .detach().cpu() copies), a cache keyed by the "
            "step (clear it), outputs kept with their graph (.detach())"
        ),
    )


def memory_fragmentation(f: Facts) -> Optional[Recommendation]:
    worst = None
    for device, p in f.memory_peaks.items():
        reserved, allocated = p.get("reserved_bytes"), p.get("bytes")
        capacity = f.device_capacity(device)
        if not isinstance(reserved, (int, float)) or not isinstance(allocated, (int, float)) or not capacity:
            continue
        idle = reserved - allocated
        if (
            idle >= FRAGMENTATION_MIN_BYTES
            and 100.0 * idle / reserved >= FRAGMENTATION_MIN_PCT
            and 100.0 * reserved / capacity >= FRAGMENTATION_NEAR_FULL_PCT
            and (worst is None or idle > worst[1])
        ):
            worst = (device, idle, reserved, allocated, capacity)
    if worst is None:
        return None
    device, idle, reserved, allocated, capacity = worst
    return recommendation(
        "memory_fragmentation",
        f"{100.0 * idle / reserved:.0f}% of the memory reserved on GPU {device} is unused at its peak",
        summary=f"at the peak {_gib(allocated)} allocated in {_gib(reserved)} reserved by the caching "
        f"allocator ({_gib(idle)} cached but unallocated) of {_gib(capacity)}: blocks split by other sizes "
        "cannot serve a large request, which then fails or makes the allocator free and retry",
        numbers={
            "device": int(device),
            "reserved_bytes": reserved,
            "allocated_bytes": allocated,
            "reserved_unallocated_bytes": idle,
            "memory_total_bytes": capacity,
        },
        bound_pct=0.0,
        confidence="medium",
        confidence_reason="allocated and reserved levels at the peak are measured; whether the cached "
        "blocks are too fragmented for the next request is not",
        fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before the first CUDA allocation: in "
        "the job's environment) lets segments grow instead of splitting fixed ones",
    )


def out_of_memory(f: Facts) -> Optional[Recommendation]:
    oom = f.out_of_memory
    if oom is None:
        return None
    where = "the host" if oom.get("device") == -1 else f"GPU {oom.get('device')}"
    c = oom.get("composition") or {}
    acts = (c.get("activations") or 0) + (c.get("temporary") or 0)
    held = sum(v for v in c.values() if isinstance(v, (int, float)))
    batch, fits = oom.get("batch_size"), oom.get("largest_batch_that_fits")
    per_sample, fixed, budget = oom.get("per_sample_bytes"), oom.get("fixed_bytes"), oom.get("budget_bytes")
    fixes = []
    if isinstance(fits, int) and isinstance(batch, int):
        if fits < batch:
            fixes.append(
                f"batch_size={max(fits, 1)} (now {batch}): {_mib(per_sample)} of activations a sample, "
                f"{_gib(fixed)} that does not grow with the batch, {_gib(budget)} for the allocator"
                + ("; keep the global batch with gradient accumulation" if fits >= 1 else "")
            )
        else:
            fixes.append(
                f"the measured {_mib(per_sample)} a sample fits {fits} samples, more than the {batch} that "
                "failed: the failing step needed more than a typical one (a longer sequence, a larger "
                "image): cap or bucket the input sizes"
            )
    if acts:
        # The modules (by path in the module view) whose allocations held the most at the failure;
        # the model itself ("") is no block to checkpoint.
        biggest = [m for m in oom.get("top_modules") or [] if m.get("name")][:3]
        modules = ", ".join(f"{m['name']} {_mib(m.get('bytes') or 0)}" for m in biggest)
        if modules:
            modules = f", those around the modules that made most of it ({modules}),"
        elif not f.module_view:
            modules = " (gpuprof.profile(with_modules=True) names the modules that made it)"
        fixes.append(
            f"activation checkpointing: {_gib(acts)} of activations"
            + (f" ({100.0 * acts / held:.0f}% of what was held)" if held else "")
            + ": torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) on the largest blocks"
            + modules
            + " keeps only their inputs, for about a third more compute"
        )
        half = None
        if (
            isinstance(per_sample, int)
            and per_sample > 0
            and isinstance(budget, int)
            and isinstance(fixed, int)
        ):
            half = max(0, (budget - fixed) // max(1, per_sample // 2))
        fixes.append(
            f"mixed precision (torch.autocast('cuda', dtype=torch.bfloat16)) if the run is in float32: "
            f"activations in 2 bytes instead of 4, about {_gib(acts / 2)} less"
            + (f"; about batch {half} would fit" if half is not None else "")
        )
    idle = oom.get("reserved_unallocated_bytes")
    requested = oom.get("requested_bytes")
    capacity = oom.get("capacity_bytes")
    if (
        isinstance(idle, int)
        and idle > 0
        and ((isinstance(requested, int) and idle >= requested) or (capacity and idle >= 0.05 * capacity))
    ):
        fixes.append(
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {_gib(idle)} was reserved but unallocated"
            + (
                f", more than the {_gib(requested)} requested"
                if isinstance(requested, int) and idle >= requested
                else ""
            )
        )
    state = c.get("optimizer_state") or 0
    if held and state >= 0.25 * held:
        fixes.append(
            f"optimizer state is {_gib(state)} ({100.0 * state / held:.0f}%): shard it across ranks "
            "(FSDP, ZeRO) or keep it in 8 bits (bitsandbytes' Adam8bit)"
        )
    if not fixes:
        fixes.append("a smaller batch, activation checkpointing or mixed precision")
    return recommendation(
        "out_of_memory",
        f"Out of memory on {where}"
        + (f": {_gib(requested)} requested" if isinstance(requested, int) else "")
        + (
            f" with {_gib(oom['allocated_bytes'])} allocated"
            if isinstance(oom.get("allocated_bytes"), int)
            else ""
        )
        + (f" of {_gib(capacity)}" if capacity else ""),
        summary=f"{oom.get('error') or 'error'} on {where}"
        + (f"; held at the failure: {', '.join(f'{k} {_gib(v)}' for k, v in c.items() if v)}" if c else ""),
        numbers={
            "device": oom.get("device"),
            "requested_bytes": requested,
            "allocated_bytes": oom.get("allocated_bytes"),
            "capacity_bytes": capacity,
            "batch_size": batch,
            "largest_batch_that_fits": fits,
            "per_sample_bytes": per_sample,
        },
        bound_pct=0.0,
        confidence="high" if oom.get("composition") else "medium",
        confidence_reason="what was held at the failure is measured"
        + (
            "; the batch that fits assumes activations grow linearly with the batch"
            if fits is not None
            else ""
        ),
        fix="; ".join(f"({i}) {x}" for i, x in enumerate(fixes, 1)),
    )


# ---- mixed_precision / channels_last / optimizer --------------------------------------------------
def mixed_precision(f: Facts) -> Optional[Recommendation]:
    best = None
    for d in f.busy_devices:
        cc = f.compute_capability(d)
        eligible = f.device_num(d, "tc_eligible_pct")
        tc = f.device_num(d, "tensor_core_pct") or 0.0
        if cc is None or cc < TENSOR_CORE_MIN_CC or eligible is None or eligible <= 0:
            continue
        if tc >= 0.5 * eligible:
            continue  # already on tensor cores for most of the eligible work
        if best is None or eligible - tc > best[2] - best[3]:
            best = (d, cc, eligible, tc)
    if best is None:
        return None
    d, cc, eligible, tc = best
    bound = f.pct("kernel") * (eligible - tc) / 100.0
    name = d.get("name") or f"GPU {d.get('id', 0)}"
    if cc >= 8.0:
        fix = (
            "with torch.autocast('cuda', dtype=torch.bfloat16): loss = ... around the forward pass "
            "(bf16 needs no GradScaler); and torch.set_float32_matmul_precision('high') so the FP32 "
            f"matmuls that remain use TF32 ({name}, compute capability {cc:.1f}, has both)"
        )
    else:
        fix = (
            "with torch.autocast('cuda', dtype=torch.float16): loss = ... and scaler = "
            "torch.amp.GradScaler('cuda'); scaler.scale(loss).backward(); scaler.step(opt); "
            f"scaler.update() ({name}, compute capability {cc:.1f}, has FP16 tensor cores, no BF16/TF32)"
        )
    return recommendation(
        "mixed_precision",
        "Matrix and convolution work runs in FP32 on tensor-core hardware",
        summary=f"{eligible:.0f}% of kernel time is launched by tensor-core-eligible operators, "
        f"{tc:.0f}% runs on tensor cores ({name}, compute capability {cc:.1f})",
        numbers={
            "tc_eligible_pct": eligible,
            "tensor_core_pct": tc,
            "compute_capability": cc,
            "kernel_pct": f.pct("kernel"),
        },
        bound_pct=bound,
        confidence="high" if eligible >= 20 else "medium",
        confidence_reason="eligible operators and tensor-core kernels are measured; the gain depends on "
        "how compute-bound those kernels are",
        fix=fix,
    )


def channels_last(f: Facts) -> Optional[Recommendation]:
    if not f.has_convolutions or f.step_us <= 0:
        return None
    ccs = [f.compute_capability(d) for d in f.busy_devices]
    if not any(cc is not None and cc >= TENSOR_CORE_MIN_CC for cc in ccs):
        return None
    conv_us = f.per_step(f.layout_conversion_us)
    share = 100.0 * conv_us / f.step_us
    if share < LAYOUT_MIN_PCT:
        return None
    return recommendation(
        "channels_last",
        "Convolutions convert between NCHW and NHWC on every call",
        summary=f"layout-conversion kernels (nchwToNhwc/nhwcToNchw) take {_ms(conv_us)} per step, "
        f"{share:.1f}% of the step, in a convolution net on tensor-core hardware",
        numbers={"layout_conversion_us_per_step": conv_us, "layout_conversion_pct": share},
        bound_pct=share,
        confidence="medium",
        confidence_reason="the conversion kernels are measured; channels_last removes them when every "
        "layer supports it",
        fix="model = model.to(memory_format=torch.channels_last) and x = x.to(device, "
        "memory_format=torch.channels_last, non_blocking=True), with autocast on",
    )


_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#(\w+)\.step|optimizer\.step", re.IGNORECASE)
_FUSED_KERNEL = re.compile(r"fused_adam|fused_sgd|_fused_|FusedAdam|fused_adamw", re.IGNORECASE)
_FUSED_OP = re.compile(r"^aten::_fused_(adam|adamw|sgd|adagrad)", re.IGNORECASE)
_FOREACH_KERNEL = re.compile(r"multi_tensor_apply", re.IGNORECASE)


def optimizer(f: Facts) -> Optional[Recommendation]:
    # torch's Optimizer.step#<Class>.step is a user range (the "ranges" table); reports and
    # hand-made tables that list it as an operator are read too.
    ranges = f.ranges_matching(_OPTIMIZER_STEP)
    rows = ranges or f.operators_matching(_OPTIMIZER_STEP)
    if (
        not rows
        or f.step_us <= 0
        or f.kernel_time_matching(_FUSED_KERNEL) > 0
        or f.operators_matching(_FUSED_OP)
    ):  # already fused (on the CPU: no kernels, the op)
        return None
    own = f.range_own_us if ranges else f.operator_time_us
    opt_us = f.per_step(sum(own(r) for r in rows))
    share = 100.0 * opt_us / f.step_us
    if share < OPTIMIZER_MIN_PCT:
        return None
    m = re.search(r"#(\w+)\.step", row_name(rows[0]))
    cls = m.group(1) if m else "YourOptimizer"
    foreach = f.kernel_time_matching(_FOREACH_KERNEL) > 0
    on_gpu = f.ran_gpu_work
    if cls in ("Adam", "AdamW", "SGD", "Adagrad") and (on_gpu or foreach):
        change = f"torch.optim.{cls}(params, ..., fused=True)"
        how = "one fused kernel per parameter group instead of several per parameter"
    else:
        change = f"torch.optim.{cls}(params, ..., foreach=True)"
        how = "one multi-tensor kernel per step over all parameters instead of a loop per parameter"
    return recommendation(
        "optimizer",
        f"The optimizer step ({cls}) takes {share:.0f}% of the step",
        summary=f"{cls}.step takes {_ms(opt_us)} per step ({share:.1f}%)"
        + ("; it already uses foreach (multi_tensor_apply) kernels" if foreach else ""),
        numbers={
            "optimizer": cls,
            "optimizer_us_per_step": opt_us,
            "optimizer_pct": share,
            "foreach_kernels": foreach,
        },
        bound_pct=share,
        confidence="medium",
        confidence_reason="the optimizer's time is measured; fused/foreach removes its per-parameter "
        "overhead, not its arithmetic",
        fix=f"{change}: {how}",
    )


# ---- distributed ----------------------------------------------------------------------------------
def data_parallel(f: Facts) -> Optional[Recommendation]:
    devices = f.busy_devices
    world = f.distributed.get("world_size")
    if len(devices) < 2 or (isinstance(world, int) and world > 1):
        return None
    utils = [f.device_num(d, "utilization_pct") for d in devices]
    utils = [u for u in utils if u is not None]
    mean_util = sum(utils) / len(utils) if utils else None
    bound = 100.0 - mean_util if mean_util is not None else f.gpu_idle_pct
    return recommendation(
        "data_parallel",
        f"One process drives {len(devices)} GPUs (DataParallel)",
        summary=f"{len(devices)} GPUs ran kernels from one process with no distributed job"
        + (f"; mean GPU utilization {mean_util:.0f}%" if mean_util is not None else ""),
        numbers={"gpus": len(devices), "mean_utilization_pct": mean_util},
        bound_pct=bound,
        confidence="medium",
        confidence_reason="several GPUs in one process is DataParallel's signature; its scatter/gather "
        "and single Python thread are what DDP removes",
        fix=f"torchrun --nproc_per_node={len(devices)} train.py with torch.distributed.init_process_group"
        "('nccl') and model = DistributedDataParallel(model, device_ids=[local_rank]) instead of "
        "nn.DataParallel(model), with a DistributedSampler",
    )


def nccl_backend(f: Facts) -> Optional[Recommendation]:
    info = f.distributed
    backend = str(info.get("backend") or "")
    world = info.get("world_size")
    if (
        not backend
        or backend.lower() == "nccl"
        or not (isinstance(world, int) and world > 1)
        or not f.ran_gpu_work
    ):
        return None
    return recommendation(
        "nccl_backend",
        f"Distributed training on GPUs uses the {backend} backend, not NCCL",
        summary=f"world size {world} with backend {backend!r} while the model runs on the GPU; "
        f"communication is {f.pct('communication'):.0f}% of the step",
        numbers={"backend": backend, "world_size": world, "communication_pct": f.pct("communication")},
        bound_pct=f.pct("communication"),
        confidence="high",
        confidence_reason="the backend is recorded in the trace's distributedInfo",
        fix="torch.distributed.init_process_group(backend='nccl') (or 'cuda:nccl,cpu:gloo' when CPU "
        "tensors are also reduced): NCCL moves GPU tensors GPU-to-GPU without host copies",
    )


def _stragglers(f: Facts) -> list:
    return [s for s in (f.data.get("stragglers") or []) if isinstance(s, dict)]


_STRAGGLER_FIX = {
    "dataloader_us": "data skew or a slower input pipeline on that rank: give every rank the same "
    "amount of data per step (DistributedSampler(dataset, drop_last=True), samples of "
    "similar size or a length-grouped sampler), and the same DataLoader num_workers",
    "cpu_exec_us": "extra host work on that rank: move logging, metrics, evaluation and checkpointing "
    "off the step (every N steps, or on a background thread: torch.distributed.checkpoint."
    "async_save), or do them on every rank at the same step; check for a slower host CPU",
    "other_us": "time outside any recorded operator on that rank (Python work, sleeps, I/O such as "
    "logging or checkpointing on rank 0): do it every N steps or in the background",
    "kernel_us": "a slower GPU or more device work on that rank: check its clocks and temperature "
    "(nvidia-smi -q -d CLOCK,TEMPERATURE), other jobs on it, and that every rank runs the "
    "same shapes",
}


def straggler(f: Facts) -> Optional[Recommendation]:
    found = _stragglers(f)
    if not found or f.step_us <= 0:
        return None
    s = found[0]
    cat = str(s.get("category", ""))
    excess = float(s.get("excess_us") or 0.0)
    share = 100.0 * excess / f.step_us
    waits = [
        r.get("collective_wait_us") or 0.0
        for r in (f.data.get("ranks") or [])
        if isinstance(r, dict) and r.get("rank") != s.get("rank")
    ]
    return recommendation(
        "straggler",
        f"Rank {s.get('rank')} is a straggler: every other rank waits for it",
        summary=f"rank {s.get('rank')} spends {_ms(excess)} more per step outside collectives than the "
        f"median rank ({s.get('excess_pct', 0):.0f}% more), mostly in {cat.removesuffix('_us')}; "
        f"the other ranks wait {_ms(sum(waits) / len(waits) if waits else 0.0)} per step in "
        "collectives for it",
        numbers={
            "rank": s.get("rank"),
            "excess_us": excess,
            "excess_pct": s.get("excess_pct"),
            "category": cat,
            "stragglers": len(found),
        },
        bound_pct=share,
        confidence="high",
        confidence_reason="measured on every rank over the same step numbers: the excess outside "
        "collectives on this rank matches the others' waiting inside them",
        fix=_STRAGGLER_FIX.get(
            cat,
            "find what that rank does more than the others in "
            f"{cat.removesuffix('_us')} (its report's tables) and even it out",
        ),
    )


def communication(f: Facts) -> Optional[Recommendation]:
    share = f.pct("communication")
    if share <= COMMUNICATION_PCT:
        return None
    if _stragglers(f):
        return None  # the collectives wait for a slow rank: the straggler rule says which
    info = f.distributed
    world = info.get("world_size")
    on_gpu = f.ran_gpu_work or f.cuda_available is True
    return recommendation(
        "communication",
        "Gradient communication is exposed, not hidden behind compute",
        summary=f"communication not overlapped by compute kernels is {share:.0f}% of the step "
        f"({_ms(f.us('communication'))})" + (f", world size {world}" if world else ""),
        numbers={
            "communication_pct": share,
            "communication_us": f.us("communication"),
            "world_size": world,
            "backend": info.get("backend"),
        },
        bound_pct=share,
        confidence="medium",
        confidence_reason="the exposed communication time is measured (kernels take priority in the "
        "breakdown, so this is time no compute overlapped)",
        fix="accumulate gradients over k steps with `with model.no_sync():` on all but the last, "
        f"a larger per-{'GPU' if on_gpu else 'process'} batch, "
        "DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True), or "
        "compress gradients: model.register_comm_hook(None, torch.distributed.algorithms."
        "ddp_comm_hooks.default_hooks.bf16_compress_hook)",
    )


# ---- low_mfu --------------------------------------------------------------------------------------
_LOW_PRECISION = ("bf16", "fp16", "tf32", "fp8", "int8")


def low_mfu(f: Facts) -> Optional[Recommendation]:
    mfu = f.flops_num("mfu_pct")
    peak = f.flops_num("peak_tflops")
    if mfu is None or peak is None:
        return None  # no peak known (the report's note says how to give it): no MFU to judge
    estimate = f.flops.get("peak_estimate") is True
    matmul_pct = f.flops_num("matmul_time_pct") or 0.0
    if estimate:
        # A CPU's peak is an estimate from its ISA and clock; small training loops never near it.
        # The rule speaks only where matrix work fills most of the step and still runs far below.
        if mfu >= LOW_MFU_CPU_PCT or matmul_pct < LOW_MFU_CPU_MATMUL_PCT:
            return None
    elif mfu >= LOW_MFU_PCT:
        return None
    dtype = str(f.flops.get("dtype") or "unknown")
    rows = [r for r in f.roofline if r.get("flop_class") == "matmul"]
    mm_us = sum(_num_or0(r.get("time_us")) for r in rows)

    def share(pred) -> float:
        return 100.0 * sum(_num_or0(r.get("time_us")) for r in rows if pred(r)) / mm_us if mm_us > 0 else 0.0

    memory_bound = share(lambda r: r.get("bound") == "memory")
    small = share(
        lambda r: _num_or0(r.get("flops")) / max(_num_or0(r.get("calls")), 1.0) < SMALL_MATMUL_FLOPS
    )
    tc = f.flops_num("tensor_core_pct")
    # Each gap as a share of the step: the most that closing it could give back. Waiting for the
    # input pipeline and for communication is the dataloader and communication rules' own.
    waits = f.pct("dataloader") + f.pct("communication")
    gaps = {
        "outside": max(0.0, 100.0 - matmul_pct - waits),
        "memory_bound": matmul_pct * memory_bound / 100.0,
        "small": matmul_pct * small / 100.0,
        "tensor_cores": matmul_pct * (100.0 - tc) / 100.0
        if tc is not None and dtype in _LOW_PRECISION and tc < 50.0
        else 0.0,
    }
    where = max(gaps, key=lambda k: gaps[k])
    peak_text = f"the {dtype} dense peak {peak:.4g} TFLOP/s" + (
        " (an estimate: this machine's CPU, from its ISA, clock and cores)" if estimate else ""
    )
    said = {
        "outside": f"{gaps['outside']:.0f}% of the step runs outside matrix-class operators (products, "
        "convolutions, attention: what the peak is for), beside the input pipeline and communication",
        "memory_bound": f"{memory_bound:.0f}% of the matrix operators' time is in operators below the ridge "
        "point (memory-bound: too few FLOPs per byte moved)",
        "small": f"{small:.0f}% of the matrix operators' time is in calls smaller than a 256-cube product",
        "tensor_cores": f"{dtype} matrix work, but only {tc or 0:.0f}% of it runs on tensor cores",
    }
    fixes = {
        "outside": "fuse the elementwise and normalization work around the matrix operators: model = "
        "torch.compile(model); host synchronisations and launch gaps, where the other recommendations "
        "name them, count here too",
        "memory_bound": "give the matrix operators more work per byte: a larger batch (or sequence) per "
        "step, wider layers, bf16 inputs (half the bytes), and fuse what surrounds them: "
        "torch.compile(model)",
        "small": "batch the small products: a larger batch per step, one torch.bmm over many small "
        "matrices, and torch.compile(model, mode='reduce-overhead') (CUDA graphs) against launch gaps",
        "tensor_cores": "align the matrix sizes to multiples of 8 (16 for fp8) so cuBLAS/cuDNN pick "
        "tensor-core kernels, and check torch.backends.cudnn.allow_tf32 / "
        "torch.set_float32_matmul_precision('high') for fp32 work",
    }
    return recommendation(
        "low_mfu",
        f"Model FLOPs utilization is {mfu:.1f}% of the peak" + (" (estimated)" if estimate else ""),
        summary=f"MFU {mfu:.1f}% against {peak_text}; the largest gap: {said[where]}",
        numbers={
            "mfu_pct": mfu,
            "hfu_pct": f.flops_num("hfu_pct"),
            "peak_tflops": peak,
            "peak_estimate": estimate,
            "dtype": dtype,
            "matmul_time_pct": matmul_pct,
            "outside_matmul_pct": gaps["outside"],
            "memory_bound_matmul_pct": memory_bound,
            "small_matmul_pct": small,
            "tensor_core_pct": tc,
        },
        bound_pct=gaps[where],
        confidence="low" if estimate else "medium",
        confidence_reason="the peak is an estimate (this CPU's ISA, clock and cores), so is MFU"
        if estimate
        else "FLOPs, times and the peak are measured or from the vendor's table; the roofline shares come "
        "from the 20 longest operators with FLOPs",
        fix=fixes[where],
    )


def _num_or0(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


# Many small collectives: a call moves too little to amortise its fixed cost (NCCL's all_reduce is
# latency-bound below about 1 MiB; gloo's per-call cost on the CPU is larger still).
SMALL_COLLECTIVE_BYTES = 1 << 20
SMALL_COLLECTIVE_MIN_PER_STEP = 8.0
SMALL_COLLECTIVE_MIN_PCT = 5.0  # of the step, in those calls
# Bus bandwidth far below the link's: large enough calls (bandwidth-bound), one node's GPUs joined
# by NVLink, and a bus bandwidth below this share of the link's one-way bandwidth per GPU.
LOW_BUSBW_MIN_MEAN_BYTES = 16 << 20
LOW_BUSBW_PCT = 25.0
# NVLink bandwidth per GPU, one way (what nccl-tests' bus bandwidth is compared with), by the
# device's name: NVIDIA's data sheets (V100 SXM2: 6 links x 25 GB/s; A100 SXM4: 12 x 25; H100 and
# H200 SXM5: 18 x 25; B200: 18 x 50). PCIe parts are not here: their link depends on the slot.
NVLINK_GBPS = (
    (re.compile(r"\bB200\b"), 900.0, "B200 NVLink 5 (18 links x 50 GB/s)"),
    (re.compile(r"\bH200\b(?!\s*NVL)|\bH100\b.*\b(HBM3|SXM)"), 450.0, "H100/H200 NVLink 4 (18 x 25 GB/s)"),
    (re.compile(r"\bA100[- ]SXM"), 300.0, "A100 SXM4 NVLink 3 (12 links x 25 GB/s)"),
    (re.compile(r"\bV100[- ]SXM2"), 150.0, "V100 SXM2 NVLink 2 (6 links x 25 GB/s)"),
)


def _kb(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n < (1 << 20) else f"{n / (1 << 20):.1f} MiB"


def small_collectives(f: Facts) -> Optional[Recommendation]:
    rows = [
        r
        for r in f.collectives
        if r.get("name") in ("all_reduce", "reduce_scatter", "all_gather")
        and isinstance(r.get("bytes"), (int, float))
        and r.get("calls")
    ]
    if not rows or f.step_us <= 0 or not f.num_steps:
        return None
    row = max(rows, key=lambda r: float(r.get("total_us") or 0.0))
    calls = f.per_step(float(row["calls"]))
    mean_bytes = float(row["bytes"]) / float(row["calls"])
    share = 100.0 * f.per_step(float(row.get("total_us") or 0.0)) / f.step_us
    small = mean_bytes < SMALL_COLLECTIVE_BYTES
    if calls < SMALL_COLLECTIVE_MIN_PER_STEP or not small or share < SMALL_COLLECTIVE_MIN_PCT:
        return None
    group = row.get("process_group") or "?"
    desc = f" ({row['pg_desc']})" if row.get("pg_desc") else ""
    # The calls' time can go at best; no more than the communication the breakdown shows exposed.
    exposed = f.pct("communication")
    bound = min(share, exposed) if exposed > 0 else share
    return recommendation(
        "small_collectives",
        f"Many small {row['name']} calls: each moves too little to pay for itself",
        summary=f"{calls:.0f} {row['name']} calls per step in process group {group}{desc}, "
        f"{_kb(mean_bytes)} each on average, {_ms(f.per_step(float(row['total_us'])))} per step "
        f"({share:.0f}% of the step)",
        numbers={
            "collective": row["name"],
            "process_group": row.get("process_group"),
            "calls_per_step": round(calls, 2),
            "mean_bytes": round(mean_bytes),
            "collective_pct": round(share, 2),
            "busbw_gbps": row.get("busbw_gbps"),
        },
        bound_pct=bound,
        confidence="medium",
        confidence_reason="the calls, their sizes and times are measured; how much merging them saves "
        "depends on the fixed cost per call of the backend and the link",
        fix="put more gradient in each call: DDP(model, bucket_cap_mb=100) (the default is 25; FSDP: "
        "wrap larger modules, FullyShardedDataParallel(..., auto_wrap_policy=size_based_auto_wrap_policy "
        "with a larger min_num_params)); gradients reduced by hand: flatten them "
        "(torch._utils._flatten_dense_tensors) and all_reduce once",
    )


def _link(device_name: str) -> Optional[tuple[float, str]]:
    for pattern, gbps, what in NVLINK_GBPS:
        if pattern.search(device_name):
            return gbps, what
    return None


def low_bus_bandwidth(f: Facts) -> Optional[Recommendation]:
    # Only over transfer time (the cross-rank report): a rank's own time includes waiting for the
    # slowest rank, which is not the link's fault.
    ranks = f.ranks
    hosts = {r.get("hostname") for r in ranks}
    if len(ranks) < 2 or len(hosts) != 1 or f.step_us <= 0 or not f.num_steps:
        return None
    names = [str(d.get("name") or "") for d in f.devices]
    link = _link(names[0]) if names else None
    if link is None:
        return None
    peak, what = link
    rows = [
        r
        for r in f.collectives
        if r.get("timed_by") == "device"
        and isinstance(r.get("busbw_gbps"), (int, float))
        and r.get("transfer_us")
        and r.get("calls")
        and isinstance(r.get("bytes"), (int, float))
        and float(r["bytes"]) / float(r["calls"]) >= LOW_BUSBW_MIN_MEAN_BYTES
    ]
    if not rows:
        return None
    row = max(rows, key=lambda r: float(r["transfer_us"]))
    busbw = float(row["busbw_gbps"])
    pct_of_link = 100.0 * busbw / peak
    if pct_of_link >= LOW_BUSBW_PCT:
        return None
    transfer = f.per_step(float(row["transfer_us"]))
    # At the link's speed the transfer would take busbw/peak of its time: the rest can go, at best.
    bound = 100.0 * transfer * (1.0 - busbw / peak) / f.step_us
    exposed = f.pct("communication")
    bound = min(bound, exposed) if exposed > 0 else bound
    return recommendation(
        "low_bus_bandwidth",
        f"{row['name']} runs far below the GPUs' NVLink bandwidth",
        summary=f"{row['name']} in process group {row.get('process_group') or '?'}: bus bandwidth "
        f"{busbw:.1f} GB/s over its transfer time, {pct_of_link:.0f}% of the {peak:.0f} GB/s of {what}",
        numbers={
            "collective": row["name"],
            "busbw_gbps": round(busbw, 2),
            "link_gbps": peak,
            "link_pct": round(pct_of_link, 1),
            "mean_bytes": round(float(row["bytes"]) / float(row["calls"])),
            "transfer_us_per_step": round(transfer, 1),
        },
        bound_pct=bound,
        confidence="low",
        confidence_reason="the bus bandwidth is measured (nccl-tests' definition, over the transfer "
        "time); the link is inferred from the GPU's model, and the topology NCCL chose is not recorded",
        fix="run nccl-tests (all_reduce_perf -b 64M -e 1G -g <GPUs>) on the node to see what the link "
        "gives; check `nvidia-smi topo -m` (NV# between the GPUs, not PIX/SYS), NCCL_P2P_DISABLE and "
        "NCCL_P2P_LEVEL unset, NCCL_DEBUG=INFO naming NVLink (P2P/IPC) rather than SHM or NET; a "
        "container needs --ipc=host (or a large /dev/shm)",
    )


# The registry, in the order that breaks ties between equal bounds.
RULES: list[tuple[str, Rule]] = [
    ("no_gpu_work", no_gpu_work),
    ("dataloader", dataloader),
    ("pin_memory", pin_memory),
    ("host_sync", host_sync),
    ("launch_bound", launch_bound),
    ("mixed_precision", mixed_precision),
    ("low_mfu", low_mfu),
    ("channels_last", channels_last),
    ("optimizer", optimizer),
    ("low_utilization", low_utilization),
    ("batch_size", batch_size),
    ("out_of_memory", out_of_memory),
    ("memory_capacity", memory_capacity),
    ("memory_leak", memory_leak),
    ("memory_fragmentation", memory_fragmentation),
    ("data_parallel", data_parallel),
    ("nccl_backend", nccl_backend),
    ("straggler", straggler),
    ("communication", communication),
    ("small_collectives", small_collectives),
    ("low_bus_bandwidth", low_bus_bandwidth),
]

__all__ = ["RULES", "recommendation"]
