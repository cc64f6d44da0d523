"""Analyse: from a stored trace to the report dict (the numbers; no advice, no rendering).

The package's data flow, one way only:

    collect (collect/, C++ collectors) -> store (the native Trace; traces/ reads and writes it)
      -> analyse (this package: one C++ pass, cpp/src/analysis) -> advise (advice/, reads the dict)
      -> report (report/: the one builder, the read-only Report and its renderers)

Nothing downstream is imported here, and advice/ reads the dict through ``section`` below, never
through report/.

Analyses over several reports live in the submodules: cross-rank (``ranks``) and scaling studies
(``scaling``): pure functions over plain dicts (per-rank summaries, report dicts), no torch, shared by
live runs and folders of traces; ``summaries`` reads a folder's files into those summaries.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .. import _build_info
from .._native import _core
from . import fields
from .implausible import warnings_from

# 2: ranks, stragglers, cross_rank, distributed (the cross-rank report); 3: kernel_ops;
# 4: collectives, collective_calls, warnings (implausible input), long_names, modules; the energy
# per step (steps[].energy_j, average's energy keys, energy); input_pipeline; operators_by_shape
# (and operators one row per name, without input_shapes); the memory view (memory_ops, memory_peak,
# memory_composition, memory_growth, out_of_memory); flops, roofline, steps[].flops,
# operators[].flops, operators_by_shape[].flops, modules[].flops
SCHEMA_VERSION = 4

# The memory curve's bound per device: a long span's curve keeps its peak and its envelope.
MEMORY_CURVE_POINTS = 2000

# (JSON key stem, display name), in the breakdown's priority order.
CATEGORIES: list[tuple[str, str]] = [tuple(c) for c in _core.CATEGORIES]


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


class _Beside:
    """``fn(*args)`` run on a thread of its own while the caller runs another native pass (both
    release the GIL), so that two independent passes share the CPUs; ``result()`` waits for it and
    returns its value or raises its exception. Where no thread can be started, it runs in result()."""

    def __init__(self, fn: Callable, *args) -> None:
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = threading.Thread(target=self._run, daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had
            self._thread = None

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as e:  # handed to result(), on the caller's thread
            self._error = e

    def wait(self) -> None:
        """Waits for the thread, whatever its outcome (the caller is raising an error of its own)."""
        if self._thread is not None:
            self._thread.join()

    def result(self) -> Any:
        if self._thread is None:
            return self._fn(*self._args)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def report_dict(
    trace,
    *,
    dataloaders: Optional[list] = None,
    host: Optional[dict] = None,
    source: Optional[dict] = None,
    drop_incomplete_last_step: bool = True,
    native: Optional[dict] = None,
    peak_tflops: Optional[float] = None,
    batch_size: Optional[int] = None,
    pipeline: Optional[dict] = None,
    dynamo: Optional[list] = None,
    compiled_kernels: Optional[list] = None,
) -> dict:
    """The report dict (docs/schema.md) of a native Trace, without advice. ``native``, when given,
    receives what later views of the same trace reuse (``repeated_op_calls``: one byte per event,
    for ``step_views``); it is not part of the report.
    ``batch_size`` (samples per step, when known) gives the energy per sample. ``pipeline``: what a
    live span measured inside its DataLoaders, for the ``input_pipeline`` section
    (``analysis/input_pipeline.py``). ``peak_tflops``: the dense peak MFU divides by, when the user gives
    it (docs/metrics.md, "MFU and HFU"). ``dynamo``: torch.compile's compilation records a live span
    read (``collect/dynamo.py``), for the ``compiled`` section's graphs, recompilations and graph
    breaks; ``compiled_kernels``: Inductor's provenance of the kernels it generated in a live span
    (``collect/inductor.py``), for its ``compiled_kernels`` rows."""
    # Each device's utilization and Est. SM efficiency over the trace, in the TensorBoard plugin's
    # buckets (docs/metrics.md, "GPU timeline"); {} without kernels: beside the tables' pass.
    beside = _Beside(_core.gpu_timeline, trace)
    # One native pass: the breakdown, and the GPU summary and tables over the same steps.
    try:
        analysed = _core.gpu_tables(trace, drop_incomplete_last_step, process_groups(trace.metadata))
    except BaseException:
        beside.wait()  # no thread left behind; the tables' error is the one raised, as without it
        raise
    gpu_timeline = beside.result()
    if native is not None:
        native["repeated_op_calls"] = analysed["repeated_op_calls"]
        native["module_of_event"] = analysed.get("module_of_event")
        native["breakdown_steps"] = analysed["breakdown"]["steps"]  # the critical path's drawing
        native["critical_path_kept"] = analysed["critical_path_kept"]  # the drawn steps' paths
        native["device_sums"] = analysed["device_sums"]  # what a windowed read adds up (windowed.py)
        native["flops"] = analysed["flops"]
    bd = analysed["breakdown"]
    copied = {t.key for t in fields.TABLES if t.analysed}
    omitted_when_empty = {t.key for t in fields.TABLES if t.omit_empty}
    steps = []
    for s in bd["steps"]:
        row = {"step": s["step"], "total_us": _us(s["total_ns"])}
        for key, _ in CATEGORIES:
            row[f"{key}_us"] = _us(s[f"{key}_ns"])
        row["start_ns"] = s["start_ns"]
        row["end_ns"] = s["end_ns"]
        steps.append(row)
    data = {
        "schema_version": SCHEMA_VERSION,
        "gpuprof_version": _build_info.GPUPROF_VERSION,
        "source": dict(source or {}),
        "steps": steps,
        "average": average(steps),
        "step_rules": {
            "had_step_markers": bd["had_step_markers"],
            "dropped_trailing_steps": bd["dropped_trailing_steps"],
            "dropped_incomplete_last": bd["dropped_incomplete_last"],
            "duplicate_step_markers": bd["duplicate_step_markers"],
            "nested_step_markers": bd["nested_step_markers"],
            "malformed_step_markers": bd["malformed_step_markers"],
            "skewed_device_events": bd["skewed_device_events"],
        },
        # Implausible input, said rather than shown as fact (implausible.py; docs/metrics.md).
        "warnings": warnings_from(bd, analysed["plausibility"], trace.metadata),
        "dataloaders": list(dataloaders or []),
        "host": dict(host or {}),
        "counts": {
            "events": trace.num_events,
            "dropped": int(trace.dropped_events),
            "skipped": int(trace.skipped_events),
            "steps": len(steps),
        },
        "metadata": report_metadata(trace.metadata),
    }
    # The input pipeline, stage by stage, from what a live span measured inside the DataLoader
    # (analysis/input_pipeline.py); absent when nothing was measured (an imported trace).
    pipeline_section = _input_pipeline(trace, pipeline, steps, host)
    if pipeline_section is not None:
        data["input_pipeline"] = pipeline_section
    # GPU metrics: the per-device summary and the detail tables, in the analysis' order: lists of
    # rows computed in C++ (cpp/src/analysis/gpu_summary.cpp, tables.cpp), the tables fields.py
    # declares ``analysed``; unknown numbers are None. docs/metrics.md defines every field.
    for key, rows in analysed.items():
        if key in copied and (rows or key not in omitted_when_empty):
            data[key] = rows
    # A launch dimension the trace did not record reads [0, 0, 0] in C++ (no launch has a 0
    # dimension): null, as the plugin shows it; its rows stay apart all the same.
    for row in data["kernel_ops"]:
        for dim in ("grid", "block"):
            if row[dim] == [0, 0, 0]:
                row[dim] = None
    # A trace file's Triton launch args (Trace.compiled_launches; None for a live span)
    launches = (
        list(getattr(trace, "compiled_launches", None) or [])
        if data["source"].get("kind") == "trace"
        else None
    )
    compiled = _compiled_regions(data["operators"], dynamo, data["kernels"], compiled_kernels, launches)
    # The kernels Inductor generated count their fused operators' FLOPs (analysis/compiled_flops.py)
    facts = _compiled_flops(trace, data, analysed, compiled, compiled_kernels)
    # FLOPs: the flops section, each step's FLOPs and the roofline's rows
    _add_flops(data, analysed["flops"], source=source, host=host, peak_tflops=peak_tflops)
    # The chain that set each step's length, by cause (cpp/src/analysis/critical_path.cpp)
    data["critical_path"] = analysed["critical_path"]
    # Collectives per kind x process group, and every call as [row, step, dur_us, end_us, bytes]:
    # what the cross-rank report needs to split each row's time into transfer and waiting
    # (analysis/ranks.py; docs/metrics.md, "Collectives").
    data["collectives"] = analysed["collectives"]
    calls = analysed["collective_calls"]
    data["collective_calls"] = [list(c) for c in calls] if len(calls) <= MAX_COLLECTIVE_CALLS else None
    if compiled:
        if compiled.get("compiled_kernels"):
            _add_compiled_kernel_facts(compiled, facts, data)
        data["compiled"] = compiled
    # NVML samples of the span (utilization, memory used, power, SM clock, temperature); -1 is
    # "not reported by this device" and becomes None.
    data["gpu_samples"] = [_gpu_sample_row(row) for row in _core.gpu_samples(trace)]
    # energy per step (docs/metrics.md, "Energy"): only where NVML sampled a device
    if data["gpu_samples"]:
        _add_energy(data, trace, batch_size)
    data["gpu_timeline"] = gpu_timeline
    # Each device's allocator level over time (-1: the host), at most MEMORY_CURVE_POINTS points
    # (docs/metrics.md, "Memory curve"); {} without allocator samples.
    data["memory_curve"] = {
        device: [list(p) for p in points]
        for device, points in _core.memory_curve(trace, MEMORY_CURVE_POINTS).items()
    }
    # The memory view (docs/metrics.md, "Memory"): the plugin's per-operator statistics, each
    # device's peak with what filled it, and growth across steps.
    data["memory_ops"] = analysed["memory_ops"]
    data["memory_peak"] = analysed["memory_peak"]
    data["memory_composition"] = analysed["memory_composition"]
    data["memory_growth"] = {device: _growth(g) for device, g in analysed["memory_growth"].items()}
    if native is not None:
        native["memory_end"] = analysed["memory_end"]
        native["memory_end_composition"] = analysed["memory_end_composition"]
    # The full text of each name the tables show shortened (over 1024 bytes), once (docs/metrics.md,
    # "Bounded tables and names"); {} when none is.
    data["long_names"] = analysed["long_names"]
    return data


def _compiled_flops(trace, data: dict, analysed: dict, compiled: dict, provenance: Optional[list]) -> dict:
    """The generated kernels' FLOPs per call from Inductor's provenance, added to the native pass's
    per-step FLOPs, the operator rows and the roofline's rows before the FLOPs section is built; {}
    without any (compiled_flops.py is loaded only then)."""
    if not (compiled and provenance):
        return {}
    from .compiled_flops import add_compiled_flops, kernel_facts, roofline_rows

    facts = kernel_facts(provenance)
    if facts:
        native = analysed["flops"]
        add_compiled_flops(
            trace, data["steps"], native, facts, data["operators"], analysed["repeated_op_calls"]
        )
        rows = list(native.get("roofline") or []) + roofline_rows(facts, data["operators"], data["kernels"])
        native["roofline"] = sorted(rows, key=lambda r: -float(r.get("time_us") or 0.0))
    return facts


def _add_compiled_kernel_facts(compiled: dict, facts: dict, data: dict) -> None:
    """Each generated kernel's ``module``, ``source`` and ``flops``, their time by module, and the
    FLOPs note's word on kernels whose FLOPs are unknown."""
    from .compiled_flops import add_kernel_facts, compiled_modules, unknown_flops_note

    add_kernel_facts(compiled["compiled_kernels"], facts, data["operators"], data["kernels"])
    modules = compiled_modules(compiled["compiled_kernels"])
    if modules:
        compiled["modules"] = modules
    note = unknown_flops_note(compiled["compiled_kernels"], facts)
    if note and isinstance(data.get("flops"), dict):
        data["flops"]["note"] = "; ".join(n for n in (data["flops"].get("note"), note) if n)


