"""The module view: the modules' rows, their subtrees and names, the tree the reports draw."""

from __future__ import annotations

from typing import Optional

from ...analysis import section


def modules(data: dict) -> list[dict]:
    """The module view's rows, depth first (analysis: docs/metrics.md, "Modules"); [] without."""
    return section(data, "modules")


def module_subtrees(data: dict) -> list[dict]:
    """Each module row's path and where its subtree ends among the rows (depth first: a row's
    descendants are the rows up to ``end``), for the timeline to show a module's work."""
    rows = modules(data)
    out = []
    for i, r in enumerate(rows):
        depth, end = r.get("depth") or 0, i + 1
        while end < len(rows) and (rows[end].get("depth") or 0) > depth:
            end += 1
        out.append({"path": r.get("path"), "end": end})
    return out


def steps_us(data: dict) -> float:
    """The summed time of the report's steps: what a module's share of the step is taken of."""
    return float(sum(s.get("total_us") or 0.0 for s in data.get("steps") or []))


def module_name_parts(row: dict) -> tuple[str, str]:
    """How a row reads in a tree: its name under its parent (its last path segments; the model: its
    class) and, when that name does not already say it, its class ("" otherwise)."""
    path = str(row.get("path") or "")
    parent = row.get("parent")
    kind = str(row.get("type") or "")
    if parent not in (None, "") and path.startswith(f"{parent}."):
        path = path[len(str(parent)) + 1 :]
    if not path:
        return kind, ""
    # torch.profiler's instance names (Conv2d_3) already carry the class.
    numbered = path.startswith(f"{kind}_") and path[len(kind) + 1 :].isdigit()
    return path, "" if path == kind or numbered else kind


def module_label(row: dict) -> str:
    own, kind = module_name_parts(row)
    return f"{own} ({kind})" if kind else own


def module_tree(data: dict, limit: int) -> tuple[list[dict], int]:
    """At most ``limit`` module rows as a tree: the heaviest by ``host_total_us`` and every
    ancestor of those (so each shown row hangs under its shown parent), in the rows' depth-first
    order; with each row's ``share_pct`` of the summed step time (None without steps), its
    ``label`` (``own`` name and ``kind``) and its index among all the rows (``row``). Returns
    (rows, how many were left out)."""
    rows = modules(data)
    if not rows:
        return [], 0
    index = {r.get("path"): i for i, r in enumerate(rows)}
    kept: set[int] = set()
    for i in sorted(range(len(rows)), key=lambda i: -(rows[i].get("host_total_us") or 0.0)):
        if len(kept) >= limit:
            break
        j: Optional[int] = i
        while j is not None and j not in kept:  # the row and its ancestors not yet kept
            kept.add(j)
            parent = rows[j].get("parent")
            j = index.get(parent) if parent is not None else None
    total = steps_us(data)
    out = []
    for i in sorted(kept):
        r = rows[i]
        share = 100.0 * (r.get("host_total_us") or 0.0) / total if total > 0 else None
        own, kind = module_name_parts(r)
        out.append({**r, "share_pct": share, "label": module_label(r), "own": own, "kind": kind, "row": i})
    return out, len(rows) - len(out)
