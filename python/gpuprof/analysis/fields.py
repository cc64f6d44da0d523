"""The report's result tables, declared once on the Python side: each table's key, title, and the
fields of its rows (key, JSON type, meaning, and for the GPU summary the label a person reads).

The rows themselves are made in C++ (cpp/bindings/analysis_bindings.cpp declares each row type's
fields once, in the same order); ``tests/python/test_fields.py`` checks that both declarations
agree on a real analysis. From here a table reaches:

- the JSON Schema (``report/json_schema.py`` builds each table's row properties from it);
- the schema doc (docs/schema.md's "Table rows" section is generated from it:
  ``python -m gpuprof.analysis.fields`` prints it, and a test keeps the doc equal to it);
- the renderers (``report/sections.py``: which tables the reports show and in what order, and the
  GPU summary's labels); their columns are every scalar field a row carries.

A new column: one line in the C++ field table, one ``Field`` here. A new table: one ``Table`` here
(and its rows in the analysis).
"""

from __future__ import annotations

from typing import NamedTuple, Optional


class Field(NamedTuple):
    key: str
    type: (
        str  # JSON type: "integer", "number", "string", "boolean", "array"; "|null" when unknown may be null
    )
    meaning: str
    label: Optional[str] = None  # how a person reads it in the GPU summary


class Table(NamedTuple):
    key: str  # the report's top-level key
    title: str  # how the reports head it
    fields: tuple  # of Field, in the rows' order
    shown: bool = False  # a table of rows in the terminal, Markdown and HTML reports (in this order)


_US = "number"
_NULLABLE_NUM = "number|null"