def _add_flops(data: dict, native_flops: dict, *, source, host, peak_tflops) -> None:
    """FLOPs (docs/metrics.md, "FLOPs"): ``flops``, ``roofline`` and each step's ``flops``."""
    from .flops import flops_section

    busy = [d for d in data["devices"] if (d.get("kernels") or 0) > 0]
    names = [str(d.get("name") or "") for d in busy]

    def tf32(d: dict) -> bool:  # NVIDIA tensor cores from Ampere (8.0) on
        try:
            cc = float(d.get("compute_capability") or 0)
        except ValueError:
            cc = 0.0
        return cc >= 8.0 and not any(w in str(d.get("name")).upper() for w in ("AMD", "RADEON", "INSTINCT"))

    section, roofline = flops_section(
        native_flops,
        data["steps"],
        data["operators"],
        device_names=names,
        live=(source or {}).get("kind") == "live",
        tf32_capable=bool(busy) and all(tf32(d) for d in busy),
        user_peak_tflops=peak_tflops,
        float32_matmul_precision=(host or {}).get("float32_matmul_precision"),
    )
    from .spill import by_step, each_row

    row_of = by_step(native_flops.get("steps", []))
    measured = section["per_step_flops"] is not None

    def put(s: dict) -> None:
        row = row_of(s["step"]) if measured else None
        s["flops"] = row["flops"] if row is not None else None

    each_row(data["steps"], put)  # (a windowed read's steps: on disk, written back)
    data["flops"] = section
    data["roofline"] = roofline


