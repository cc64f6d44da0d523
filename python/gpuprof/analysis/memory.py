"""The out-of-memory section of a report (docs/metrics.md, "Out of memory"): from what the span
recorded and what was read at the failure (``collect/oom.py``), what filled the device, the
per-sample activation bytes and the largest batch that fits. Plain dicts in, a plain dict out: no
torch, no rendering; the fixes are advice (``advice/rules/memory.py``, ``out_of_memory``).
"""

from __future__ import annotations

from typing import Optional

COMPOSITION_KEYS = ("parameters", "gradients", "optimizer_state", "activations", "temporary", "unknown")
FIXED_KEYS = ("parameters", "gradients", "optimizer_state")


def _int(v) -> Optional[int]:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _batch_size(data: dict, failure: dict) -> Optional[int]:
    for v in (
        failure.get("batch_size"),
        (data.get("distributed") or {}).get("batch_size"),
        *[d.get("batch_size") for d in data.get("dataloaders") or []],
    ):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _device_peak_rows(data: dict, device: int) -> list[dict]:
    return [
        r
        for r in data.get("memory") or []
        if r.get("device") == device and isinstance(r.get("peak_allocated_bytes"), int)
    ]


def out_of_memory_section(data: dict, failure: dict, native: Optional[dict] = None) -> dict:
    """The ``out_of_memory`` section of the report dict ``data`` (already analysed), for the
    failure facts ``failure``; ``native`` holds the span's state at its last record
    (``memory_end``, ``memory_end_composition``) where the span recorded allocations."""
    native = native or {}
    end = native.get("memory_end") or {}
    end_composition = native.get("memory_end_composition") or {}
    named = failure.get("device")
    device = named if isinstance(named, int) else -1
    notes: list[str] = []
    key = str(device)
    # The composition at the failure: the recorded allocations, else the tensors read then.
    tensors = failure.get("tensors") or {}
    last = (failure.get("last_span") or {}).get("memory_composition") or {}
    known = [d for d in (*end_composition, *tensors, *last) if d]
    if key not in known and known:
        # The error names a device of which this run recorded and held nothing (a CPU-only span
        # stopped by another device's error): the device that was recorded is shown.
        other = (
            max(end_composition, key=lambda d: (end.get(d) or {}).get("bytes", 0))
            if end_composition
            else max(known, key=lambda d: sum((tensors.get(d) or {}).values()))
        )
        where = "the host" if device < 0 else f"GPU {device}"
        shown = "the host" if other == "-1" else f"GPU {other}"
        notes.append(f"the error names {where}, of which this run recorded nothing; {shown} is shown")
        key, device = other, int(other)
    section: dict = {
        "error": failure.get("error", ""),
        "message": failure.get("message", ""),
        "device": device,
        "requested_bytes": _int(failure.get("requested_bytes")),
        "capacity_bytes": _int(failure.get("capacity_bytes")),
        "free_bytes": _int(failure.get("free_bytes")),
        "allocated_bytes": _int(failure.get("allocated_bytes")),
        "reserved_unallocated_bytes": _int(failure.get("reserved_unallocated_bytes")),
    }
    if section["capacity_bytes"] is None:
        caps = [r.get("capacity_bytes") for r in data.get("memory") or [] if r.get("device") == device] + [
            d.get("memory_total_bytes") for d in data.get("devices") or [] if d.get("id") == device
        ]
        section["capacity_bytes"] = next((c for c in caps if isinstance(c, int) and c > 0), None)
    composition: Optional[dict] = None
    if key in end_composition:
        composition = dict(end_composition[key])
        moment = end.get(key) or {}
        section["composition_source"] = "allocations recorded up to the failure"
        section["top_ops"] = moment.get("top_ops", [])
        section["top_modules"] = moment.get("top_modules", [])
        if section["allocated_bytes"] is None or key != str(failure.get("device")):
            section["allocated_bytes"] = moment.get("bytes")
    else:
        held = tensors.get(key)
        if held:
            composition = {k: int(held.get(k, 0)) for k in FIXED_KEYS}
            level = section["allocated_bytes"]
            composition.update(activations=0, temporary=0)
            composition["unknown"] = max(0, (level or 0) - sum(composition[k] for k in FIXED_KEYS))
            section["composition_source"] = (
                "the tensors of the models and optimizers at the failure; the rest of the allocated "
                "memory is unknown (profile_memory=True records what made it)"
            )
        section["top_ops"], section["top_modules"] = [], []
    section["composition"] = composition
    section.update(_batch_fit(data, failure, device, composition, notes))
    section["notes"] = notes
    return section


