"""Rules on feeding the device: no GPU work at all, the DataLoader's wait, pageable copies."""

from __future__ import annotations

import math
from typing import Callable, Optional

from .._facts import Facts
from .base import COPY_MIN_PCT, DATALOADER_PCT, Recommendation, _ms, recommendation


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
    taken, other = law.get("other_cpus_subtracted"), law.get("other_cpus")
    return (
        f"the {budget_text} CPUs this process may use ({law.get('cpu_budget_source') or 'affinity mask'}), "
        f"less {law['training_cpus']:g} busy with training"
        + (f" and {taken:g} that other processes kept busy over the run" if taken else "")
        + f", at {100 * law['worker_cpu_share']:.0f}% of a CPU per loading worker, leave room for "
        f"{law['cpu_limit']}"
        + (
            f" (other processes kept {other:g} of them busy over the run; a worker that mostly waits "
            "still gets its small share)"
            if isinstance(other, (int, float)) and other > 0 and not taken
            else ""
        )
    )


def _dataloader_cpus_taken(ip: dict, advise: Callable) -> Recommendation:
    """num_workers=0, and other processes kept busy the CPUs a first loading worker would need: it
    would take its CPU from them or from the training, so no worker count can promise the wait back."""
    law = ip["law"]
    nw = int(ip.get("num_workers") or 0)
    budget, training, taken = law["cpu_budget"], law["training_cpus"], law["other_cpus_subtracted"]
    share = law["worker_cpu_share"] or 1.0
    free = max(0.0, budget - training - taken)
    return advise(
        "Other processes hold the CPUs that DataLoader workers would need",
        f"keep num_workers={nw} while the CPUs are this busy: {_cpu_text(ip)}, so another worker "
        f"would take its CPU from the training or from them ({free:.2f} CPUs were left free, and a "
        f"worker needs {share:.2f}); {_law_text(ip)} once the CPUs are free: stop or renice the other "
        "jobs on this node, or ask the scheduler for CPUs of your own (SLURM --cpus-per-task with "
        "--exclusive, taskset), then profile again; compare both settings (gpuprof diff) before keeping "
        "any",
        "low",
        f"other processes kept {law['other_cpus']:g} of the {budget:g} CPUs busy over the run (/proc/stat), "
        "and the workers load on a CPU; how the scheduler would share the CPUs with one more process is "
        "not measured: a worker has run both slower and faster than none on such a machine",
        change=False,
    )


def _dataloader_cpu_bound(ip: dict, settings: dict, cpu: str, advise: Callable) -> Recommendation:
    """The loader is bound by this process's CPUs: more workers than they run, or batches too costly."""
    law = ip["law"]
    nw = int(ip.get("num_workers") or 0)
    recommended = settings["num_workers"]
    stage = ip.get("stage")
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
    if bound == "cpu" and law.get("cpu_limit") == 0:
        return _dataloader_cpus_taken(ip, advise)
    if bound == "cpu":
        return _dataloader_cpu_bound(ip, settings, cpu, advise)
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
        taken = law.get("other_cpus_subtracted")
        return advise(
            "The input pipeline starves the training loop",
            f"{_dataloader_call(settings)}: {_law_text(ip)}"
            + (f"; {cpu}" if cpu else "")
            + f"; {prefetch_text}",
            "high",
            "T_batch is measured inside the workers and T_step in the loop: Little's law gives the "
            "workers that keep up, as long as the CPUs stay as free as they were"
            + (f" (the {taken:g} CPUs other processes kept busy are left to them)" if taken else ""),
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
