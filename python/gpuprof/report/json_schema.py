"""The report's JSON layout, ``schema_version`` 4, as a JSON Schema (draft 2020-12).

docs/schema.md explains every key in words; this is the same contract for tools: validate a
``report.json`` with any JSON Schema validator (``jsonschema.validate(data, SCHEMA)``; ``schema()``
builds it, the result tables from analysis/fields.py). Additional keys are allowed everywhere:
later gpuprof versions add keys and never remove or rename one.
"""

from __future__ import annotations

import copy

from ..analysis import CATEGORIES, SCHEMA_VERSION, fields
from ..analysis.fields import (
    INPUT_PIPELINE,
    INPUT_PIPELINE_OBJECTS,
    INPUT_PIPELINE_ROWS,
    OBJECT_BY_KEY,
    STAGE_STATS,
)

_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_STR_OR_NULL = {"type": ["string", "null"]}
_BOOL = {"type": "boolean"}

_CATEGORY_US = {f"{k}_us": _NUM for k, _ in CATEGORIES}
_CATEGORY_PCT = {f"{k}_pct": _NUM for k, _ in CATEGORIES}
# energy per step (docs/metrics.md, "Energy"): in steps[] and average when NVML sampled a GPU
_ENERGY = {"energy_j": _NUM_OR_NULL, "mean_power_w": _NUM_OR_NULL, "energy_per_sample_j": _NUM_OR_NULL}


def _row(table: str) -> dict:
    """One row of a result table (analysis/fields.py)."""
    return {
        "type": "object",
        "properties": {
            f.key: {"type": f.type.split("|") if "|" in f.type else f.type}
            for f in fields.table(table).fields
        },
    }


def _memory_object(name: str) -> dict:
    """One of the memory view's objects (analysis/fields.py, OBJECTS); its rows by their type."""
    props = {}
    for f in OBJECT_BY_KEY[name].fields:
        props[f.key] = _typed(f)
    for key, rows in (("top_ops", "memory_owner"), ("top_modules", "memory_owner")):
        if key in props:
            props[key]["items"] = _memory_object(rows)
    if name == "memory_growth":
        props["ops"]["items"] = props["modules"]["items"] = _memory_object("memory_growth_owner")
    if name == "out_of_memory":
        props["composition"] = {"oneOf": [_memory_object("memory_composition"), {"type": "null"}]}
    return {"type": "object", "properties": props}


def _by_device(name: str) -> dict:
    return {"type": "object", "additionalProperties": _memory_object(name)}


def _rows(table: str) -> dict:
    """A result table: a list of flat rows (or {"rows": [...]})."""
    row = _row(table)
    return {
        "oneOf": [
            {"type": "array", "items": row},
            {"type": "object", "properties": {"rows": {"type": "array", "items": row}}, "required": ["rows"]},
        ]
    }


def _typed(field) -> dict:
    return {"type": field.type.split("|") if "|" in field.type else field.type}


def _object(fields, nullable: bool = False) -> dict:
    return {
        "type": ["object", "null"] if nullable else "object",
        "properties": {f.key: _typed(f) for f in fields},
    }


def _input_pipeline() -> dict:
    """The ``input_pipeline`` object (analysis/fields.py declares its keys)."""
    props: dict = {}
    for f in INPUT_PIPELINE:
        if f.key in INPUT_PIPELINE_ROWS:
            props[f.key] = {"type": "array", "items": _object(INPUT_PIPELINE_ROWS[f.key])}
        elif f.key in INPUT_PIPELINE_OBJECTS:
            props[f.key] = _object(INPUT_PIPELINE_OBJECTS[f.key])
        elif f.key.endswith("_us") and f.type == "object|null":
            props[f.key] = _object(STAGE_STATS, nullable=True)
        elif f.key in ("limits", "notes"):
            props[f.key] = {"type": "array", "items": _STR}
        else:
            props[f.key] = _typed(f)
    return {"type": "object", "properties": props}


# A straggler call (docs/distributed.md): the rank, its typical excess, and what the call rests on.
_STRAGGLER = {
    "type": "object",
    "required": ["rank", "excess_us", "excess_pct", "category"],
    "properties": {
        "rank": _INT,
        "excess_us": _NUM,
        "excess_pct": _NUM,
        "category": _STR,
        "steps_held": {"type": "array", "items": _INT},
        "matched_steps": _INT,
        "threshold_us": _NUM,
        "noise_us": _NUM,
        "best_excess_us": _NUM,
    },
}