def _growth(g: dict) -> dict:
    """A device's growth across steps with its rate in MB (10^6 bytes) per step, and each op's and
    module's surviving bytes per counted step."""
    counted = g["steps_counted"]

    def per_step(rows):
        return [
            {
                "name": r["name"],
                "bytes_per_step": round(r["bytes"] / counted, 1) if counted else 0.0,
                "count": r["count"],
            }
            for r in rows
        ]

    return {
        "mb_per_step": round(g["bytes_per_step"] / 1e6, 6),
        "bytes_per_step": round(g["bytes_per_step"], 1),
        "flagged": g["flagged"],
        "steps": g["steps"],
        "end_bytes": g["end_bytes"],
        "rising_steps": g["rising_steps"],
        "steps_counted": counted,
        "ops": per_step(g["ops"]),
        "modules": per_step(g["modules"]),
    }


def _input_pipeline(trace, pipeline: Optional[dict], steps: list, host: Optional[dict]) -> Optional[dict]:
    if not pipeline or not pipeline.get("loaders") or not steps:
        return None
    from .input_pipeline import input_pipeline

    transfers = _core.batch_transfers(trace, [(s["start_ns"], s["end_ns"]) for s in steps])
    return input_pipeline(pipeline, steps, host, transfers)


def clock_anchors(trace, drop_incomplete_last_step: bool = True) -> dict:
    """What a merged timeline aligns one rank's clock by (analysis/ranks.py ``clock_offset``): the
    end of each collective call, keyed by its row (kind and group), step and order in the step, and
    the end of each step, on this trace's clock (us)."""
    analysed = _core.gpu_tables(trace, drop_incomplete_last_step, process_groups(trace.metadata))
    keys = [
        tuple(r.get(k) for k in ("name", "process_group", "pg_desc", "group_ranks", "group_size"))
        for r in analysed["collectives"]
    ]
    calls: dict = {}
    seen: dict = {}
    for row, step, _dur, end_us, _bytes in analysed["collective_calls"]:
        k = (keys[row], step)
        seen[k] = seen.get(k, 0) + 1
        calls[(keys[row], step, seen[k] - 1)] = end_us
    steps = {s["step"]: s["end_ns"] / 1000.0 for s in analysed["breakdown"]["steps"]}
    return {"calls": calls, "steps": steps}