TABLES: tuple[Table, ...] = (
    Table(
        "kernels",
        "GPU kernels",
        (
            Field("name", "string", "the kernel's name"),
            Field("calls", "integer", "launches"),
            Field("total_us", _US, "summed device time"),
            Field("mean_us", _US, "mean device time per launch"),
            Field("min_us", _US, "shortest launch"),
            Field("max_us", _US, "longest launch"),
            Field(
                "mean_blocks_per_sm", _NULLABLE_NUM, "grid blocks / SMs, weighted by duration (null: unknown)"
            ),
            Field("mean_occupancy_pct", _NULLABLE_NUM, "estimated achieved occupancy, weighted by duration"),
            Field("tensor_cores", "boolean", "the kernel runs on tensor cores"),
        ),
        shown=True,
    ),
    Table(
        "operators",
        "Operators",
        (
            Field("name", "string", "the operator's name (aten::..., or a user-visible op)"),
            Field("calls", "integer", "calls (same-name nesting counted once)"),
            Field("host_self_us", _US, "host time less the operators inside it and its own runtime calls"),
            Field("host_total_us", _US, "host time, operators inside it included"),
            Field("device_self_us", _US, "device time of the kernels it launched itself"),
            Field("device_total_us", _US, "device time of its kernels and those of every op inside it"),
            Field("tc_eligible", "boolean", "an operator that could run on tensor cores"),
            Field(
                "tc_self_pct",
                _NULLABLE_NUM,
                "tensor-core kernels' share of `device_self_us` (null: no device time of its own)",
            ),
            Field(
                "tc_total_pct",
                _NULLABLE_NUM,
                "tensor-core kernels' share of `device_total_us` (null: no device time)",
            ),
        ),
        shown=True,
    ),
    Table(
        "operators_by_shape",
        "Operators by input shape",
        (
            Field("name", "string", "the operator's name, as in `operators`"),
            Field(
                "input_shapes",
                "string",
                "its calls' input shapes (`record_shapes=True` live, Kineto's `Input Dims` in a trace) as "
                "Python prints the list, `[[32, 3, 224, 224], [64, 3, 7, 7]]`; empty for calls recorded "
                "without them",
            ),
            Field("calls", "integer", "calls with these shapes"),
            Field("host_self_us", _US, "as in `operators`, over these calls"),
            Field("host_total_us", _US, "as in `operators`, over these calls"),
            Field("device_self_us", _US, "as in `operators`, over these calls"),
            Field("device_total_us", _US, "as in `operators`, over these calls"),
            Field("tc_self_pct", _NULLABLE_NUM, "as in `operators`, over these calls"),
            Field("tc_total_pct", _NULLABLE_NUM, "as in `operators`, over these calls"),
        ),
        shown=True,
    ),
    Table(
        "modules",
        "Modules",
        (
            Field(
                "path",
                "string",
                'the module\'s name in the model, `layer1.0.conv1` (`""`: the model itself; from a '
                "torch.profiler trace, instance names such as `Sequential_0.BasicBlock_1`)",
            ),
            Field("type", "string", "the module's class, `Conv2d`"),
            Field("parent", "string|null", "the `path` of the module that called it (null: a root)"),
            Field("depth", "integer", "calls between it and its root (0: a root)"),
            Field("calls", "integer", "forward calls"),
            Field(
                "host_total_us",
                _US,
                "its forward calls' host time, and the backward ops of its own and its children's forward",
            ),
            Field("host_self_us", _US, "`host_total_us` less that of the modules it called"),
            Field(
                "device_total_us",
                _US,
                "device time launched by the ops of its forward and backward, its children's included",
            ),
            Field("device_self_us", _US, "`device_total_us` less that of the modules it called"),
        ),
    ),
    Table(
        "kernel_ops",
        "GPU kernels by launching operator",
        (
            Field("kernel", "string", "the kernel's name"),
            Field("operator", "string", "the host operator whose runtime call launched it (empty: none)"),
            Field("grid", "array", "grid size [x, y, z] ([0, 0, 0]: not recorded)"),
            Field("block", "array", "block size [x, y, z] ([0, 0, 0]: not recorded)"),
            Field("registers_per_thread", "integer|null", "registers per thread (null: not recorded)"),
            Field("shared_memory_bytes", "integer|null", "shared memory per block (null: not recorded)"),
            Field("calls", "integer", "launches"),
            Field("total_us", _US, "summed device time"),
            Field("mean_us", _US, "mean device time per launch"),
            Field("min_us", _US, "shortest launch"),
            Field("max_us", _US, "longest launch"),
            Field("blocks_per_sm", _NULLABLE_NUM, "grid blocks / SMs, weighted by duration (null: unknown)"),
            Field("occupancy_pct", _NULLABLE_NUM, "estimated achieved occupancy, weighted by duration"),
        ),
        shown=True,
    ),
    Table(
        "copies",
        "Memory copies",
        (
            Field("kind", "string", "HtoD, DtoH, DtoD, HtoH, PtoP, or Memset"),
            Field("host_memory", "string|null", "`pageable` or `pinned` for host copies, else null"),
            Field("count", "integer", "copies"),
            Field("bytes", "integer", "bytes moved"),
            Field("total_us", _US, "summed device time"),
            Field("gb_per_s", "number", "bytes / copy time"),
        ),
        shown=True,
    ),
    Table(
        "syncs",
        "Synchronisations",
        (
            Field("name", "string", "the host-blocking call"),
            Field("op", "string", "the outermost host operator around the call"),
            Field("count", "integer", "calls"),
            Field("total_us", _US, "host time blocked"),
        ),
        shown=True,
    ),
    Table(
        "ranges",
        "User ranges",
        (
            Field("name", "string", "the range's name (record_function, NVTX, `Optimizer.step#...`)"),
            Field("calls", "integer", "calls"),
            Field("host_total_us", _US, "host time inside the range"),
            Field(
                "closure_us",
                _US,
                "the part up to the end of the last backward op inside it (an optimizer "
                "stepped with a closure)",
            ),
        ),
    ),
    Table(
        "collectives",
        "Collectives",
        (
            Field(
                "name",
                "string",
                "the collective, in nccl-tests' words: `all_reduce`, `all_gather`, `reduce_scatter`, "
                "`all_to_all`, `broadcast`, `reduce`, `send`, `recv`, `barrier`, ...",
            ),
            Field(
                "process_group",
                "string",
                "the process group's name as torch records it (`pg_name`: `0` for the default group); "
                "empty when the record names none and the job has several",
            ),
            Field(
                "pg_desc",
                "string",
                "the group's description (`pg_desc`: `default_pg`, or new_group's group_desc)",
            ),
            Field("group_size", "integer|null", "ranks in the group (`Group size`)"),
            Field(
                "group_ranks",
                "string",
                "the group's global ranks as torch writes them (`Process Group Ranks`)",
            ),
            Field("calls", "integer", "calls in the steps"),
            Field(
                "bytes",
                "integer|null",
                "nccl-tests' size of each call, summed (all_reduce: the buffer; all_gather: the gathered "
                "output; reduce_scatter, all_to_all: the whole input); null unless every call's is recorded",
            ),
            Field(
                "total_us",
                _US,
                "the calls' time (device kernels when they ran on the device, else host range)",
            ),
            Field("mean_us", _US, "total_us / calls"),
            Field(
                "transfer_us",
                _NULLABLE_NUM,
                "(cross-rank report) of total_us, the time moving data: per call the least any rank "
                "took (the TensorBoard plugin's rule); null without the other ranks' calls",
            ),
            Field(
                "wait_us",
                _NULLABLE_NUM,
                "(cross-rank report) total_us - transfer_us: waiting for the slowest rank to arrive",
            ),
            Field(
                "algbw_gbps",
                _NULLABLE_NUM,
                "nccl-tests' algorithm bandwidth: bytes / time (transfer_us when known, else total_us), GB/s",
            ),
            Field(
                "busbw_gbps",
                _NULLABLE_NUM,
                "nccl-tests' bus bandwidth: algbw x the kind's factor for n = group_size (all_reduce "
                "2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send, recv 1)",
            ),
            Field(
                "timed_by", "string", "`device` (its communication kernels) or `host` (its host range: gloo)"
            ),
        ),
        shown=True,
    ),
    Table(
        "memory",
        "Memory",
        (
            Field("step", "integer", "step number"),
            Field("ts_ns", "integer", "the step's start on the trace clock"),
            Field("device", "integer", "GPU index; -1 the host"),
            Field("peak_allocated_bytes", "integer|null", "peak allocated by torch's caching allocator"),
            Field("peak_reserved_bytes", "integer|null", "peak reserved by torch's caching allocator"),
            Field(
                "capacity_bytes",
                "integer|null",
                "the device's memory (null where the trace records only allocation sizes)",
            ),
            Field(
                "peak_rss_bytes",
                "integer|null",
                "(host rows of live sessions) the process's resident set size",
            ),
        ),
    ),
    Table(
        "devices",
        "GPU summary",
        (
            Field("id", "integer", "GPU index"),
            Field("name", "string", "GPU model"),
            Field("compute_capability", "string|null", "major.minor, when known"),
            Field(
                "utilization_pct",
                _NULLABLE_NUM,
                "GPU utilization: union of kernel time over the step window",
                "GPU utilization",
            ),
            Field(
                "sm_efficiency_pct",
                _NULLABLE_NUM,
                "Est. SM efficiency (docs/metrics.md)",
                "Est. SM efficiency",
            ),
            Field(
                "achieved_occupancy_pct",
                _NULLABLE_NUM,
                "Est. achieved occupancy, kernel-time weighted",
                "Est. achieved occupancy",
            ),
            Field(
                "tensor_core_pct",
                _NULLABLE_NUM,
                "kernel time in tensor-core kernels / all kernel time",
                "Kernel time on tensor cores",
            ),
            Field(
                "tc_eligible_pct",
                _NULLABLE_NUM,
                "share of kernel time launched by tensor-core-eligible operators",
                "Tensor-core-eligible share",
            ),
            Field("memory_total_bytes", "integer|null", "device memory", "Device memory"),
            Field(
                "peak_allocated_bytes",
                "integer|null",
                "peak memory allocated by the caching allocator",
                "Peak allocated",
            ),
            Field("window_us", _US, "the window the summary covers"),
            Field("kernel_us", _US, "kernel time inside it (overlaps counted per kernel)"),
            Field("kernels", "integer", "kernels overlapping it"),
            Field(
                "comm_kernel_us",
                _US,
                "communication kernels (NCCL, RCCL, NVSHMEM) inside the window, as a union",
            ),
            Field(
                "comm_overlap_compute_us",
                _US,
                "the part of it a compute kernel (any other kernel) ran beside",
            ),
            Field("comm_overlap_copy_us", _US, "the part of it a memory copy ran beside"),
        ),
    ),
    Table(
        "gpu_samples",
        "NVML samples",
        (
            Field("ts_ns", "integer", "sample time on the trace clock"),
            Field("device", "integer", "device index"),
            Field("gpu_util_pct", _NULLABLE_NUM, "GPU utilization NVML reports (null: not reported)"),
            Field("mem_util_pct", _NULLABLE_NUM, "memory-controller utilization"),
            Field("memory_used_bytes", "integer|null", "device memory in use"),
            Field("sm_clock_mhz", _NULLABLE_NUM, "SM clock"),
            Field("temperature_c", _NULLABLE_NUM, "temperature"),
            Field("power_w", _NULLABLE_NUM, "power draw"),
        ),
    ),
)

BY_KEY: dict[str, Table] = {t.key: t for t in TABLES}


def shown_tables() -> list[tuple[str, str]]:
    """(key, title) of the tables the reports show as rows, in their order."""
    return [(t.key, t.title) for t in TABLES if t.shown]


def labelled(table: str) -> list[tuple[str, str]]:
    """(key, label) of a table's fields that carry a label (the GPU summary's rows)."""
    return [(f.key, f.label) for f in BY_KEY[table].fields if f.label]


def schema_markdown() -> str:
    """docs/schema.md's "Table rows" section: one table of fields per result table."""
    out = []
    for t in TABLES:
        out += [f"### `{t.key}[]`: {t.title}", "", "| key | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{f.key}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in t.fields]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(schema_markdown(), end="")
