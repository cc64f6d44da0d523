"""Per kernel Inductor generated: the module it came from, the user's line and its FLOPs per call,
read from the post-grad graph's nodes (their ``val``, ``nn_module_stack`` and ``stack_trace``
metadata) when a graph is compiled, never per step (docs/metrics.md, ``compiled_kernels``).

A kernel's FLOPs are its fused aten operators' counted with gpuprof's own rules
(``_core.op_flops``: the C++ rules of cpp/src/analysis/flops.cpp, FlopCounterMode's for the matrix
class) from the nodes' shapes. Two cases need care, so that each FLOP counts once:

* Inductor's provenance lists, beside a generated kernel's own nodes, nodes that an aten call
  computes (a ``convolution_backward`` Inductor leaves to aten appears in the fused kernel that
  feeds it): a node listed under an extern or fallback call of its own operator
  (``extern_kernels.mm``, ``torch.ops.aten.convolution_backward.default``) is that call's, which the
  profiler records as an aten operator and counts there; a node listed under two generated kernels
  counts in the first.
* Inductor decomposes a small matrix product into elementwise code (``addmm`` of one row times a
  16 x 16 matrix becomes a multiply and a sum): its nodes keep the product as ``original_aten``.
  Their element-wise product (a multiply of two tensors) does all the product's multiply-adds, so
  it counts 2 FLOPs per output element, in the matrix class; the decomposition's other nodes count
  nothing (the product's FLOPs are these).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Callable, Optional

# Matrix products Inductor decomposes into elementwise code (torch/_inductor/decomposition.py).
DECOMPOSED_PRODUCTS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
_ATTR = re.compile(r"\._modules\['([^']*)'\]|\['([^']*)'\]|\[(\d+)\]")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
# torch's dtype names -> the FLOP rules' dtype keys (flop_dtype_key in cpp/src/analysis/flops.cpp).
_DTYPES = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16", "int8": "int8"}
_DTYPES.update({f"float8_{k}": "fp8" for k in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz")})


def is_generated(kernel: str) -> bool:
    """A kernel Inductor generated (``cpp_fused_relu_0``, ``triton_poi_fused_add_0``), not an extern
    or fallback aten call (``extern_kernels.mm``, ``torch.ops.aten.kthvalue.default``)."""
    return "." not in kernel


def module_path(stack_entry: Any) -> list[str]:
    """An ``nn_module_stack`` value's module path as the components of ``named_modules()`` names,
    relative to the compiled function's first argument (``L['self'].layer1[0].conv1`` ->
    ``['layer1', '0', 'conv1']``)."""
    text = stack_entry[0] if isinstance(stack_entry, (tuple, list)) else str(stack_entry)
    text = _ATTR.sub(lambda m: "." + (m.group(1) or m.group(2) or m.group(3) or ""), str(text))
    parts = [p for p in text.split(".") if p]
    # Dynamo names the compiled frame's locals L['self'], L['model'] (now "L.self"): drop that root.
    if parts and parts[0] in ("L", "G"):
        parts = parts[2:]
    elif parts and parts[0] == "self":
        parts = parts[1:]
    return parts


def node_module(node: Any) -> Optional[list[str]]:
    """The innermost module a node's operator ran in (``nn_module_stack``; a backward node's
    ``fwd_nn_module_stack``, the forward's it differentiates); [] at the compiled root, None when the
    node carries neither (a graph input, a copy Inductor adds)."""
    meta = getattr(node, "meta", {}) or {}
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
    if stack:
        return module_path(list(stack.values())[-1])
    return [] if meta.get("stack_trace") else None


def common_module(paths: Iterable[Optional[list[str]]]) -> Optional[str]:
    """The innermost module that contains every path ("" for the compiled root; None without any)."""
    known = [p for p in paths if p is not None]
    if not known:
        return None
    common = list(known[0])
    for p in known[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return ".".join(common)


def node_source(node: Any) -> Optional[str]:
    """The user's file:line of a node: the innermost frame of its ``stack_trace``."""
    frames = _FRAME.findall(str((getattr(node, "meta", {}) or {}).get("stack_trace") or ""))
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def _op_name(target: Any) -> Optional[str]:
    """``aten.mm.default`` -> ``mm``; None for what is not an aten operator."""
    packet = getattr(target, "overloadpacket", None)
    if packet is None or getattr(target, "namespace", None) != "aten":
        return None
    return str(getattr(packet, "__name__", "")).split(".")[-1] or None