def report_metadata(metadata) -> dict:
    """A trace's metadata as a report holds it: strings as they are, but ``distributedInfo`` (the
    job torch.profiler wrote, kept by the importer as its JSON text) as the object it is, in
    every report (one rank's, a folder's job report, a live span's)."""
    out = dict(metadata)
    raw = out.get("distributedInfo")
    if isinstance(raw, str):
        import json

        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            out["distributedInfo"] = parsed
    return out


def process_groups(metadata: dict) -> list:
    """The job's process groups, as torch lists them in a trace's ``distributedInfo``
    (``pg_config``: pg_name, pg_desc, pg_size, ranks); [] when it has none."""
    raw = metadata.get("distributedInfo") if isinstance(metadata, dict) else None
    if isinstance(raw, str):
        import json

        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    groups = raw.get("pg_config") if isinstance(raw, dict) else None
    if isinstance(groups, dict):  # some torch versions write {pg_name: config}
        groups = list(groups.values())
    out = []
    for g in groups if isinstance(groups, list) else []:
        if not isinstance(g, dict):
            continue
        ranks = g.get("ranks")
        out.append(
            {
                "pg_name": str(g.get("pg_name", "")),
                "pg_desc": str(g.get("pg_desc", "")),
                "pg_size": g.get("pg_size") if isinstance(g.get("pg_size"), int) else None,
                "ranks": [r for r in ranks if isinstance(r, int)] if isinstance(ranks, list) else None,
            }
        )
    return out


