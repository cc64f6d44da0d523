"""What Dynamo compiled for a live span (docs/metrics.md, ``compiled``): its graphs, the
recompilations inside the span with the guard that failed, and the graph breaks with their reason
and the user's line, from the compilation records ``collect/dynamo.py`` copies at the span's end
and the compiled regions the span ran (``Torch-Compiled Region: frame/compile``)."""

from __future__ import annotations

import re
from typing import Optional

# Patterns as text, compiled on first use (re keeps them): most traces match none, and their
# compilation at import was start-up time for every `gpuprof analyze`.
_RESUME = r"^torch_dynamo_resume_in_(.+)_at_(\d+)$"
_REGION = r"^Torch-Compiled Region: (\d+)/(\d+)"
_COMPILE_ID = r"(\d+)/(\d+)"
_PREFIX = r"^\s*\d+/\d+:\s*"
_SIZE = r"tensor '([^']+)' (size|stride) mismatch at index (\d+)\. expected (\d+), actual (\d+)"


def _frame(compile_id) -> Optional[int]:
    m = re.search(_COMPILE_ID, str(compile_id or ""))
    return int(m.group(1)) if m else None


def _base(name: str) -> str:
    m = re.match(_RESUME, name)
    return _base(m.group(1)) if m else name


def region_calls_by_frame(operators: list) -> dict:
    """Calls of each Dynamo frame's compiled regions in the span (all its compiles together)."""
    calls: dict = {}
    for row in operators:
        m = re.match(_REGION, str(row.get("name", "")))
        if m:
            frame = int(m.group(1))
            calls[frame] = calls.get(frame, 0) + int(row.get("calls") or 0)
    return calls


def _guard(reason: str) -> tuple[str, Optional[str], Optional[int]]:
    """The failed guard's first line without Dynamo's "frame/compile: " prefix, the dimension it
    names ("x.size(0)") and the new value, where it is a tensor's size or stride."""
    first = re.sub(_PREFIX, "", reason.strip().splitlines()[0] if reason.strip() else "")
    m = re.search(_SIZE, first)
    if not m:
        return first, None, None
    return first, f"{m.group(1)}.{m.group(2)}({m.group(3)})", int(m.group(5))


def _where(row: dict, line) -> Optional[str]:
    file = row.get("co_filename")
    return f"{file}:{line}" if file and line is not None else None


def dynamo_section(records: list, operators: list) -> dict:
    """``graphs``, ``recompilations`` and ``graph_breaks`` from Dynamo's compilation records."""
    calls = region_calls_by_frame(operators)
    # torch._dynamo.reset() starts the frame ids again at 0/0 while the older records stay: only
    # the records since the latest first compile name the frames the span's regions ran.
    firsts = [
        i
        for i, r in enumerate(records)
        if re.search(_COMPILE_ID, str(r.get("compile_id") or ""))
        and re.search(_COMPILE_ID, str(r.get("compile_id"))).groups() == ("0", "0")
    ]
    records = records[firsts[-1] :] if firsts else records
    recompilations: dict = {}
    for row in records:
        reason = row.get("recompile_reason")
        if not row.get("in_span") or not reason:
            continue
        guard, dimension, value = _guard(str(reason))
        key = (row.get("co_name"), row.get("co_filename"), row.get("co_firstlineno"), dimension or guard)
        entry = recompilations.setdefault(
            key,
            {
                "function": row.get("co_name"),
                "source": _where(row, row.get("co_firstlineno")),
                "count": 0,
                "guard": guard,
                "dimension": dimension,
                "values": [],
                "compile_us": 0.0,
            },
        )
        entry["count"] += 1
        if value is not None and value not in entry["values"]:
            entry["values"].append(value)
        entry["compile_us"] += round(float(row.get("entire_frame_compile_time_s") or 0.0) * 1e6, 3)
    breaks: dict = {}
    for i, row in enumerate(records):
        reasons = row.get("restart_reasons") or []
        if not reasons:
            continue
        name = str(row.get("co_name") or "")
        resume = next(
            (
                later
                for later in records[i + 1 :]
                if later.get("co_filename") == row.get("co_filename")
                and str(later.get("co_name") or "") != name
                and re.match(_RESUME, str(later.get("co_name") or ""))
                and _base(str(later.get("co_name"))) == _base(name)
            ),
            None,
        )
        line = int(re.match(_RESUME, str(resume["co_name"])).group(2)) if resume else None
        resume_frame = _frame(resume.get("compile_id")) if resume else None
        runs = calls.get(resume_frame, 0) if resume_frame is not None else None
        if not runs and not row.get("in_span"):
            continue  # compiled before the span, and the code after it did not run in the span
        for reason in reasons:
            lines = [x.strip() for x in str(reason).strip().splitlines() if x.strip()]
            title = lines[0] if lines else ""
            explanation = next(
                (x[len("Explanation:") :].strip() for x in lines if x.startswith("Explanation:")), None
            )
            key = (title, explanation, row.get("co_filename"), line)
            entry = breaks.setdefault(
                key,
                {
                    "reason": title,
                    "explanation": explanation,
                    "function": _base(name),
                    "source": _where(row, line),
                    "count": runs,
                    "compiles": 0,
                },
            )
            entry["compiles"] += 1
    return {
        "graphs": len(
            {
                str(r.get("name"))
                for r in operators
                if re.match(_REGION, str(r.get("name", ""))) and r.get("calls")
            }
        ),
        "recompilations": sorted(recompilations.values(), key=lambda r: -r["count"]),
        "graph_breaks": sorted(breaks.values(), key=lambda r: -(r["count"] or 0)),
    }


