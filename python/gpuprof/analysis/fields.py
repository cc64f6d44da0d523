"""The report's result tables, declared once on the Python side: each table's key, title, and the
fields of its rows (key, JSON type, meaning, and for the GPU summary the label a person reads).

The rows themselves are made in C++ (cpp/bindings/analysis_bindings.cpp declares each row type's
fields once, in the same order, and registers each table in one line: ``_core.RESULT_TABLES``);
``tests/python/analysis/test_fields.py`` checks that both declarations agree on a real analysis.
Everything else about a table is read from here, when it is used:

- the report dict: an ``analysed`` table's rows are copied from the native analysis
  (``analysis/__init__.py``);
- the plausibility checks: every field whose key ends in ``_pct`` is a share, within 0-100 by
  definition (``analysis/implausible.py`` clamps it);
- the JSON Schema (``report/json_schema.py`` builds each table's row properties from it);
- the schema doc (docs/schema.md's "Table rows" section is generated from it:
  ``python -m gpuprof.analysis.fields`` prints it, and a test keeps the doc equal to it);
- the Report's accessors (``report/model.py``: ``report.<key>``, the rows or []);
- the renderers (``report/sections``: a ``shown`` table is drawn in the Markdown and HTML reports,
  a ``terminal`` one in the terminal's too, in this order, under its title, its columns every
  scalar field its rows carry; and the GPU summary's labels).

A new column: one line in the C++ field table, one ``Field`` here. A new table: its rows and field
table in C++, one ``Table`` here; a renderer only when it draws something special.
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
    shown: bool = False  # a table of rows in the Markdown and HTML reports (in this order)
    terminal: bool = False  # and in the terminal's too (the terminal shows few: it has one screen)
    analysed: bool = False  # rows the native analysis makes, copied into the report as they are
    doc: str = ""  # what the Report's accessor says of it (the title when empty)
    omit_empty: bool = False  # an analysed table left out of the report when it has no rows


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
        terminal=True,
        analysed=True,
        doc="GPU kernels, one row per kernel name and device (device times).",
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
            # FLOPs
            Field(
                "flops",
                "integer",
                'FLOPs counted at these calls (docs/metrics.md, "FLOPs": at the outermost op with a rule, '
                "so the column sums to the span's FLOPs); 0 where none count here",
            ),
        ),
        shown=True,
        terminal=True,
        analysed=True,
        doc="Operators (aten:: and user-visible ops), one row per name: calls, host and device times.",
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
            Field("flops", "integer", "as in `operators`, over these calls"),  # FLOPs
        ),
        shown=True,
        analysed=True,
        doc="Operators, one row per name and input shapes (``record_shapes=True``); [] without shapes.",
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
            # FLOPs
            Field(
                "flops",
                "integer",
                "FLOPs of the operator calls of its forward and backward, its children's included "
                '(docs/metrics.md, "FLOPs"); 0 where none count in it',
            ),
        ),
        analysed=True,
    ),
    Table(
        "kernel_ops",
        "GPU kernels by launching operator",
        (
            Field("kernel", "string", "the kernel's name"),
            Field("operator", "string", "the host operator whose runtime call launched it (empty: none)"),
            Field("grid", "array|null", "grid size [x, y, z] (null: not recorded)"),
            Field("block", "array|null", "block size [x, y, z] (null: not recorded)"),
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
        analysed=True,
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
        analysed=True,
        doc="Memory copies and sets, one row per kind and device.",
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
        analysed=True,
        doc="Host-device synchronisations, one row per kind.",
    ),
    Table(
        "idle_time",
        "Stream idle time",
        (
            Field("device", "integer", "the GPU"),
            Field("stream", "integer", "the stream"),
            Field("activities", "integer", "kernels, copies and sets on the stream"),
            Field(
                "host_wait_us",
                _US,
                "gaps where the next launch call started after the previous activity ended",
            ),
            Field(
                "kernel_wait_us",
                _US,
                "other gaps under 30 us: launch overhead between back-to-back activities",
            ),
            Field("other_us", _US, "the remaining gaps (waits on events, collectives, other streams)"),
            Field("idle_us", _US, "all gaps between the stream's first and last activity"),
        ),
        shown=True,
        analysed=True,
        doc="Idle time between each stream's activities by cause, as HTA defines it (docs/metrics.md).",
    ),
    Table(
        "launch_stats",
        "Launch statistics",
        (
            Field("name", "string", "the kernel (copy, set) launched"),
            Field("launches", "integer", "launches through a launch call"),
            Field("cpu_mean_us", _US, "mean duration of the launch call on the host"),
            Field("gpu_mean_us", _US, "mean duration on the device"),
            Field("delay_total_us", _US, "summed launch delay (device start - call end, 0 if earlier)"),
            Field("delay_mean_us", _US, "mean launch delay"),
            Field("delay_p50_us", _US, "median launch delay"),
            Field("delay_p95_us", _US, "95th percentile of the launch delay"),
            Field("delay_max_us", _US, "longest launch delay"),
            Field(
                "short_kernels",
                "integer",
                "launches whose call took <= 50 us and longer than the device time",
            ),
            Field("runtime_outliers", "integer", "launch calls longer than 50 us"),
            Field("delay_outliers", "integer", "launch delays longer than 100 us"),
        ),
        shown=True,
        analysed=True,
        doc="Kernel launch statistics per kernel name, as HTA defines them (docs/metrics.md).",
    ),
    Table(
        "queue_length",
        "Launch queue length",
        (
            Field("device", "integer", "the GPU"),
            Field("stream", "integer", "the stream"),
            Field("samples", "integer", "points of the series: one per launch call, one per activity start"),
            Field("mean", "number", "activities launched and not yet started, mean over the points"),
            Field("max", "integer", "the most activities launched and not yet started"),
            Field("blocked_us", _US, "time with 1024 or more waiting: launch calls block"),
        ),
        shown=True,
        analysed=True,
        doc="Outstanding launches per stream, as HTA's queue length analysis defines them (docs/metrics.md).",
    ),
    Table(
        "copy_bandwidth",
        "Copy bandwidth",
        (
            Field("kind", "string", "Memcpy HtoD, Memcpy DtoH, Memcpy DtoD, ..., Memset (HTA's kinds)"),
            Field("copies", "integer", "copies (sets) of this kind"),
            Field("bytes", "integer", "bytes moved (written)"),
            Field("time_us", _US, "summed device time"),
            Field("gb_per_s", "number", "bytes / time"),
            Field("samples", "integer", "points where copies of this kind ran (each start and end)"),
            Field(
                "mean_gb_per_s",
                "number",
                "bandwidth of this kind's copies running at once, mean over the points",
            ),
            Field("min_gb_per_s", "number", "the same, least"),
            Field("p50_gb_per_s", "number", "the same, median"),
            Field("max_gb_per_s", "number", "the same, most"),
        ),
        shown=True,
        analysed=True,
        doc="Bandwidth of copies and sets per kind, as HTA's memory bandwidth analysis (docs/metrics.md).",
    ),
    Table(
        "op_launch_delay",
        "Operator launch delay",
        (
            Field("op", "string", "the aten operator"),
            Field("kernels", "string", "the kernels one call launched, in order, joined by ' -> '"),
            Field("calls", "integer", "calls of the operator that launched this sequence"),
            Field("op_delay_us", _US, "mean time from the operator's start to its first launch call's start"),
            Field("runtime_delay_us", _US, "mean time from that call's start to its kernel's start"),
        ),
        shown=True,
        analysed=True,
        doc="Each aten operator's kernel sequences and launch delays, as HTA defines them (docs/metrics.md).",
    ),
    Table(
        "kernel_sequences",
        "Kernel sequences",
        (
            Field("op", "string", "the operator"),
            Field("kernels", "string", "the kernels one call launched (itself and the ops inside), by start"),
            Field("count", "integer", "calls of the operator that launched this sequence (2 or more)"),
            Field("gpu_us", _US, "summed device time of those kernels"),
            Field("cpu_us", _US, "summed host time of those calls"),
        ),
        shown=True,
        analysed=True,
        doc="Recurring kernel sequences per operator, as HTA's frequent kernel sequences (docs/metrics.md).",
    ),
    Table(
        "cuda_graphs",
        "CUDA graphs",
        (
            Field("graph_id", "integer", "the graph's id (CUPTI's `graphId`)"),
            Field(
                "launches", "integer", "its launches (`cudaGraphLaunch` calls) whose kernels ran in the span"
            ),
            Field("kernels", "integer", "kernel executions replayed from it"),
            Field("kernels_per_launch", _NULLABLE_NUM, "`kernels` / `launches` (null: no launch recorded)"),
            Field("device_us", _US, "summed device time of those kernels"),
            Field(
                "launched_from",
                "string|null",
                "the innermost operator, user range (a compiled region) or module call around its launch "
                "calls, the one most launches share: where the graph is replayed, not where it was "
                "captured (null: no host event around its launch calls, or they were not recorded)",
            ),
        ),
        shown=True,
        terminal=True,
        analysed=True,
        omit_empty=True,
        doc="CUDA graphs replayed in the span: launches, kernels, device time per graph (absent when none).",
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
        analysed=True,
        doc="User ranges (record_function, NVTX), one row per name: calls, host time, closure.",
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
        analysed=True,
        doc="Memory per step: GPU allocated/reserved (device >= 0) and host RSS (device -1).",
    ),
    Table(
        "memory_ops",
        "Memory by operator",
        (
            Field("name", "string", "the operator's name"),
            Field("device", "integer", "the allocator's device: GPU index; -1 the host"),
            Field("calls", "integer", "the operator's calls in the trace"),
            Field(
                "size_increase_bytes",
                "integer",
                "bytes allocated less bytes freed inside the operator, operators inside it included",
            ),
            Field(
                "self_size_increase_bytes",
                "integer",
                "the same, for the allocations and frees the operator made itself",
            ),
            Field("alloc_count", "integer", "allocations inside the operator, operators inside it included"),
            Field("self_alloc_count", "integer", "allocations the operator made itself"),
            Field("alloc_bytes", "integer", "bytes allocated inside the operator (frees not counted)"),
            Field("self_alloc_bytes", "integer", "bytes the operator allocated itself"),
        ),
        shown=True,
        doc=(
            "Memory by operator, one row per operator name and device (the TensorBoard plugin's "
            "memory view: bytes allocated and freed, allocations, calls)."
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
        analysed=True,
        doc="The GPU summary, one row per device.",
    ),
    # FLOPs
    Table(
        "roofline",
        "Roofline",
        (
            Field("name", "string", "the operator (its FLOPs count at it)"),
            Field("input_shapes", "string", "its input shapes, as in the operator table"),
            Field("flop_class", "string", "`matmul` (products, convolutions, attention) or `other`"),
            Field("calls", "integer", "calls"),
            Field("flops", "integer", "FLOPs of those calls"),
            Field(
                "bytes",
                "integer|null",
                "bytes they read and write (inputs and outputs, from shapes and dtypes)",
            ),
            Field(
                "time_us",
                _US,
                "device time of its kernels (and those of the ops inside it); host time on a CPU",
            ),
            Field("on_device", "boolean", "`time_us` is device time"),
            Field("intensity_flop_per_byte", _NULLABLE_NUM, "arithmetic intensity: `flops` / `bytes`"),
            Field("achieved_tflops", "number", "`flops` / `time_us`, in TFLOP/s"),
            Field(
                "bound",
                "string|null",
                "`memory` (intensity below the ridge point) or `compute`; null where the peak or the "
                "bandwidth is unknown",
            ),
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
            Field(
                "energy_counter_j",
                _NULLABLE_NUM,
                "NVML's total-energy counter, J since the driver loaded (null: a device without "
                "it, older than Volta); samples taken at step boundaries carry only this",
            ),
        ),
        doc="NVML samples over the span.",
    ),
    # energy per step (docs/metrics.md, "Energy")
    Table(
        "energy",
        "Energy",
        (
            Field("device", "integer", "GPU index (every device NVML sampled)"),
            Field(
                "method",
                "string|null",
                "`counter` (NVML's total-energy counter), `power` (power samples integrated, "
                "trapezoid rule), `counter and power` (power where the counter's readings did not "
                "cover a step); null: no step measured",
            ),
            Field("steps", "integer", "steps measured (of the report's `steps`)"),
            Field("energy_j", _NULLABLE_NUM, "the whole device's energy over those steps"),
            Field("energy_per_step_j", _NULLABLE_NUM, "its mean per measured step"),
            Field("mean_power_w", _NULLABLE_NUM, "`energy_j` / the measured steps' summed duration"),
            Field("note", "string", "why steps were not measured, or measured from power; empty when none"),
        ),
    ),
)


def table(key: str) -> Table:
    """The declared table ``key`` (KeyError when none is)."""
    for t in TABLES:
        if t.key == key:
            return t
    raise KeyError(key)


# The memory view's objects: each device's (by its id as a string; -1 the host) peak, composition
# and growth, the rows inside them, and the out-of-memory section (docs/metrics.md, "Memory").
_OWNER = (
    "by operator: the outermost operator that allocated the memory (empty: none); by module: the "
    'module\'s `path` in `modules` (`""`: the model itself)'
)
OBJECTS: tuple[Table, ...] = (
    Table(
        "memory_peak",
        "a device's highest allocated level (`memory_peak`: {device: object})",
        (
            Field("t_us", _US, "when it was reached (first), on the trace clock"),
            Field("step", "integer|null", "the step whose host range holds it (null: none)"),
            Field("bytes", "integer", "the level: allocated bytes (`memory_curve`'s maximum)"),
            Field(
                "reserved_bytes",
                "integer|null",
                "reserved by the caching allocator then (null: not recorded)",
            ),
            Field(
                "top_ops",
                "array",
                "`memory_owner` rows: the allocations live then, by operator, largest first",
            ),
            Field(
                "top_modules",
                "array",
                "`memory_owner` rows: the same by the module the allocation ran in, a backward op in its "
                "forward's (the module view's attribution; `[]` without the module view)",
            ),
        ),
    ),
    Table(
        "memory_owner",
        "who made memory that is live (`top_ops`, `top_modules`)",
        (
            Field("name", "string", _OWNER),
            Field("bytes", "integer", "bytes live"),
            Field("count", "integer", "allocations live"),
        ),
    ),
    Table(
        "memory_composition",
        "what a device's memory held at its peak (`memory_composition`: {device: object}), in bytes",
        (
            Field("parameters", "integer", "the storages of the models' parameters"),
            Field("gradients", "integer", "the parameters' gradients"),
            Field("optimizer_state", "integer", "the optimizers' state (Adam's moments...)"),
            Field(
                "activations", "integer", "made by an operator outside the optimizer's step and outliving it"
            ),
            Field(
                "temporary", "integer", "freed before the operator (or optimizer step) that made it returned"
            ),
            Field(
                "unknown",
                "integer",
                "the rest of the level: made before the recording or outside any operator",
            ),
        ),
    ),
    Table(
        "memory_growth",
        "a device's allocated level at step ends (`memory_growth`: {device: object})",
        (
            Field(
                "mb_per_step",
                "number",
                "the least-squares slope of the level over the steps, in MB (10^6 bytes)",
            ),
            Field("bytes_per_step", "number", "the same in bytes"),
            Field(
                "flagged",
                "boolean",
                "the level grows: at least 4 step ends, 3 in 4 rising, 64 KiB a step or more",
            ),
            Field(
                "steps", "array", "the steps whose end levels were read (the first recorded step is left out)"
            ),
            Field("end_bytes", "array", "the level at each of those steps' ends"),
            Field("rising_steps", "integer", "step ends higher than the one before"),
            Field(
                "steps_counted",
                "integer",
                "steps whose allocations `ops` and `modules` follow (all but the last)",
            ),
            Field(
                "ops",
                "array",
                "`memory_growth_owner` rows: allocations a step made still live after the last step",
            ),
            Field("modules", "array", "`memory_growth_owner` rows: the same by module"),
        ),
    ),
    Table(
        "memory_growth_owner",
        "who made memory that outlived its step (`ops`, `modules`)",
        (
            Field("name", "string", _OWNER),
            Field("bytes_per_step", "number", "bytes left live, per step counted"),
            Field("count", "integer", "allocations left live"),
        ),
    ),
    Table(
        "out_of_memory",
        "an out-of-memory error that ended a live span (`out_of_memory`: object)",
        (
            Field("error", "string", "the exception's class (`OutOfMemoryError`, `RuntimeError`)"),
            Field("message", "string", "its message, as torch wrote it"),
            Field("device", "integer", "the device shown: the one the error names (GPU index; -1 the host)"),
            Field("requested_bytes", "integer|null", "the allocation that failed"),
            Field("capacity_bytes", "integer|null", "the device's memory"),
            Field("free_bytes", "integer|null", "free on the device at the failure"),
            Field("allocated_bytes", "integer|null", "allocated by torch at the failure"),
            Field(
                "reserved_unallocated_bytes", "integer|null", "held by the caching allocator but unallocated"
            ),
            Field("composition_source", "string", "what the composition was read from"),
            Field(
                "top_ops", "array", "`memory_owner` rows: the live allocations at the failure, by operator"
            ),
            Field("top_modules", "array", "`memory_owner` rows: the same by module"),
            Field("composition", "object|null", "a `memory_composition` object at the failure"),
            Field("batch_size", "integer|null", "samples per step"),
            Field("per_sample_bytes", "integer|null", "activations and temporaries per sample"),
            Field("fixed_bytes", "integer|null", "what does not grow with the batch"),
            Field("budget_bytes", "integer|null", "what the allocator could have had"),
            Field(
                "largest_batch_that_fits",
                "integer|null",
                "(budget - fixed) / per sample, rounded down",
            ),
            Field("per_sample_source", "string", "what the per-sample figure was measured from"),
            Field("notes", "array", "what the section could not read, in sentences"),
        ),
    ),
)
OBJECT_BY_KEY: dict[str, Table] = {t.key: t for t in OBJECTS}


def shown_tables() -> list[tuple[str, str]]:
    """(key, title) of the tables the reports show as rows, in their order."""
    return [(t.key, t.title) for t in TABLES if t.shown]


def terminal_tables() -> list[tuple[str, str]]:
    """(key, title) of the tables the terminal report shows as rows, in their order."""
    return [(t.key, t.title) for t in TABLES if t.shown and t.terminal]


def percent_fields() -> dict[str, tuple[str, ...]]:
    """Each table's fields that are a share of something (``_pct``), so within 0-100 by definition."""
    out = {}
    for t in TABLES:
        keys = tuple(f.key for f in t.fields if f.key.endswith("_pct"))
        if keys:
            out[t.key] = keys
    return out