def _gpu_sample_row(raw: dict) -> dict:
    skip = ("power_mw", "energy_mj")
    row = {k: (None if v == -1 and k != "device" else v) for k, v in raw.items() if k not in skip}
    power_mw = raw.get("power_mw", -1)
    row["power_w"] = None if power_mw == -1 else power_mw / 1000.0
    energy_mj = raw.get("energy_mj", -1)
    row["energy_counter_j"] = None if energy_mj == -1 else energy_mj / 1000.0
    return row


# energy per step (docs/metrics.md, "Energy")
def _add_energy(data: dict, trace, batch_size: Optional[int]) -> None:
    """Each step's energy on the NVML-sampled devices (``steps[].energy_j``, summed over them;
    ``device_energy_j`` per device when there are several), its mean power and energy per sample,
    their means in ``average``, and the ``energy`` table (one row per device: how it was measured,
    and why steps were not). A step's sum is None when any device's energy is unknown for it: a
    partial sum is never shown as the whole."""
    steps = data["steps"]
    result = _core.step_energy(trace, [(s["start_ns"], s["end_ns"]) for s in steps])
    rows = result["devices"]
    data["energy"] = rows
    if not rows:
        return
    batch = batch_size if isinstance(batch_size, int) and batch_size > 0 else None
    several = len(rows) > 1
    from .spill import each_row

    energies = iter(result["steps"])

    def put(s: dict) -> None:
        joules = next(energies, None)
        if joules is None:
            return
        total = None if any(j is None for j in joules) else float(sum(joules))
        s.update(_energy_keys(total, s["total_us"], batch))
        if several:
            s["device_energy_j"] = {
                str(r["device"]): (None if j is None else round(j, 6)) for r, j in zip(rows, joules)
            }

    each_row(steps, put)  # (a windowed read's steps: on disk, written back)
    measured = [(s["energy_j"], s["total_us"]) for s in steps if s["energy_j"] is not None]
    energy = sum(e for e, _t in measured)
    mean = energy / len(measured) if measured else None
    keys = _energy_keys(mean, sum(t for _e, t in measured) / len(measured) if measured else 0.0, batch)
    data["average"].update(keys)


def _energy_keys(energy_j: Optional[float], dur_us: float, batch: Optional[int]) -> dict:
    if energy_j is None:
        return {"energy_j": None, "mean_power_w": None, "energy_per_sample_j": None}
    return {
        "energy_j": round(energy_j, 6),
        "mean_power_w": round(energy_j / (dur_us * 1e-6), 3) if dur_us > 0 else None,
        "energy_per_sample_j": round(energy_j / batch, 6) if batch else None,
    }


def average(steps: list[dict]) -> dict:
    """Mean of each category over the steps, and its share of the mean step."""
    keys = ["total_us"] + [f"{k}_us" for k, _ in CATEGORIES]
    if not steps:
        out = {k: 0.0 for k in keys}
        out.update({f"{k}_pct": 0.0 for k, _ in CATEGORIES})
        return out
    out = {k: round(sum(s[k] for s in steps) / len(steps), 3) for k in keys}
    total = out["total_us"]
    for k, _ in CATEGORIES:
        out[f"{k}_pct"] = round(100.0 * out[f"{k}_us"] / total, 2) if total > 0 else 0.0
    return out


