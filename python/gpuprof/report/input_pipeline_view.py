"""What every format shows of the ``input_pipeline`` section (docs/metrics.md, "Input pipeline"): one
batch's stages as a bar, the workers' busy share, the slowest samples, Little's law's arithmetic.
Formatting only: every number comes from the report; strings from outside (the dataset's class
name, an exception's message) are the renderers' to escape."""

from __future__ import annotations

from typing import Optional

# (key in input_pipeline, label, whether it runs in a worker when the loader has workers), in a
# batch's order.
STAGES = (
    ("fetch", "load", True),
    ("transform", "transform", True),
    ("collate", "collate", True),
    ("pin", "pin", False),
    ("transfer", "copy", False),
)
STAGE_COLORS = {
    "fetch": "#eb3b5a",
    "transform": "#f7b731",
    "collate": "#a55eea",
    "pin": "#45aaf2",
    "transfer": "#2d98da",
}
TERM_COLORS = {"fetch": "red", "transform": "yellow", "collate": "magenta", "pin": "cyan", "transfer": "blue"}
MAX_WORKERS_SHOWN = 16
MAX_LINES = 8  # errors and notes shown


def pipeline_of(data: dict) -> Optional[dict]:
    ip = data.get("input_pipeline")
    return ip if isinstance(ip, dict) else None


def ms(us) -> str:
    if not isinstance(us, (int, float)):
        return "-"
    return f"{us / 1000.0:.1f} ms" if abs(us) >= 1000 else f"{us:.0f} us"


def _mean(ip: dict, key: str) -> Optional[float]:
    s = ip.get(f"{key}_us")
    v = s.get("mean") if isinstance(s, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def stages(ip: dict) -> list[dict]:
    """One batch's stages with a mean time: key, label, us, share of their sum (%), where it runs
    ("worker", or "main process": the training process, as every stage is with num_workers=0)."""
    workers = bool(ip.get("num_workers"))
    rows = [
        {
            "key": k,
            "label": label,
            "us": _mean(ip, k),
            "where": "worker" if in_worker and workers else "main process",
        }
        for k, label, in_worker in STAGES
        if _mean(ip, k) is not None
    ]
    total = sum(r["us"] for r in rows)
    for r in rows:
        r["pct"] = 100.0 * r["us"] / total if total > 0 else 0.0
        r["color"] = STAGE_COLORS[r["key"]]
    return rows


def headline(ip: dict) -> str:
    nw = ip.get("num_workers") or 0
    where = f"{nw} worker process{'es' if nw != 1 else ''}" if nw else "the training process (num_workers=0)"
    text = f"DataLoader of {ip.get('dataset') or '?'}, batches made in {where}"
    if isinstance(ip.get("wait_pct"), (int, float)):
        text += f"; the loop waits {ms(_mean(ip, 'wait'))} per batch, {ip['wait_pct']:.1f}% of the steps"
    return text


def stage_line(ip: dict) -> str:
    parts = [f"{r['label']} {ms(r['us'])}" for r in stages(ip)]
    if not parts:
        return "stages not measured"
    return "one batch: " + " + ".join(parts) + slowest(ip)


def slowest(ip: dict) -> str:
    """`` (slowest stage: loading)``, or "" when the section names none."""
    word = {"fetch": "loading", "transform": "transforming", "collate": "collating"}.get(ip.get("stage"))
    return f" (slowest stage: {word})" if word else ""


def detail_lines(ip: dict) -> list[str]:
    """The lines under the bar: workers, queue, samples, the law, errors and notes."""
    out = []
    workers = [w for w in ip.get("workers") or [] if isinstance(w, dict)]
    if workers:
        shown = workers[:MAX_WORKERS_SHOWN]
        each = ", ".join(
            ("main" if w.get("worker", 0) < 0 else f"worker {w.get('worker')}")
            + f" {w.get('busy_pct', 0):.0f}%"
            + ("" if w.get("status") in (None, "running", "exited") else f" ({w.get('status')})")
            for w in shown
        )
        more = f", and {len(workers) - len(shown)} more" if len(workers) > len(shown) else ""
        busy = ip.get("worker_busy_pct")
        out.append(
            (f"loading busy {busy:.0f}% of the steps" if isinstance(busy, (int, float)) else "loading")
            + f" ({each}{more})"
        )
    if isinstance(ip.get("queue_empty_pct"), (int, float)):
        out.append(
            f"no batch ready in {ip['queue_empty_pct']:.0f}% of the steps"
            + (
                f" ({ip['queue_depth_mean']:.1f} ready on average)"
                if isinstance(ip.get("queue_depth_mean"), (int, float))
                else ""
            )
        )
    slow = ip.get("slowest_samples") or []
    if slow:
        each = ", ".join(
            (f"#{s.get('index')}" if s.get("index") is not None else "?") + f" {ms(s.get('us'))}"
            for s in slow[:5]
        )
        share = ip.get("slowest_share_pct") or 0
        out.append(f"slowest samples: {each} (the slowest 1% take {share:.0f}% of the loading time)")
    law = ip.get("law") if isinstance(ip.get("law"), dict) else {}
    if isinstance(law.get("t_batch_us"), (int, float)) and isinstance(ip.get("recommended_num_workers"), int):
        line = (
            f"Little's law: ceil(T_batch {ms(law['t_batch_us'])} / T_step {ms(law['t_step_us'])}) = "
            f"{law['workers_needed']} worker{'' if law['workers_needed'] == 1 else 's'}"
        )
        if isinstance(law.get("cpu_limit"), int):
            share = 100 * (law.get("worker_cpu_share") or 0)
            line += (
                f"; {law.get('cpu_budget'):g} CPUs ({law.get('cpu_budget_source') or '?'}) - "
                f"{law.get('training_cpus') or 0:g} for training"
                + (
                    f" - {law['other_cpus_subtracted']:g} for other processes"
                    if isinstance(law.get("other_cpus_subtracted"), (int, float))
                    else ""
                )
                + f", at {share:.0f}% "
                f"CPU each: room for {law['cpu_limit']}"
            )
        line += (
            f" -> num_workers={ip['recommended_num_workers']}, "
            f"prefetch_factor={ip.get('recommended_prefetch_factor')}"
        )
        if ip.get("bound"):
            line += f" (bound: {ip['bound']})"
        out.append(line)
    for e in (ip.get("errors") or [])[:MAX_LINES]:
        who = (
            "the training process"
            if (e.get("worker") or 0) < 0
            else f"worker {e.get('worker')} (pid {e.get('pid')})"
        )
        at = f" at sample {e['index']}" if e.get("index") is not None else ""
        out.append(f"raised in {who}{at}, {e.get('stage')}: {e.get('error')}")
    for n in (ip.get("notes") or [])[:MAX_LINES]:
        out.append(str(n))
    return out