def labelled(key: str) -> list[tuple[str, str]]:
    """(key, label) of a table's fields that carry a label (the GPU summary's rows)."""
    return [(f.key, f.label) for f in table(key).fields if f.label]


def schema_markdown() -> str:
    """docs/schema.md's "Table rows" section: one table of fields per result table, then the
    memory view's objects."""
    out = []
    for t in TABLES:
        out += [f"### `{t.key}[]`: {t.title}", "", "| key | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{f.key}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in t.fields]
        out.append("")
    for t in OBJECTS:
        out += [f"### `{t.key}`: {t.title}", "", "| key | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{f.key}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in t.fields]
        out.append("")
    return "\n".join(out)


# ---- the input pipeline: a live span's `input_pipeline` object (made in Python: analysis/input_pipeline.py)
# Its keys, the per-batch statistics each stage's object holds, and the rows of its lists: the JSON
# Schema, docs/schema.md's "input_pipeline" block and the renderers read them from here.
_STATS = "object|null"
STAGE_STATS: tuple = (
    Field("mean", "number", "mean over the batches (us)"),
    Field("std", "number", "standard deviation (us)"),
    Field("p50", "number", "median (us)"),
    Field("p95", "number", "95th percentile (us)"),
    Field("max", "number", "longest (us)"),
    Field("count", "integer", "batches (or steps) measured"),
)
INPUT_PIPELINE: tuple = (
    Field("dataset", "string|null", "the dataset's class (the loader the steps drew most batches from)"),
    Field("num_workers", "integer", "its num_workers"),
    Field("workers", "array", "one row per process that made batches (below; -1: the training process)"),
    Field("batches", "integer", "batches made during the recorded steps"),
    Field("steps", "integer", "recorded steps"),
    Field("batches_consumed", "integer", "batches the steps took"),
    Field("stage", "string|null", "the longest stage of a batch: `fetch`, `transform` or `collate`"),
    Field("process", "string|null", "where batches were made: `workers`, or `main` (num_workers=0)"),
    Field(
        "fetch_us",
        _STATS,
        "per batch: `__getitem__`/`__getitems__` (an IterableDataset's `next()`), less "
        "`transform_us` when that is timed apart",
    ),
    Field(
        "transform_us",
        _STATS,
        "per batch: the dataset's `transform`/`transforms`/`target_transform` calls "
        "(null: the dataset has none)",
    ),
    Field("collate_us", _STATS, "per batch: the `collate_fn`"),
    Field("batch_us", _STATS, "per batch: fetch + transform + collate + gc, T_batch"),
    Field("idle_us", _STATS, "per batch: a worker's time since its previous batch (waiting for an index)"),
    Field(
        "cpu_wait_us",
        _STATS,
        "per batch: the part of `batch_us` the loading process was ready to run but waited for a CPU",
    ),
    Field(
        "gc_us",
        _STATS,
        "per batch: Python's garbage-collector pauses on the loading thread, taken out of "
        "`fetch_us`, `transform_us` and `collate_us`",
    ),
    Field("pin_us", _STATS, "per batch: `pin_memory` (the pin-memory thread; null: not pinned)"),
    Field("transfer_us", _STATS, "per batch: host time of the copy operators right after the batch arrived"),
    Field("transfer_device_us", _STATS, "per batch: device time of the host-to-device copies they launched"),
    Field("transfer_overlap_pct", "number|null", "share of that device time a kernel ran beside"),
    Field("wait_us", _STATS, "per batch: the loop's wait in the DataLoader's `__next__`"),
    Field("wait_pct", "number|null", "the waits over the steps' time (%)"),
    Field(
        "worker_busy_pct",
        "number|null",
        "mean over the loading processes of their busy share of the steps (%)",
    ),
    Field("queue_empty_pct", "number|null", "steps that found no batch ready (null: num_workers=0)"),
    Field("queue_depth_mean", "number|null", "batches ready when the loop asked, on average"),
    Field("sample_us", "object|null", "per sample: `mean`, `std`, `max` (us) and `count`"),
    Field("slowest_share_pct", "number|null", "the slowest 1% of samples' share of all the samples' time"),
    Field("slowest_samples", "array", "the slowest samples, when a few dominate (below); else empty"),
    Field(
        "recommended_num_workers", "integer|null", "Little's law's worker count, bounded by the CPUs (`law`)"
    ),
    Field("recommended_prefetch_factor", "integer|null", "from the spread of `batch_us`"),
    Field("bound", "string|null", "the first of `limits`"),
    Field("limits", "array", "what limits the loader: `pin`, `copy`, `cpu`, `samples`, `workers`"),
    Field("law", "object", "the arithmetic behind the recommendation (below)"),
    Field("errors", "array", "exceptions raised while loading (below)"),
    Field("notes", "array", "what could not be measured, workers that died"),
)
INPUT_PIPELINE_OBJECTS: dict = {
    "law": (
        Field("t_batch_us", "number|null", "mean `batch_us`: one worker makes a batch every T_batch"),
        Field(
            "t_step_us",
            "number|null",
            "the steps' time less their waits, per batch: one is used every T_step",
        ),
        Field("workers_needed", "integer|null", "ceil(T_batch / T_step)"),
        Field(
            "worker_cpu_share", "number|null", "CPU time over wall time of the batches: a worker's CPU need"
        ),
        Field("cpu_budget", "number|null", "CPUs this process may use"),
        Field(
            "cpu_budget_source", "string|null", "`affinity mask`, `SLURM_CPUS_PER_TASK` or `cgroup cpu.max`"
        ),
        Field(
            "training_cpus", "number|null", "CPUs the training process kept busy, its own loading excluded"
        ),
        Field(
            "other_cpus",
            "number|null",
            "CPUs of the budget's that other processes (and the hypervisor's steal) kept busy over the "
            "span, from /proc/stat (null: not readable)",
        ),
        Field(
            "other_cpus_subtracted",
            "number|null",
            "`other_cpus` where `cpu_limit` takes them out: workers that load on a CPU (share >= 0.5); "
            "null: not taken out (not measured, none, or workers that mostly wait)",
        ),
        Field(
            "cpu_limit",
            "integer|null",
            "floor((budget - training - other_cpus_subtracted) / max(share, 0.1)); at least 1, except 0 "
            "where num_workers=0 and other processes left no CPU for a first worker",
        ),
    ),
}
INPUT_PIPELINE_ROWS: dict = {
    "workers": (
        Field("worker", "integer", "worker id; -1: the training process (num_workers=0)"),
        Field("pid", "integer", "process id"),
        Field("process", "string", "`worker` or `main`"),
        Field("batches", "integer", "batches it made during the steps"),
        Field("busy_us", "number", "its time on them inside the steps"),
        Field("busy_pct", "number", "that over the steps' time"),
        Field("status", "string", "`running`, `exited`, or `died` (ended without saying goodbye)"),
        Field("exitcode", "integer|null", "a dead worker's exit code (negative: the signal)"),
    ),
    "slowest_samples": (
        Field("index", "integer|null", "dataset index (an IterableDataset: position in its worker's stream)"),
        Field("us", "number", "its time in `__getitem__`, transforms included"),
        Field("worker", "integer", "the worker that loaded it"),
    ),
    "errors": (
        Field("worker", "integer", "worker id (-1: the training process)"),
        Field("pid", "integer", "process id"),
        Field("batch", "integer", "the batch's number in that worker"),
        Field("index", "integer|null", "the sample being loaded, when known"),
        Field("stage", "string", "`fetch` or `collate`"),
        Field("error", "string", "exception type and message (cut at 300 characters)"),
    ),
}


def input_pipeline_markdown() -> str:
    """docs/schema.md's "input_pipeline" block."""
    out = ["### `input_pipeline`", "", "| key | type | meaning |", "| --- | --- | --- |"]
    out += [f"| `{f.key}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in INPUT_PIPELINE]
    out += [
        "",
        "Each `*_us` object above that is not null:",
        "",
        "| key | type | meaning |",
        "| --- | --- | --- |",
    ]
    out += [f"| `{f.key}` | {f.type} | {f.meaning} |" for f in STAGE_STATS]
    for key, fields in {**INPUT_PIPELINE_OBJECTS, **INPUT_PIPELINE_ROWS}.items():
        head = f"`input_pipeline.{key}`" if key in INPUT_PIPELINE_OBJECTS else f"`input_pipeline.{key}[]`"
        out += ["", f"#### {head}", "", "| key | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{f.key}` | {f.type.replace('|', ' or ')} | {f.meaning} |" for f in fields]
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(input_pipeline_markdown() if sys.argv[1:] == ["input_pipeline"] else schema_markdown(), end="")