# torch.compile's operators: the region Dynamo entered, the graph call, and the autograd wrappers.
_COMPILED_GRAPH = ("## Call CompiledFxGraph", "CompiledFunction")  # CompiledFunction(Backward)
_COMPILED_OTHER = ("Torch-Compiled Region", "TorchDynamo Cache Lookup")


def _compiled_regions(
    operators: list,
    dynamo: Optional[list] = None,
    kernels: Optional[list] = None,
    provenance: Optional[list] = None,
    launches: Optional[list] = None,
) -> dict:
    """What torch.compile's regions hold (docs/metrics.md, ``compiled``): the kernels the graphs
    launched themselves (inductor's, attributed by their launch correlation) and the host time no
    operator inside the graphs explains (inductor's generated code); with Dynamo's compilation
    records (a live span), its graphs, recompilations and graph breaks, and the kernels Inductor
    generated with, where its provenance was read, their aten operators (analysis/compiled.py);
    {} without compiled regions."""
    graphs = [r for r in operators if str(r.get("name", "")).startswith(_COMPILED_GRAPH)]
    if not graphs and not any(str(r.get("name", "")).startswith(_COMPILED_OTHER) for r in operators):
        return {}
    from .compiled import (
        compiled_kernel_rows,
        dynamo_lines,
        dynamo_section,
        fallback_rows,
        guard_line,
        guard_time,
        unnamed_in_trace,
        with_launch_args,
    )

    def total(rows, key):
        return float(sum(r.get(key) or 0.0 for r in rows))

    regions = [r for r in operators if str(r.get("name", "")).startswith("Torch-Compiled Region")]
    calls = [r for r in operators if str(r.get("name", "")).startswith("## Call CompiledFxGraph")]
    lookups = [r for r in operators if str(r.get("name", "")).startswith("TorchDynamo Cache Lookup")]
    out = {
        "region_calls": int(total(regions, "calls")),
        "graph_calls": int(total(calls, "calls")),
        "region_host_total_us": total(regions, "host_total_us"),
        "cache_lookup_us": total(lookups, "host_total_us"),
        **guard_time(operators),
        "graph_device_self_us": total(graphs, "device_self_us"),
        "unattributed_host_us": total(graphs, "host_self_us"),
    }
    # Older torch marks no graph call (no `## Call CompiledFxGraph`): then the note counts the
    # autograd wrappers' calls, and says so, rather than "0 graph calls" beside their host time.
    counted = (
        f"{out['graph_calls']} graph calls"
        if calls or not graphs
        else f"{int(total(graphs, 'calls'))} compiled-graph calls (counted by their CompiledFunction "
        "wrappers: the torch that ran them records no separate graph-call event)"
    )
    out["note"] = (
        f"torch.compile: {counted}; {out['unattributed_host_us'] / 1000:.3f} ms "
        "of host time inside the compiled graphs is inductor's generated code, with no operator to "
        "attribute it to"
        + (
            f"; {out['graph_device_self_us'] / 1000:.3f} ms of device work was launched by the graphs "
            "themselves (inductor's kernels: see the kernel table)"
            if out["graph_device_self_us"]
            else ""
        )
    )
    out["note"] += guard_line(out)
    fallbacks = fallback_rows(provenance, operators)
    if fallbacks:
        out["fallbacks"] = fallbacks
    generated = with_launch_args(compiled_kernel_rows(operators, kernels or [], provenance), launches)
    if generated:
        out["compiled_kernels"] = generated
        named = sum(1 for r in generated if r["ops"])
        out["note"] += (
            f"; {len(generated)} kernels inductor generated ran "
            f"{sum(r['total_us'] for r in generated) / 1000:.3f} ms ({named} named with their aten "
            "operators: compiled_kernels)"
        )
        if launches is not None:
            out["note"] += unnamed_in_trace(generated, launches)
    elif dynamo is not None and provenance is None:
        out["note"] += (
            "; gpuprof.profile(compiled_kernels=True) (gpuprof run --compiled-kernels) times "
            "inductor's C++ kernels and names the aten operators in each"
        )
    if dynamo:
        out.update(dynamo_section(dynamo, operators))
        lines = dynamo_lines(out)
        if lines:
            out["note"] += "; " + "; ".join(lines)
    return out


