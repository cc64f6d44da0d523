"""What changed between two reports: each category's mean time and share, each kernel's and
operator's total time matched by name, the kernels and operators added, removed, called more or
less often per step (HTA's trace diff), and per sample when the batch size changed. Read by
``gpuprof diff`` (cli/diff.py) and the assistant interface (agents/).
"""

from __future__ import annotations

TOP_ROWS = 10


# The time each table is compared by: a kernel's total GPU time; an operator's total host time
# (its calls' wall time including children, the column torch.profiler users compare).
_TABLE_TIME = {"kernels": "total_us", "operators": "host_total_us"}


def _time_by_name(rows: list[dict], time_key: str) -> dict[str, float]:
    """Each name's time, summed over its rows: a report written before operators were one row per
    name (schema 1 to 3, with recorded input shapes) holds one row per name and shapes."""
    from ..report import sections as sec

    out: dict[str, float] = {}
    for r in rows:
        name = sec.name_of(r)
        out[name] = out.get(name, 0.0) + (r.get(time_key) or 0.0)
    return out


def _pct_change(base: float, new: float) -> float | None:
    return None if base == 0 else 100.0 * (new - base) / base


def _batch_size(report) -> int | None:
    """Samples per step as the report holds it: its rank's (``distributed.batch_size``), else its
    first DataLoader's; None for a trace (which does not say)."""
    data = report.data
    size = (data.get("distributed") or {}).get("batch_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    for loader in data.get("dataloaders") or []:
        size = loader.get("batch_size") if isinstance(loader, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    return None


# HTA's trace diff categories (traceinsight's TraceDiff.ops_diff), by calls per step.
CALL_CHANGES = ("added", "removed", "increased", "decreased", "unchanged")


def _calls_per_step(report, key: str) -> dict[str, float]:
    """Each name's calls in the table ``key``, summed over its rows, per step of the report (its
    calls when it has no steps): runs profiled for more steps still compare."""
    from ..report import sections as sec

    steps = len(report.data.get("steps") or []) or 1
    out: dict[str, float] = {}
    for r in sec.section(report.data, key):
        name = sec.name_of(r)
        out[name] = out.get(name, 0) + (r.get("calls") or 0)
    return {name: calls / steps for name, calls in out.items()}


def call_changes(base, new, key: str, top: int = TOP_ROWS) -> dict | None:
    """The names of table ``key`` in HTA's five categories by calls per step: added (none in the
    base), removed (none in the new run), increased, decreased, unchanged; each list by name, at
    most ``top`` rows with the count of all. None when neither report has the table."""
    b, n = _calls_per_step(base, key), _calls_per_step(new, key)
    if not b and not n:
        return None
    lists: dict[str, list] = {c: [] for c in CALL_CHANGES}
    for name in sorted(set(b) | set(n)):
        bc, nc = b.get(name, 0), n.get(name, 0)
        if bc == 0 and nc == 0:
            continue
        change = (
            "added"
            if bc == 0
            else "removed"
            if nc == 0
            else "increased"
            if nc > bc
            else "decreased"
            if nc < bc
            else "unchanged"
        )
        lists[change].append({"name": name, "base_calls_per_step": bc, "new_calls_per_step": nc})
    return {c: {"count": len(rows), "rows": rows[:top]} for c, rows in lists.items()}


def compare(base, new, top: int = TOP_ROWS) -> dict:
    from ..report import sections as sec
    from ..report.model import CATEGORIES

    b_avg, n_avg = base.average, new.average
    out = {
        "step_time_us": {
            "base": b_avg["total_us"],
            "new": n_avg["total_us"],
            "delta": n_avg["total_us"] - b_avg["total_us"],
            "change_pct": _pct_change(b_avg["total_us"], n_avg["total_us"]),
        },
        "categories": [],
        "tables": {},
    }
    b_batch, n_batch = _batch_size(base), _batch_size(new)
    if b_batch and n_batch and b_batch != n_batch:
        # A step of another batch size is other work: the time per sample is what compares.
        b_sample, n_sample = b_avg["total_us"] / b_batch, n_avg["total_us"] / n_batch
        out["batch_size"] = {"base": b_batch, "new": n_batch}
        out["sample_time_us"] = {
            "base": b_sample,
            "new": n_sample,
            "delta": n_sample - b_sample,
            "change_pct": _pct_change(b_sample, n_sample),
        }
    for key, name in CATEGORIES:
        bu, nu = b_avg.get(f"{key}_us", 0.0), n_avg.get(f"{key}_us", 0.0)
        if bu == 0 and nu == 0:
            continue
        out["categories"].append(
            {
                "key": key,
                "name": name,
                "base_us": bu,
                "new_us": nu,
                "delta_us": nu - bu,
                "base_pct": b_avg.get(f"{key}_pct", 0.0),
                "new_pct": n_avg.get(f"{key}_pct", 0.0),
            }
        )
    for key, _ in sec.TABLES[:2]:
        changes = call_changes(base, new, key, top)
        if changes is not None:
            out.setdefault("calls", {})[key] = changes
    for key, title in sec.TABLES[:2]:
        time_key = _TABLE_TIME[key]
        b_rows = _time_by_name(sec.section(base.data, key), time_key)
        n_rows = _time_by_name(sec.section(new.data, key), time_key)
        rows = []
        for name in sorted(set(b_rows) | set(n_rows)):
            bt = b_rows.get(name, 0.0)
            nt = n_rows.get(name, 0.0)
            status = "new" if name not in b_rows else "gone" if name not in n_rows else ""
            rows.append({"name": name, "base_us": bt, "new_us": nt, "delta_us": nt - bt, "status": status})
        rows.sort(key=lambda r: -abs(r["delta_us"]))
        if rows:
            out["tables"][key] = {
                "title": title,
                "time": time_key,
                "rows": rows[:top],
                "total_rows": len(rows),
            }
    return out