def _val(x: Any) -> Any:
    return getattr(x, "meta", {}).get("val") if hasattr(x, "meta") else None


def _is_tensor(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype")


def _shape(v: Any) -> list[int]:
    # A symbolic size (SymInt) is not read: int() on it would add a guard to the graph being
    # compiled. ValueError: no count.
    if not all(isinstance(d, int) for d in v.shape):
        raise ValueError("symbolic shape")
    return list(v.shape)


def _concrete(x: Any) -> str:
    if x is None or hasattr(x, "meta"):
        return ""
    if isinstance(x, bool):
        return "True" if x else "False"
    if isinstance(x, (list, tuple)):
        if any(hasattr(i, "meta") for i in x):
            return ""
        return "[" + ", ".join(_concrete(i) for i in x) + "]"
    if isinstance(x, (int, float)):
        return str(x)
    return ""


def _type(v: Any) -> str:
    return str(v.dtype).replace("torch.", "") if _is_tensor(v) else ""


def node_inputs(node: Any) -> tuple[str, str, str]:
    """A node's inputs as Kineto writes them (``Input Dims``, ``Input type``, ``Concrete Inputs``),
    in its operator schema's order, for ``_core.op_flops``."""
    schema = getattr(node.target, "_schema", None)
    args = list(node.args)
    if schema is not None:
        for i, a in enumerate(schema.arguments):
            if i >= len(args):
                args.append(node.kwargs.get(a.name, a.default_value if a.has_default_value() else None))
    shapes, types, concrete = [], [], []
    for a in args:
        if isinstance(a, (list, tuple)) and a and all(hasattr(i, "meta") for i in a):
            vals = [_val(i) for i in a]
            shapes.append(str([_shape(v) for v in vals if _is_tensor(v)]))
            types.append("TensorList")
            concrete.append("")
            continue
        v = _val(a)
        shapes.append(str(_shape(v)) if _is_tensor(v) else "[]")
        types.append(_type(v) if _is_tensor(v) else ("Scalar" if isinstance(a, (int, float)) else ""))
        concrete.append(_concrete(a))
    quote = lambda xs: "[" + ", ".join(repr(x) for x in xs) + "]"  # noqa: E731
    return "[" + ", ".join(shapes) + "]", quote(types), quote(concrete)


def node_flops(node: Any, op_flops: Callable[..., dict]) -> tuple[str, int, str]:
    """(class, FLOPs, dtype) of one post-grad node: ("", 0, "") where no rule counts it, FLOPs -1
    where a rule does but the sizes are symbolic (a graph compiled for dynamic shapes: its calls
    differ in size, so no count per call holds)."""
    name = _op_name(getattr(node, "target", None))
    if name is None:
        return "", 0, ""
    original = _op_name((getattr(node, "meta", {}) or {}).get("original_aten"))
    out = _val(node)
    if original in DECOMPOSED_PRODUCTS and original != name:
        both = len(node.args) >= 2 and all(_is_tensor(_val(a)) for a in node.args[:2])
        if name == "mul" and both and _is_tensor(out):
            try:
                count = 1
                for d in _shape(out):
                    count *= d
            except ValueError:
                return "matmul", -1, ""
            return "matmul", 2 * count, _DTYPES.get(_type(out), "other")
        return "", 0, ""
    try:
        shapes, types, concrete = node_inputs(node)
    except ValueError:
        cls = op_flops(f"aten::{name}", "", "", "").get("flop_class") or ""
        return str(cls), (-1 if cls else 0), ""
    f = op_flops(f"aten::{name}", shapes, types, concrete)
    if not f.get("flop_class") or f.get("flops") is None:
        return "", 0, ""
    dtype = f.get("dtype") or ""
    return str(f["flop_class"]), int(f["flops"]), "" if dtype == "unknown" else dtype


def _nbytes(v: Any) -> Optional[int]:
    if not _is_tensor(v):
        return 0
    try:
        count = 1
        for d in _shape(v):
            count *= d
    except ValueError:
        return None
    size = getattr(v, "itemsize", None)
    return count * int(size) if isinstance(size, int) else None


def kernel_bytes(own: list) -> Optional[int]:
    """The bytes one call of a fused kernel moves, for the roofline: the tensors it reads from outside
    itself (each once) and those it leaves for others (used outside it, or by nothing: a graph
    output or an in-place write), at their dtypes; None where a size is symbolic."""
    names = {n.name for n in own}
    read: set = set()
    total = 0
    for n in own:
        for a in getattr(n, "all_input_nodes", []):
            if a.name in names or a.name in read:
                continue
            read.add(a.name)
            b = _nbytes(_val(a))
            if b is None:
                return None
            total += b
        users = getattr(n, "users", {})
        if not users or any(u.name not in names for u in users):
            b = _nbytes(_val(n))
            if b is None:
                return None
            total += b
    return total


def graph_kernel_facts(
    nodes: dict,
    kernel_nodes: dict,
    *,
    graph_id: Optional[int],
    backward: bool,
    op_flops: Callable[..., dict],
) -> list[dict]:
    """One row per kernel Inductor generated in one graph: ``kernel`` (provenance's key without its
    handle), ``event`` (the name its C++ kernel's profiling event has, ``graph_N_`` prefixed, or a
    Triton kernel's own name), ``module``, ``source``, ``flops``/``matmul_flops``/``other_flops``
    per call (null where a node's sizes are symbolic), ``matmul_dtype``, ``backward`` and
    ``bytes`` (``kernel_bytes``).
    ``nodes``: the post-grad graph's name -> fx node; ``kernel_nodes``: Inductor's "kernel:handle"
    -> node names."""
    aten_run: set = set()
    for key, names in kernel_nodes.items():
        kernel = str(key).split(":", 1)[0]
        if is_generated(kernel):
            continue
        called = kernel.replace("torch.ops.", "").replace("extern_kernels.", "aten.").split(".")
        op = called[1] if len(called) > 1 else None
        for n in names:
            if n in nodes and _op_name(nodes[n].target) == op:
                aten_run.add(n)
    counted: set = set()
    rows = []
    for key, names in kernel_nodes.items():
        kernel = str(key).split(":", 1)[0]
        if not is_generated(kernel):
            continue
        own = [nodes[n] for n in names if n in nodes and n not in aten_run]
        row = {
            "kernel": kernel,
            # Only the C++ backend's profiled kernels carry the graph's prefix (Triton's are named
            # as they are defined).
            "event": f"graph_{graph_id}_{kernel}"
            if graph_id is not None and kernel.startswith("cpp")
            else kernel,
            "module": common_module(node_module(n) for n in own),
            "source": next((s for s in (node_source(n) for n in own) if s), None),
            "flops": 0,
            "matmul_flops": 0,
            "other_flops": 0,
            "matmul_dtype": None,
            "backward": bool(backward),
            "bytes": kernel_bytes(own),
        }
        for n in own:
            if n.name in counted:
                continue
            counted.add(n.name)
            cls, flops, dtype = node_flops(n, op_flops)
            if not cls:
                continue
            if flops < 0:  # unknown: symbolic sizes
                row["flops"] = row[f"{cls}_flops"] = None
                continue
            for key in ("flops", f"{cls}_flops"):
                if row[key] is not None:
                    row[key] += flops
            if cls == "matmul" and dtype and row["matmul_dtype"] is None:
                row["matmul_dtype"] = dtype
        rows.append(row)
    return rows