def _batch_fit(data: dict, failure: dict, device: int, at_failure: Optional[dict], notes: list) -> dict:
    """Per-sample activation bytes and the largest batch that fits (docs/metrics.md, "Out of
    memory"): activations (and temporaries) grow with the batch, parameters, gradients, optimizer
    state and the rest do not."""
    out: dict = {
        "batch_size": _batch_size(data, failure),
        "per_sample_bytes": None,
        "fixed_bytes": None,
        "budget_bytes": None,
        "largest_batch_that_fits": None,
        "per_sample_source": "",
    }
    batch = out["batch_size"]
    key = str(device)
    # This span's figures, else (a failure outside the recorded steps) the last span's.
    last = failure.get("last_span") or {}
    own = (data.get("memory_composition") or {}).get(key)
    peak = own or (last.get("memory_composition") or {}).get(key)
    peaks = (data.get("memory_peak") if own else last.get("memory_peak")) or {}
    scaled = fixed = None
    if peak and (peak.get("activations") or 0) + (peak.get("temporary") or 0) > 0:
        scaled = peak["activations"] + peak["temporary"]
        fixed = sum(peak[k] for k in FIXED_KEYS) + peak["unknown"]
        step = (peaks.get(key) or {}).get("step")
        out["per_sample_source"] = (
            (
                "activations and temporaries at the span's peak"
                if own
                else "activations and temporaries at the last recorded span's peak"
            )
            + (f" (step {step})" if step is not None else "")
            + " / the batch size"
        )
    else:
        rows = _device_peak_rows(data, device) or _device_peak_rows(last, device)
        tensors = (failure.get("tensors") or {}).get(key) or (at_failure or {})
        known = sum(int(tensors.get(k, 0) or 0) for k in FIXED_KEYS)
        if rows and known:
            highest = max(r["peak_allocated_bytes"] for r in rows)
            scaled, fixed = max(0, highest - known), known
            out["per_sample_source"] = (
                "the highest step peak less parameters, gradients and optimizer state / the batch size"
            )
    if scaled is None or not batch:
        if not batch:
            notes.append(
                "the batch size is not known: pass gpuprof.profile(batch_size=...) for the batch that fits"
            )
        return out
    out["per_sample_bytes"] = scaled // batch
    out["fixed_bytes"] = fixed
    # What the allocator could have had: all it held (allocated and cached) and what the device had
    # free; else the device's capacity.
    alloc = failure.get("allocator") or {}
    if isinstance(alloc.get("reserved_bytes"), int) and isinstance(failure.get("free_bytes"), int):
        out["budget_bytes"] = alloc["reserved_bytes"] + failure["free_bytes"]
    elif all(
        isinstance(failure.get(k), int)
        for k in ("allocated_bytes", "reserved_unallocated_bytes", "free_bytes")
    ):
        out["budget_bytes"] = (
            failure["allocated_bytes"] + failure["reserved_unallocated_bytes"] + failure["free_bytes"]
        )
    else:
        out["budget_bytes"] = _int(failure.get("capacity_bytes"))
    budget = out["budget_bytes"]
    if budget and out["per_sample_bytes"] > 0:
        out["largest_batch_that_fits"] = max(0, (budget - fixed) // out["per_sample_bytes"])
    return out