def _list_of_dicts(value: Any) -> list[dict]:
    from .spill import SpilledRows

    if isinstance(value, SpilledRows):  # a windowed read's per-step rows, on disk: dicts, as written
        return value
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        value = value["rows"]
    if not isinstance(value, list):
        return []
    return [row for row in value if isinstance(row, dict)]


def section(data: dict, key: str) -> list[dict]:
    """A list-of-rows section of a report dict, found at the top level or under ``tables``; []
    when absent (a CPU-only report, or one from an older gpuprof, has only some sections)."""
    tables = data.get("tables")
    if isinstance(tables, dict) and key in tables:
        return _list_of_dicts(tables[key])
    return _list_of_dicts(data.get(key))


# ---- timelines of two steps, and per-step top kernels and operators (the HTML's drill-down) ------
# At most this many collective calls are kept in a report (about 30 bytes each in its JSON): past
# them, the cross-rank split of the rows' time is left out (docs/metrics.md, "Collectives").
MAX_COLLECTIVE_CALLS = 100_000

# At most this many events per drawn step are kept in the report (the longest first); the report
# says how many were left out. Two steps are drawn: the slowest and a typical (median) one.
TIMELINE_EVENT_CAP = 4000
TOP_PER_STEP = 5
# At most this many pieces of a drawn step's critical path are kept (the longest; docs/metrics.md,
# "Critical path").
CRITICAL_PATH_PIECES = 2000