# The schema less the plain result tables, which schema() adds from analysis/fields.py.
_LAYOUT: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"gpuprof-report-v{SCHEMA_VERSION}",
    "title": f"gpuprof report, schema_version {SCHEMA_VERSION}",
    "type": "object",
    "required": ["schema_version", "steps", "average", "dataloaders", "counts"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "gpuprof_version": _STR,
        "source": {
            "type": "object",
            "properties": {
                "kind": _STR,
                "partial_span": _BOOL,
                "span": _INT,
                "created_unix": _NUM,
                "path": _STR,
                "first_step": _INT,
                "last_step": _INT,
                "complete_span": _INT,
                "note": _STR,
                "trace_path": _STR,
                "report_build_s": _NUM,
                "report_write_s": _NUM,
            },
        },
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["step", "total_us", *_CATEGORY_US],
                "properties": {
                    "step": _INT,
                    "total_us": _NUM,
                    **_CATEGORY_US,
                    "start_ns": _INT,
                    "end_ns": _INT,
                    "flops": {"type": ["integer", "null"]},
                    **_ENERGY,
                    "device_energy_j": {"type": "object", "additionalProperties": _NUM_OR_NULL},
                },
            },
        },
        "average": {
            "type": "object",
            "required": ["total_us", *_CATEGORY_US, *_CATEGORY_PCT],
            "properties": {"total_us": _NUM, **_CATEGORY_US, **_CATEGORY_PCT, **_ENERGY},
        },
        "step_rules": {
            "type": "object",
            "properties": {
                "had_step_markers": _BOOL,
                "dropped_trailing_steps": _INT,
                "dropped_incomplete_last": _BOOL,
                "duplicate_step_markers": _INT,
                "nested_step_markers": _INT,
                "malformed_step_markers": _INT,
                "skewed_device_events": _INT,
            },
        },
        "long_names": {"type": "object", "additionalProperties": _STR},
        "warnings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["kind", "count", "message"],
                "properties": {"kind": _STR, "count": _INT, "message": _STR},
            },
        },
        "dataloaders": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "iterator": _STR,
                    "dataset": {"type": ["string", "null"]},
                    "dataset_length": {"type": ["integer", "null"]},
                    "batch_size": {"type": ["integer", "null"]},
                    "num_workers": _INT,
                    "pin_memory": _BOOL,
                    "prefetch_factor": {"type": ["integer", "null"]},
                    "persistent_workers": _BOOL,
                    "batches_seen": _INT,
                },
            },
        },
        "host": {
            "type": "object",
            "properties": {
                "cpus_available": _INT,
                "cpu_count": {"type": ["integer", "null"]},
                "cuda_available": _BOOL,
                "cuda_device_count": _INT,
                "float32_matmul_precision": _STR,
                "cpu_budget": _NUM,
                "cpu_budget_source": _STR,
            },
        },
        "counts": {
            "type": "object",
            "required": ["events"],
            "properties": {"events": _INT, "dropped": _INT, "skipped": _INT, "steps": _INT},
        },
        "metadata": {
            "type": "object",
            # Free-form strings, but distributedInfo: the job torch.profiler wrote, as an object.
            "properties": {"distributedInfo": {"type": "object"}},
            "additionalProperties": _STR,
        },
        "devices": {"type": "array", "items": _row("devices")},
        "input_pipeline": _input_pipeline(),
        # The cross-rank report (docs/distributed.md).
        "distributed": {
            "type": "object",
            "properties": {
                "rank": _INT,
                "local_rank": _INT,
                "world_size": _INT,
                "hostname": _STR,
                "backend": _STR,
                "device": _STR,
                "batch_size": {"type": ["integer", "null"]},
            },
        },
        "ranks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "rank",
                    "local_rank",
                    "world_size",
                    "hostname",
                    "device",
                    "steps",
                    "average",
                    "collective_wait_us",
                    "comm_comp_overlap_pct",
                ],
                "properties": {
                    "rank": _INT,
                    "local_rank": _INT,
                    "world_size": _INT,
                    "hostname": _STR,
                    "device": _STR,
                    "steps": _INT,
                    "busy_us": _NUM,
                    "collective_wait_us": _NUM,
                    "comm_comp_overlap_pct": _NUM_OR_NULL,
                    "comm_copy_overlap_pct": _NUM_OR_NULL,
                    "tflops_per_s": _NUM_OR_NULL,
                    "mfu_pct": _NUM_OR_NULL,
                    "energy_j": _NUM_OR_NULL,
                    "energy_per_sample_j": _NUM_OR_NULL,
                    "average": {
                        "type": "object",
                        "required": ["total_us", *_CATEGORY_US],
                        "properties": {"total_us": _NUM, **_CATEGORY_US, **_CATEGORY_PCT},
                    },
                },
            },
        },
        "stragglers": {"type": "array", "items": _STRAGGLER},
        "cross_rank": {
            "type": "object",
            "properties": {
                "world_size": _INT,
                "matched_steps": _INT,
                "missing_ranks": {"type": "array", "items": _INT},
                "imbalance_pct": _NUM,
                "slowest_unnamed": {"oneOf": [_STRAGGLER, {"type": "null"}]},
                "note": _STR,
                "skipped_files": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["path", "error"],
                        "properties": {"path": _STR, "error": _STR},
                    },
                },
            },
        },
        "memory_peak": _by_device("memory_peak"),
        "memory_composition": _by_device("memory_composition"),
        "memory_growth": _by_device("memory_growth"),
        "out_of_memory": _memory_object("out_of_memory"),
        # Every collective call: [row of collectives[], step, dur_us, end_us, bytes or null]; null
        # when there were too many to keep.
        "collective_calls": {
            "type": ["array", "null"],
            "items": {
                "type": "array",
                "prefixItems": [_INT, _INT, _NUM, _NUM, {"type": ["integer", "null"]}],
            },
        },
        "compiled": {
            "type": "object",
            "properties": {
                "region_calls": _INT,
                "graph_calls": _INT,
                "region_host_total_us": _NUM,
                "cache_lookup_us": _NUM,
                "guard_us": _NUM_OR_NULL,
                "guard_calls": {"type": ["integer", "null"]},
                "graph_device_self_us": _NUM,
                "unattributed_host_us": _NUM,
                "note": _STR,
                "graphs": _INT,
                "recompilations": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "function",
                            "source",
                            "count",
                            "guard",
                            "dimension",
                            "values",
                            "compile_us",
                        ],
                        "properties": {
                            "function": _STR_OR_NULL,
                            "source": _STR_OR_NULL,
                            "count": _INT,
                            "guard": _STR,
                            "dimension": _STR_OR_NULL,
                            "values": {"type": "array", "items": _INT},
                            "compile_us": _NUM,
                        },
                    },
                },
                "graph_breaks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["reason", "explanation", "function", "source", "count", "compiles"],
                        "properties": {
                            "reason": _STR,
                            "explanation": _STR_OR_NULL,
                            "function": _STR,
                            "source": _STR_OR_NULL,
                            "count": {"type": ["integer", "null"]},
                            "compiles": _INT,
                        },
                    },
                },
                "fallbacks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["op", "sources", "calls", "host_total_us", "device_total_us"],
                        "properties": {
                            "op": _STR,
                            "sources": {"type": "array", "items": _STR},
                            "calls": _INT,
                            "host_total_us": _NUM,
                            "device_total_us": _NUM,
                        },
                    },
                },
                "compiled_kernels": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "kernel",
                            "backend",
                            "time_on",
                            "calls",
                            "total_us",
                            "fused",
                            "ops",
                            "sources",
                        ],
                        "properties": {
                            "kernel": _STR,
                            "backend": _STR,
                            "time_on": {"enum": ["host", "device"]},
                            "calls": _INT,
                            "total_us": _NUM,
                            "fused": _STR_OR_NULL,
                            "ops": {"type": ["array", "null"], "items": _STR},
                            "sources": {"type": ["array", "null"], "items": _STR},
                            "module": _STR_OR_NULL,
                            "source": _STR_OR_NULL,
                            "flops": {"type": ["integer", "null"]},
                            "matmul_flops": {"type": ["integer", "null"]},
                        },
                    },
                },
                "modules": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["path", "kernels", "calls", "total_us", "flops"],
                        "properties": {
                            "path": _STR,
                            "kernels": _INT,
                            "calls": _INT,
                            "total_us": _NUM,
                            "flops": _INT,
                        },
                    },
                },
            },
        },
        # The chain that set each step's length (docs/metrics.md, "Critical path")
        "critical_path": {
            "type": "object",
            "required": ["steps"],
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["step", "length_us", "by_cause_pct", "top"],
                        "properties": {
                            "step": _INT,
                            "length_us": {"type": "number"},
                            "by_cause_pct": {"type": "object", "additionalProperties": {"type": "number"}},
                            "launch_calls_pct": {"type": "number"},
                            "held_by": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["rank", "wait_us", "its_cause"],
                                    "properties": {
                                        "rank": _INT,
                                        "wait_us": {"type": "number"},
                                        "its_cause": {"type": ["string", "null"]},
                                    },
                                },
                            },
                            "top": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["name", "kind", "us", "pct"],
                                    "properties": {
                                        "name": _STR,
                                        "kind": _STR,
                                        "us": {"type": "number"},
                                        "pct": {"type": "number"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
        # FLOPs (docs/metrics.md, "FLOPs", "MFU and HFU", "Roofline")
        "flops": {
            "type": "object",
            "required": [
                "per_step_flops",
                "tflops_per_s",
                "peak_tflops",
                "peak_source",
                "dtype",
                "mfu_pct",
                "hfu_pct",
            ],
            "properties": {
                "per_step_flops": {"type": ["integer", "null"]},
                "tflops_per_s": _NUM_OR_NULL,
                "peak_tflops": _NUM_OR_NULL,
                "peak_source": {"type": ["string", "null"]},
                "peak_estimate": _BOOL,
                "dtype": _STR,
                "mfu_pct": _NUM_OR_NULL,
                "hfu_pct": _NUM_OR_NULL,
                "model_flops_per_step": {"type": ["integer", "null"]},
                "training": _BOOL,
                "matmul_flops_per_step": {"type": ["integer", "null"]},
                "matmul_forward_flops_per_step": {"type": ["integer", "null"]},
                "other_flops_per_step": {"type": ["integer", "null"]},
                "forward_flops_per_step": {"type": ["integer", "null"]},
                "backward_flops_per_step": {"type": ["integer", "null"]},
                "recompute_flops_per_step": {"type": ["integer", "null"]},
                "matmul_flops_by_dtype": {"type": "object", "additionalProperties": _INT},
                "counted_calls": _INT,
                "uncounted_calls": _INT,
                "uncounted_by_op": {"type": "object", "additionalProperties": _INT},
                "trace_flops_checked": _INT,
                "trace_flops_differ": _INT,
                "memory_bandwidth_gbps": _NUM_OR_NULL,
                "bandwidth_source": {"type": ["string", "null"]},
                "ridge_flop_per_byte": _NUM_OR_NULL,
                "memory_bound_pct": _NUM_OR_NULL,
                "compute_bound_pct": _NUM_OR_NULL,
                "matmul_time_pct": _NUM_OR_NULL,
                "tensor_core_pct": _NUM_OR_NULL,
                "note": _STR,
            },
        },
        "roofline": {"type": "array", "items": _row("roofline")},
        "memory_curve": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {"type": "array", "prefixItems": [_NUM, _INT, {"type": ["integer", "null"]}]},
            },
        },
        "gpu_timeline": {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "start_us": _NUM,
                        "dur_us": _NUM,
                        "utilization_pct": _NUM,
                        "sm_efficiency_pct": _NUM,
                    },
                },
            },
        },
        "advice": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "title"],
                "properties": {
                    "rule": _STR,
                    "title": _STR,
                    "evidence": {"type": ["string", "array", "object", "null"]},
                    "saving_bound_pct": _NUM_OR_NULL,
                    "confidence": {"type": ["string", "null"]},
                    "confidence_reason": {"type": ["string", "null"]},
                    "change": {"type": "object"},
                    "fix": {"type": ["string", "null"]},
                    "docs": {"type": ["string", "null"]},
                },
            },
        },
    },
}


def schema() -> dict:
    """The report's JSON Schema: the layout above, and each result table fields.py declares as a
    list of rows (a table whose rows are drawn otherwise, such as ``devices``, is in the layout)."""
    out = copy.deepcopy(_LAYOUT)
    props = out["properties"]
    for t in fields.TABLES:
        if t.key not in props:
            props[t.key] = _rows(t.key)
    return out


SCHEMA: dict = schema()
