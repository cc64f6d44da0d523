"""The FLOPs and modules of the kernels torch.compile's Inductor generated (docs/metrics.md,
``compiled_kernels`` and "FLOPs"): what ``collect/inductor_graph.py`` read of each kernel when its
graph was compiled (``module``, ``source``, FLOPs per call) joined to the span's calls of it.

The span's FLOPs count a generated kernel's calls at its FLOPs per call, in the step each call
starts in: a matrix product Inductor generates itself (a decomposed small product, a GEMM template)
is no aten call, so nothing else counts it; the products Inductor leaves to aten are counted at
their aten calls and not here (the provenance reader leaves them out of the kernels' counts)."""

from __future__ import annotations

from typing import Optional

from .._native import _core

_KEYS = ("flops", "matmul_flops", "other_flops")


def kernel_facts(provenance: Optional[list]) -> dict:
    """Event name -> the FLOPs per call (``flops``, ``matmul_flops``, ``other_flops``), ``unknown``
    (the keys some of whose FLOPs were not countable: symbolic sizes), ``bytes`` per call,
    ``backward``, ``matmul_dtype``, ``module`` and ``source`` of each generated kernel whose
    provenance carries them. Two graphs that name a kernel alike (a forward and a backward graph
    both numbered 0, a recompile) are one event: its FLOPs per call are their mean, exact where
    each graph runs as often as the other."""
    grouped: dict = {}
    for p in provenance or []:
        if p.get("event") and "flops" in p:
            grouped.setdefault(str(p["event"]), []).append(p)
    out = {}
    for event, rows in grouped.items():
        # A class whose sizes were symbolic (null) counts 0 in the span; the row says null.
        fact = {k: sum(int(r.get(k) or 0) for r in rows) / len(rows) for k in _KEYS}
        fact["unknown"] = sorted({k for r in rows for k in _KEYS if r.get(k) is None})
        sizes = [r.get("bytes") for r in rows]
        fact["bytes"] = sum(sizes) / len(sizes) if all(isinstance(b, int) for b in sizes) else None
        fact["backward"] = all(r.get("backward") for r in rows)
        fact["matmul_dtype"] = next((r["matmul_dtype"] for r in rows if r.get("matmul_dtype")), None)
        fact["module"] = rows[0].get("module")
        fact["source"] = rows[0].get("source")
        fact["kernel"] = rows[0].get("kernel")
        out[event] = fact
    return out


def add_kernel_facts(rows: list, facts: dict, operators: list, kernels: list) -> None:
    """Give each ``compiled_kernels`` row its ``module``, ``source``, ``flops`` and ``matmul_flops``
    (per call, the mean over its events' calls where two graphs name it alike; null without
    provenance)."""
    calls = {str(r.get("name")): int(r.get("calls") or 0) for r in list(operators) + list(kernels)}
    by_kernel: dict = {}
    for event, f in facts.items():
        by_kernel.setdefault(f["kernel"], []).append((event, f))
    for row in rows:
        found = by_kernel.get(row["kernel"]) or []
        row["module"] = found[0][1]["module"] if found else None
        row["source"] = found[0][1]["source"] if found else None
        for key in ("flops", "matmul_flops"):
            weighted = [(calls.get(event, 0), f[key]) for event, f in found]
            n = sum(c for c, _ in weighted)
            if not found or any(key in f["unknown"] for _, f in found):
                row[key] = None
            elif n:
                row[key] = round(sum(c * f for c, f in weighted) / n)
            else:
                row[key] = round(sum(f for _, f in weighted) / len(weighted))