def dynamo_lines(section: dict) -> list[str]:
    """One line per recompilation group and graph break, for the note and the terminal."""
    out = []
    for r in section.get("recompilations") or []:
        what = (
            f"{r['dimension']} changed ({', '.join(str(v) for v in r['values'])})"
            if r.get("dimension")
            else r["guard"]
        )
        out.append(f"recompiled {r['count']}x: {r['function']} ({r['source']}): {what}")
    for b in section.get("graph_breaks") or []:
        runs = f", {b['count']} runs in the span" if b.get("count") is not None else ""
        out.append(f"graph break at {b['source'] or b['function']}: {b['reason']}{runs}")
    return out


# The kernels Inductor generates: its C++ backend's ("cpp_fused_...", recorded as operators
# "graph_0_cpp_fused_..." when its kernel profiling is on) and Triton's ("triton_poi_fused_...").
_GENERATED = r"^(?:graph_\d+_)?((?:cpp_fused|cpp_CppMicroGemm|triton)_\w+)$"
_FUSED = r"^(?:cpp|triton_(?:poi|red|per|tem|for|mm|bmm|\w+?))_fused_(.+?)_\d+$"


def _kernel_key(name: str) -> Optional[str]:
    m = re.match(_GENERATED, name)
    return m.group(1) if m else None


def compiled_kernel_rows(operators: list, kernels: list, provenance: Optional[list]) -> list:
    """``compiled_kernels``: one row per kernel Inductor generated, most time first. Device time
    where the kernel ran on a GPU (the kernel table), else the host time of the operator event its
    C++ kernel records; ``ops``/``sources`` from Inductor's provenance (``collect/inductor.py``),
    null where none was read; ``fused``, the operators Inductor named the kernel after."""
    rows: dict = {}
    for table, backend, time_key, on in (
        (kernels, "triton", "total_us", "device"),
        (operators, None, "host_total_us", "host"),
    ):
        for r in table:
            key = _kernel_key(str(r.get("name", "")))
            if key is None or (key in rows and rows[key]["time_on"] != on):
                continue  # a GPU kernel's host launch event: its device time is the row's
            row = rows.setdefault(
                key,
                {
                    "kernel": key,
                    "backend": backend or ("triton" if key.startswith("triton") else "cpp"),
                    "time_on": on,
                    "calls": 0,
                    "total_us": 0.0,
                    "fused": (re.match(_FUSED, key).group(1) if re.match(_FUSED, key) else None),
                    "ops": None,
                    "sources": None,
                },
            )
            row["calls"] += int(r.get("calls") or 0)
            row["total_us"] = round(row["total_us"] + float(r.get(time_key) or 0.0), 3)
    for p in provenance or []:
        row = rows.get(str(p.get("kernel")))
        if row is None:
            continue  # an extern (aten) kernel, or one this span did not run
        ops, sources = row["ops"] or [], row["sources"] or []
        row["ops"] = ops + [o for o in p.get("ops") or [] if o not in ops]
        row["sources"] = sources + [s for s in p.get("sources") or [] if s not in sources]
    return sorted(rows.values(), key=lambda r: (-r["total_us"], r["kernel"]))