def _median_step(steps: list[dict]) -> dict:
    ordered = sorted(steps, key=lambda s: s["total_us"])
    return ordered[(len(ordered) - 1) // 2]


def step_views(
    trace,
    steps: list[dict],
    *,
    repeated_op_calls: Optional[bytes] = None,
    module_of_event: Optional[bytes] = None,
    breakdown_steps: Optional[list[dict]] = None,
    critical_path_kept=None,
) -> dict:
    """Computed by the report builder when the report will be saved or drawn (``build_report``'s
    ``with_step_views``), not by ``report_dict``: a text report does not need it. The per-step tables
    are one native pass, reusing the analysis pass's per-event flags, and each drawn step's
    timeline another (rows come to Python as lists, not one dict per event).

    The events of the slowest and the median step (capped), per-step top kernels and
    operators, and which steps are outliers: what the HTML report draws and drills into. With the
    native breakdown's steps (``breakdown_steps``), each drawn step also carries its critical path
    (``critical_path``: pieces [start_us, dur_us, cause, name index, place index] into its names
    and places, merged, cut, cut_us); ``critical_path_kept`` (the analysis pass's paths of the drawn
    steps, ``gpu_tables``' ``critical_path_kept``) spares walking them again."""
    if not steps:
        return {"timelines": [], "per_step": {}, "outliers": [], "event_cap": TIMELINE_EVENT_CAP}
    # Per-step kernels and operators (the operator table's same-name rule), in one native pass.
    tables = _core.step_event_tables(
        trace, [(s["start_ns"], s["end_ns"]) for s in steps], TOP_PER_STEP, repeated_op_calls
    )
    timelines = [
        step_timeline_view(
            trace,
            label,
            step,
            module_of_event=module_of_event,
            breakdown_steps=breakdown_steps,
            critical_path_kept=critical_path_kept,
        )
        for label, step in drawn_steps(steps)
    ]
    return {
        "timelines": timelines,
        "per_step": step_tops(steps, tables),
        "outliers": outlier_steps(steps),
        "event_cap": TIMELINE_EVENT_CAP,
    }


def drawn_steps(steps: list[dict]) -> list[tuple[str, dict]]:
    """The steps the HTML draws: the slowest, and the median one when it is another."""
    from .spill import SpilledRows

    if not isinstance(steps, SpilledRows):
        slowest = max(steps, key=lambda s: s["total_us"])
        typical = _median_step(steps)
        return [("slowest", slowest)] + ([("typical", typical)] if typical is not slowest else [])
    # A windowed read's steps (on disk): chosen by their times, the two rows read again.
    times = [s["total_us"] for s in steps]
    slowest = max(range(len(times)), key=times.__getitem__)
    typical = sorted(range(len(times)), key=times.__getitem__)[(len(times) - 1) // 2]
    return [("slowest", steps[slowest])] + ([("typical", steps[typical])] if typical != slowest else [])


def step_timeline_view(
    trace,
    label: str,
    step: dict,
    *,
    module_of_event: Optional[bytes] = None,
    breakdown_steps: Optional[list[dict]] = None,
    critical_path_kept=None,
) -> dict:
    """One drawn step's timeline (``step_views``' ``timelines`` entry) from a trace holding its events."""
    # Host threads and GPU streams, device work kept first up to the cap, then the longest host
    # events; rows [lane, name, start_us, dur_us, category, kind], lane and name pointing into the
    # first-seen lists lane_order and names; the category is the breakdown's (one native pass).
    tl = _core.step_timeline(trace, step["start_ns"], step["end_ns"], TIMELINE_EVENT_CAP, module_of_event)
    lanes = tl["lane_order"]
    # With a module view: each event's module row (index into `modules`, -1 none).
    extra = {"module_of": tl["module_of"]} if "module_of" in tl else {}
    path = _critical_path_of(trace, step, breakdown_steps, critical_path_kept)
    if path is not None:
        extra["critical_path"] = path
    return {
        "label": label,
        "step": step["step"],
        "total_us": step["total_us"],
        "lanes": sorted(lanes, key=_lane_order),
        "lane_order": lanes,
        "names": tl["names"],
        "events": tl["events"],
        "counts": tl["counts"],
        "left_out": tl["total"] - len(tl["events"]),
        **extra,
    }


def step_tops(steps: list[dict], tables: list) -> dict:
    """``step_views``' ``per_step``: each step's top kernels and operators (``_core.step_event_tables``'
    rows of the same steps), keyed by its number; steps with neither left out."""
    tops = {}
    for step, table in zip(steps, tables):
        if not (table["kernels_count"] or table["operators_count"]):
            continue
        tops[str(step["step"])] = {
            "kernels_count": table["kernels_count"],
            "operators_count": table["operators_count"],
            **{
                key: [{"name": n, "calls": c, "total_us": round(t / 1000.0, 3)} for n, c, t in table[key]]
                for key in ("kernels", "operators")
            },
        }
    return tops


def _critical_path_of(trace, step: dict, breakdown_steps: Optional[list[dict]], kept=None) -> Optional[dict]:
    """The drawn step's critical path as merged pieces (at most CRITICAL_PATH_PIECES, the shortest
    left out past them), or None when the native breakdown's step is not at hand. Names and places
    come once each (a kernel-bound step repeats a few kernel names thousands of times), the pieces
    pointing into them. ``kept``: the analysis pass's paths, taken when they hold this step."""
    native_step = next(
        (
            s
            for s in breakdown_steps or []
            if (s["step"], s["start_ns"], s["end_ns"]) == (step["step"], step["start_ns"], step["end_ns"])
        ),
        None,
    )
    if native_step is None:
        return None
    (path,) = _core.critical_path_pieces(trace, [native_step], CRITICAL_PATH_PIECES, kept)
    return path


def _lane_order(lane: str) -> tuple:
    """Host threads first, each with its module calls right above it; then the DataLoader
    workers' lanes; then the GPU streams."""
    modules = "modules, "
    if lane.startswith(modules + "host"):
        return (0, lane[len(modules) :], 0)
    if lane.startswith("host"):
        return (0, lane, 1)
    return (1, lane, 0) if lane.startswith("DataLoader worker") else (2, lane, 0)


def outlier_steps(steps: list[dict]) -> list[int]:
    """Steps longer than 1.5x the median step (and than median + 3 median absolute deviations)."""
    if len(steps) < 3:
        return []
    totals = sorted(s["total_us"] for s in steps)
    med = totals[(len(totals) - 1) // 2]
    mad = sorted(abs(t - med) for t in totals)[(len(totals) - 1) // 2]
    return [s["step"] for s in steps if s["total_us"] > 1.5 * med and s["total_us"] > med + 3 * mad]