def add_compiled_flops(
    trace, steps: list, native_flops: dict, facts: dict, operators: list, repeated: Optional[bytes]
) -> int:
    """Add the generated kernels' FLOPs to the native pass's per-step counts (``native_flops``
    steps, counted calls) and to their operator rows' ``flops``, in place; the other class only where
    the span counted other-class FLOPs of its own (recorded shapes), as for eager operators. Returns
    the kernel calls counted."""
    counting = {e: f for e, f in facts.items() if f["matmul_flops"] or f["other_flops"]}
    per_step = {s["step"]: s for s in native_flops.get("steps", [])}
    timed = [s for s in steps if s["step"] in per_step]
    if not counting or not timed:
        return 0
    other = any(s.get("other_flops") for s in per_step.values())
    tables = _core.step_event_tables(trace, [(s["start_ns"], s["end_ns"]) for s in timed], 1 << 30, repeated)
    # A Triton kernel is a device kernel and, where torch records its launch, a host operator of
    # the same name: its calls count once, the device's.
    on_device = {name for table in tables for name, _, _ in table["kernels"] if name in counting}
    total_calls = 0
    by_name: dict = {}
    for s, table in zip(timed, tables):
        row = per_step[s["step"]]
        ops = [r for r in table["operators"] if r[0] not in on_device]
        for name, calls, _ in ops + list(table["kernels"]):
            f = counting.get(name)
            if f is None or not calls:
                continue
            matmul = round(calls * f["matmul_flops"])
            rest = round(calls * f["other_flops"]) if other else 0
            row["matmul_flops"] += matmul
            row["other_flops"] += rest
            row["flops"] += matmul + rest
            row["backward_flops" if f["backward"] else "forward_flops"] += matmul + rest
            if not f["backward"]:
                row["matmul_forward_flops"] += matmul
            if matmul:
                dtype = f["matmul_dtype"] or "unknown"
                by_dtype = row.setdefault("matmul_flops_by_dtype", {})
                by_dtype[dtype] = by_dtype.get(dtype, 0) + matmul
            by_name[name] = by_name.get(name, 0) + matmul + rest
            total_calls += calls
    native_flops["counted_calls"] = int(native_flops.get("counted_calls") or 0) + total_calls
    for r in operators:
        add = by_name.get(str(r.get("name")))
        if add:
            r["flops"] = int(r.get("flops") or 0) + add
    return total_calls


def roofline_rows(facts: dict, operators: list, kernels: list) -> list:
    """The roofline's rows of the generated kernels that ran with FLOPs (docs/metrics.md,
    "Roofline"): their time (a GPU kernel's device time, else its C++ kernel's host time), FLOPs
    and bytes over the span, the bytes being what ``kernel_bytes`` counts per call."""
    device = {str(r.get("name")): r for r in kernels}
    host = {str(r.get("name")): r for r in operators}
    out = []
    for event, f in facts.items():
        timed = device.get(event)
        on_device = timed is not None
        timed = timed if on_device else host.get(event)
        calls = int((timed or {}).get("calls") or 0)
        flops = round(calls * (f["matmul_flops"] + f["other_flops"]))
        if not calls or not flops:
            continue
        time_us = float(timed.get("total_us" if on_device else "host_total_us") or 0.0)
        size = round(calls * f["bytes"]) if f["bytes"] else None
        out.append(
            {
                "name": event,
                "input_shapes": "",
                "flop_class": "matmul" if f["matmul_flops"] else "other",
                "calls": calls,
                "flops": flops,
                "bytes": size,
                "time_us": time_us,
                "on_device": on_device,
                "intensity_flop_per_byte": flops / size if size else None,
                "achieved_tflops": flops / (time_us * 1e-6) / 1e12 if time_us > 0 else 0.0,
            }
        )
    return out


def compiled_modules(rows: list) -> list:
    """``compiled.modules[]``: the generated kernels' time and FLOPs by the module they came from
    (module hooks do not fire inside compiled code): ``path`` ("" the compiled root), ``kernels``,
    ``calls``, ``total_us``, ``flops`` (their calls times FLOPs per call), most time first; kernels
    without a module are left out."""
    out: dict = {}
    for r in rows:
        if r.get("module") is None:
            continue
        m = out.setdefault(
            r["module"], {"path": r["module"], "kernels": 0, "calls": 0, "total_us": 0.0, "flops": 0}
        )
        m["kernels"] += 1
        m["calls"] += int(r.get("calls") or 0)
        m["total_us"] = round(m["total_us"] + float(r.get("total_us") or 0.0), 3)
        m["flops"] += int(r.get("calls") or 0) * int(r.get("flops") or 0)
    return sorted(out.values(), key=lambda m: (-m["total_us"], m["path"]))


def unknown_flops_note(rows: list, facts: dict) -> str:
    """What the FLOPs section says of generated kernels whose FLOPs could not be counted; ""
    when there are none."""
    kernels = {f["kernel"] for f in facts.values() if f["unknown"]}
    ran = [r for r in rows if r.get("kernel") in kernels and r.get("calls")]
    if not ran:
        return ""
    return (
        f"the FLOPs of {len(ran)} of inductor's generated kernels ({sum(int(r['calls']) for r in ran)} "
        "calls) are not counted: their sizes are symbolic (a graph compiled for dynamic shapes)"
    )