_FALLBACK = r"^torch\.ops\.(\w+)\.(\w+)(?:\.\w+)?$"


def fallback_rows(provenance: Optional[list], operators: list) -> list:
    """``fallbacks``: the operators Inductor left to eager aten kernels inside its graphs (its
    provenance names them ``torch.ops.aten.kthvalue.default``; the matrix and convolution calls it
    hands to vendor libraries on purpose, ``extern_kernels.mm``, are not fallbacks), with the
    operator table's calls and time for that operator: every call of it in the span, inside a
    compiled graph or not, so an upper bound. Most time first; [] without provenance."""
    by_name = {str(r.get("name")): r for r in operators}
    rows: dict = {}
    for p in provenance or []:
        m = re.match(_FALLBACK, str(p.get("kernel", "")))
        if not m:
            continue
        op = f"{m.group(1)}::{m.group(2)}"
        row = rows.setdefault(op, {"op": op, "sources": []})
        row["sources"] += [s for s in p.get("sources") or [] if s not in row["sources"]]
    out = []
    for op, row in rows.items():
        timed = by_name.get(op)
        if timed is None:
            continue  # compiled, but not run in the span
        out.append(
            {
                **row,
                "calls": int(timed.get("calls") or 0),
                "host_total_us": float(timed.get("host_total_us") or 0.0),
                "device_total_us": float(timed.get("device_total_us") or 0.0),
            }
        )
    return sorted(out, key=lambda r: (-(r["device_total_us"] or r["host_total_us"]), r["op"]))


# The ranges in which Dynamo evaluates a compiled frame's guards: on each call its cache lookup
# runs the guards of the frame's cache entries until one passes (torch/csrc/dynamo/eval_frame_cpp.cpp,
# "TorchDynamo Cache Lookup"). torch up to 2.13 records no other guard range.
_GUARD_RANGES = ("TorchDynamo Cache Lookup",)


def guard_time(operators: list) -> dict:
    """``guard_us`` and ``guard_calls``: the host time of Dynamo's guard evaluation and cache
    lookups in the span, and how many there were (one per call of a compiled frame); None when
    the span or trace recorded no lookup at all (an older torch records none: not measured, which
    is not zero)."""
    rows = [r for r in operators if str(r.get("name", "")) in _GUARD_RANGES]
    if not rows:
        return {"guard_us": None, "guard_calls": None}
    return {
        "guard_us": round(float(sum(r.get("host_total_us") or 0.0 for r in rows)), 3),
        "guard_calls": int(sum(r.get("calls") or 0 for r in rows)),
    }


def guard_line(section: dict) -> str:
    """The note's words on guards ("" when the span recorded no lookup)."""
    calls = section.get("guard_calls") or 0
    if not calls:
        return ""
    each = section["guard_us"] / calls
    total_ms = section["guard_us"] / 1000
    return f"; guards and cache lookups {total_ms:.3f} ms over {calls} calls ({each:.1f} us each)"


def with_launch_args(rows: list, launches: Optional[list]) -> list:
    """``compiled_kernels`` rows with the backend the trace's launch args name (``kernel_backend``,
    ``Trace.compiled_launches``) where it names one."""
    backend: dict = {}
    for launch in launches or []:
        if launch.get("backend"):
            backend.setdefault(str(launch.get("name")), str(launch["backend"]))
    for row in rows:
        if row["kernel"] in backend:
            row["backend"] = backend[row["kernel"]]
    return rows


def unnamed_in_trace(rows: list, launches: Optional[list]) -> str:
    """Why a trace's generated kernels have no operators (the note's words; "" when all have)."""
    launched = {str(launch.get("name")) for launch in launches or [] if launch.get("kernel_file")}
    triton = [r for r in rows if r["ops"] is None and r["kernel"] in launched]
    cpp = [r for r in rows if r["ops"] is None and r["backend"] == "cpp"]
    out = ""
    if triton:
        out += (
            f"; {len(triton)} Triton kernels without their aten operators: the output code beside "
            "their kernel_file (Inductor's cache) is not on this machine"
        )
    if cpp:
        out += (
            f"; {len(cpp)} C++ kernels without their aten operators: a trace records none for them "
            "(gpuprof.profile(compiled_kernels=True) names them)"
        )
    return out
