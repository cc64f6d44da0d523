"""The aten operators of the Triton kernels a trace's compiled model launched, read from Inductor's
output code when it is still on this machine (docs/metrics.md, ``compiled_kernels``).

torch.profiler records each launch of a Triton kernel Inductor generated as a cpu_op whose
``kernel_file`` arg is the kernel's own module in Inductor's cache (``<cache>/ab/cab....py``, named
after its hash, ``kernel_hash``; the importer keeps them once per kernel:
``Trace.compiled_launches``). That module holds the kernel's code only; the operators it fuses are
written in the graph's output code, another module of the same cache, above the kernel's
definition::

    # kernel path: <cache>/ab/cab....py
    # Topologically Sorted Source Nodes: [x, y], Original ATen: [aten.add, aten.cos]
    # Source node to ATen node mapping:
    ...
    triton_poi_fused_add_cos_0 = async_compile.triton('triton_poi_fused_add_cos_0', '''

(torch/_inductor/codegen/triton.py, ``define_kernel``; the live session reads the same comments
from the output code its process loaded). Only the cache a launch names is read, only where the
named file lies where Inductor puts it (``<cache>/<hash[1:3]>/<hash>.py``), and at most
OUTPUT_CODE_FILES files and OUTPUT_CODE_BYTES bytes of it, those written nearest the kernels' own
time first.
Inductor's C++ kernels record no such args, and their output code no such comment: a trace names
none of their operators.
"""

from __future__ import annotations

import os
import re
from typing import Optional

OUTPUT_CODE_FILES = 2000
OUTPUT_CODE_BYTES = 64 << 20
# A graph's output code and its kernels' modules are written within moments of each other (the
# kernels' when the output code is loaded, or earlier by a parallel compile; a kernel taken from the
# cache keeps an older time): only modules written within this of the kernels' are read.
_WINDOW_S = 3600.0

_PATH = r"^# kernel path: (.+?)\s*$"
_ORIGIN = r"^# (?:Topologically Sorted|Unsorted) Source Nodes: \[.*\], Original ATen: \[(.*)\]\s*$"
_DEFINED = r"^(\w+) = async_compile\.\w+\("


def _kernel_file(launch: dict) -> Optional[str]:
    """The launch's kernel file where it is where Inductor's cache puts a kernel named by its hash."""
    path, digest = str(launch.get("kernel_file") or ""), str(launch.get("kernel_hash") or "")
    if len(digest) < 3 or os.path.basename(path) != f"{digest}.py":
        return None
    if os.path.basename(os.path.dirname(path)) != digest[1:3] or not os.path.isfile(path):
        return None
    return path


def kernels_in_output_code(text: str, wanted: set) -> list:
    """One row per kernel defined in one output-code file whose kernel path is in ``wanted``:
    ``kernel`` (its name), ``kernel_file``, ``ops`` (the aten operators of its comment)."""
    rows = []
    path: Optional[str] = None
    ops: Optional[list] = None
    for line in text.splitlines():
        m = re.match(_PATH, line)
        if m:
            path, ops = m.group(1), None
            continue
        m = re.match(_ORIGIN, line)
        if m:
            ops = [o.strip() for o in m.group(1).split(",") if o.strip()]
            continue
        m = re.match(_DEFINED, line)
        if m:
            if path in wanted and ops is not None:
                rows.append({"kernel": m.group(1), "kernel_file": path, "ops": ops})
            path, ops = None, None
    return rows


def _candidates(root: str, near: float) -> list:
    """The cache's modules written within _WINDOW_S of ``near``, nearest first, at most
    OUTPUT_CODE_FILES."""
    found = []
    try:
        with os.scandir(root) as subdirs:
            for sub in subdirs:
                if len(sub.name) != 2 or not sub.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(sub.path) as files:
                    for f in files:
                        if not f.name.endswith(".py") or not f.is_file(follow_symlinks=False):
                            continue
                        st = f.stat(follow_symlinks=False)
                        if abs(st.st_mtime - near) <= _WINDOW_S:
                            found.append((abs(st.st_mtime - near), f.path, st.st_size))
    except OSError:
        pass
    found.sort()
    return found[:OUTPUT_CODE_FILES]


def output_code_provenance(launches: list) -> Optional[list]:
    """The provenance rows (``kernel``, ``ops``, ``sources``: None) of the launched kernels whose
    output code is on this machine; None when the trace names no kernel file."""
    if not any(launch.get("kernel_file") for launch in launches):
        return None
    present = {p for p in (_kernel_file(launch) for launch in launches) if p is not None}
    by_root: dict = {}
    for path in present:
        by_root.setdefault(os.path.dirname(os.path.dirname(path)), set()).add(path)
    rows: list = []
    named: set = set()
    read = 0
    for root, wanted in sorted(by_root.items()):
        try:
            near = min(os.stat(p).st_mtime for p in wanted)
        except OSError:
            continue
        for _, path, size in _candidates(root, near):
            if wanted <= named or read + size > OUTPUT_CODE_BYTES:
                break
            if path in wanted:
                continue  # a kernel's own module: its code only
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            read += len(text)
            if "# kernel path: " not in text:
                continue
            for row in kernels_in_output_code(text, wanted):
                named.add(row["kernel_file"])
                rows.append({"kernel": row["kernel"], "ops": row["ops"], "sources": None})
    return rows
