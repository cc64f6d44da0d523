"""Which aten operators and source lines each kernel torch.compile's Inductor generated came from,
read from Inductor's own provenance when it compiles (docs/profiling.md, "Compiled models").

Opt-in (``gpuprof.profile(compiled_kernels=True)``, ``gpuprof run --compiled-kernels``): from the
session's start to its end (a Dynamo compile usually happens at the first call, often before the
first recorded step), ``InductorKernels.start`` sets four settings and ``stop`` restores the values
it found:

* ``cpp.enable_kernel_profile``: the C++ backend's fused kernels become operator events
  (``graph_0_cpp_fused_...``), so a CPU span times them (off, their time is the graph's own);
* ``trace.provenance_tracking_level = 1``: Inductor notes, while it generates code, which post-grad
  nodes went into each kernel, and their stack traces;
* ``fx_graph_cache = False`` and torch._functorch's ``enable_autograd_cache = False``: a graph
  taken from these caches is not generated again, and so would carry no provenance.

and listens to Inductor's structured trace (the ``torch.__trace`` logger that ``TORCH_TRACE`` and
tlparse read) for each compile's post-grad graph and kernel stack traces. The kernel-to-nodes table
is read at the moment the compile emits its stack traces (Inductor resets it per compile), and with
it the graph being compiled, for each kernel's module, line and FLOPs (``inductor_graph.py``). All of
this runs when a graph is compiled, never per step. Graphs compiled before the session keep the
settings they had, and so have no provenance: those kernels' rows have ``ops: null``.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
from typing import Optional

from .inductor_graph import graph_kernel_facts

log = logging.getLogger("gpuprof")

_SETTINGS = (
    ("torch._inductor.config", "cpp.enable_kernel_profile", True),
    ("torch._inductor.config", "trace.provenance_tracking_level", 1),
    ("torch._inductor.config", "fx_graph_cache", False),
    ("torch._functorch.config", "enable_autograd_cache", False),
)
# A post-grad graph's lines: "# File: path:line in fn, code: ..." before the nodes it made, and
# 'name: "f32[8, 16]..." = torch.ops.aten.mul.Tensor(...)'.
_FILE = re.compile(r"^\s*# File: (.+?):(\d+) in ")
_NODE = re.compile(r"^\s*(\w+)(?:: \"[^\"]*\")? = torch\.ops\.(\w+)\.(\w+)(?:\.\w+)?\(")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def kernel_key(name: str) -> str:
    """A kernel's name without Inductor's per-graph prefix and provenance handle
    ("graph_0_cpp_fused_sum_1" and "cpp_fused_sum_1:3" are both "cpp_fused_sum_1")."""
    name = re.sub(r"^graph_\d+_", "", name)
    return name.split(":", 1)[0]


def parse_post_grad_graph(text: str) -> dict:
    """Node name -> (aten operator, "file:line" of the user's code or None), in graph order."""
    nodes: dict = {}
    where: Optional[str] = None
    for line in text.splitlines():
        m = _FILE.match(line)
        if m:
            where = f"{m.group(1)}:{m.group(2)}"
            continue
        m = _NODE.match(line)
        if m:
            nodes[m.group(1)] = (f"{m.group(2)}.{m.group(3)}", where)
    return nodes


def kernel_rows(nodes: dict, kernel_nodes: dict, stack_traces: dict) -> list:
    """One row per generated kernel: its aten operators in graph order and the user's lines.
    ``kernel_nodes`` is Inductor's "kernel:handle" -> post-grad node names, ``stack_traces`` its
    "kernel:handle" -> stack trace texts."""
    order = {name: i for i, name in enumerate(nodes)}
    rows = []
    for handle, names in kernel_nodes.items():
        known = sorted((n for n in names if n in nodes), key=order.__getitem__)
        ops: list = []
        for n in known:
            if nodes[n][0] not in ops:
                ops.append(nodes[n][0])
        sources: list = []
        for text in stack_traces.get(handle) or []:
            frames = _FRAME.findall(str(text))
            if frames:
                where = f"{frames[-1][0]}:{frames[-1][1]}"
                if where not in sources:
                    sources.append(where)
        for n in known:
            if nodes[n][1] and nodes[n][1] not in sources:
                sources.append(nodes[n][1])
        rows.append({"kernel": kernel_key(handle), "ops": ops, "sources": sources})
    return rows


def _graph_facts(kernel_nodes: dict) -> list:
    """``graph_kernel_facts`` of the graph Inductor is compiling (its ``V.graph``, whose module is the
    post-grad graph the provenance names), at the moment it emits the provenance."""
    virtualized = sys.modules.get("torch._inductor.virtualized")
    graph = getattr(virtualized, "V", None)
    graph = getattr(graph, "graph", None) if graph is not None else None
    module = getattr(graph, "module", None)
    if module is None or not hasattr(module, "graph"):
        return []
    from .._native import _core

    return graph_kernel_facts(
        {n.name: n for n in module.graph.nodes},
        kernel_nodes,
        graph_id=getattr(graph, "graph_id", None),
        backward=bool(getattr(graph, "is_backward", False)),
        op_flops=_core.op_flops,
    )


class _Listener(logging.Handler):
    def __init__(self, owner: InductorKernels) -> None:
        super().__init__(level=logging.DEBUG)
        self.owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        try:  # compiling is the user's; a failure here only loses provenance
            self.owner._seen(getattr(record, "metadata", None), getattr(record, "payload", None))
        except Exception as e:
            self.owner.errors += 1
            log.debug("gpuprof: cannot read Inductor's provenance: %s", e)


class InductorKernels:
    """The opt-in provenance of one session: ``start`` at its start, ``rows`` at each span's end,
    ``stop`` at its end."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self._saved: list = []
        self._listener: Optional[_Listener] = None
        self._logger_level: Optional[int] = None
        self._nodes: dict = {}
        self._rows: list = []
        self.errors = 0
        self.note = ""  # why the provenance could not be had ("" when it could)

    def start(self) -> None:
        self._rows, self._nodes, self.errors, self.note = [], {}, 0, ""
        if not self.enabled or self._listener is not None:
            return
        for module, path, value in _SETTINGS:
            try:  # opt-in: the user asked for Inductor's provenance
                target = importlib.import_module(module)
                *groups, name = path.split(".")
                for group in groups:
                    target = getattr(target, group)
            except Exception as e:
                self.note = f"{module} cannot be imported here ({e}): no compiled-kernel provenance"
                continue
            if not hasattr(target, name):
                continue  # an older torch without this setting
            self._saved.append((target, name, getattr(target, name)))
            setattr(target, name, value)
        if self.note:
            log.warning("gpuprof: %s", self.note)
        trace_log = logging.getLogger("torch.__trace")
        self._listener = _Listener(self)
        self._logger_level = trace_log.level
        trace_log.setLevel(logging.DEBUG)
        trace_log.addHandler(self._listener)

    def rows(self) -> Optional[list]:
        """The kernels compiled so far in the session, with their provenance (None when not
        enabled)."""
        return list(self._rows) if self.enabled else None

    def stop(self) -> None:
        """Restore the settings ``start`` changed."""
        if self._listener is not None:
            trace_log = logging.getLogger("torch.__trace")
            trace_log.removeHandler(self._listener)
            if self._logger_level is not None:
                trace_log.setLevel(self._logger_level)
            self._listener = None
        for target, name, value in reversed(self._saved):
            setattr(target, name, value)
        self._saved = []

    def _seen(self, metadata, payload) -> None:
        if not isinstance(metadata, dict) or "artifact" not in metadata:
            return
        name = (metadata.get("artifact") or {}).get("name")
        if name == "inductor_post_grad_graph" and isinstance(payload, str):
            self._nodes = parse_post_grad_graph(payload)
        elif name == "inductor_provenance_tracking_kernel_stack_traces":
            debug = sys.modules.get("torch._inductor.debug")
            kernel_nodes = dict(getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", {}) or {})
            traces = json.loads(payload) if isinstance(payload, str) else {}
            rows = kernel_rows(self._nodes, kernel_nodes, traces)
            self._nodes = {}
            try:  # the module, line and FLOPs of each kernel, from the graph being compiled now
                facts = _graph_facts(kernel_nodes)
            except Exception as e:
                facts = []
                self.errors += 1
                log.debug("gpuprof: cannot read the FLOPs of Inductor's kernels: %s", e)
            by_kernel = {f["kernel"]: f for f in facts}
            for row in rows:
                row.update(by_kernel.get(row["kernel"], {}))
            self._rows.extend(rows)


# Inductor's output code writes, above each Triton kernel it defines, the operators it came from:
#   # Topologically Sorted Source Nodes: [relu, sin], Original ATen: [aten.relu, aten.sin]
#   ...
#   triton_poi_fused_relu_sin_0 = async_compile.triton('triton_poi_fused_relu_sin_0', '''
# (its C++ kernels get no such comment).
_ORIGIN = re.compile(r"^# Topologically Sorted Source Nodes: \[.*\], Original ATen: \[(.*)\]\s*$")
_DEFINED = re.compile(r"^(\w+) = async_compile\.\w+\(")
# At most this many output-code files, and this many bytes of them, are read at a span's end.
OUTPUT_CODE_FILES = 2000
OUTPUT_CODE_BYTES = 64 << 20


def output_code_rows(text: str) -> list:
    """One row per kernel defined in one Inductor output-code file that names its aten operators."""
    rows = []
    ops: Optional[list] = None
    for line in text.splitlines():
        m = _ORIGIN.match(line)
        if m:
            ops = [o.strip() for o in m.group(1).split(",") if o.strip()]
            continue
        m = _DEFINED.match(line)
        if m:
            if ops:
                rows.append({"kernel": m.group(1), "ops": ops, "sources": None})
            ops = None
    return rows


def generated_code_rows() -> list:
    """The kernels the output code Inductor loaded in this process names the operators of (a GPU's
    Triton kernels), read from its files at a span's end without changing any setting; [] when
    nothing was compiled. Bounded by OUTPUT_CODE_FILES and OUTPUT_CODE_BYTES."""
    codecache = sys.modules.get("torch._inductor.codecache")
    modules = getattr(getattr(codecache, "PyCodeCache", None), "modules", None)
    if not modules:
        return []
    rows: list = []
    read = 0
    try:
        for module in list(modules)[-OUTPUT_CODE_FILES:]:
            path = getattr(module, "__file__", None)
            if not path or read > OUTPUT_CODE_BYTES:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(OUTPUT_CODE_BYTES)
            read += len(text)
            if "Original ATen" in text:
                rows.extend(output_code_rows(text))
    except Exception as e:  # the training run comes first
        log.debug("gpuprof: cannot read Inductor's output code: %s", e)
    return rows
