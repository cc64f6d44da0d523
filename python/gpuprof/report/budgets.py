"""Performance budgets checked against a report: the metrics ``gpuprof check`` knows (its
docstring lists them), each budget's result, and the advice rules a run may not fire. Read by
``gpuprof check`` (cli/check.py) and the assistant interface (agents/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import UserError


@dataclass
class Result:
    metric: str
    bound: str  # "max" or "min"
    limit: float
    value: float
    where: str = ""  # e.g. "GPU 1" for per-device metrics

    @property
    def ok(self) -> bool:
        return self.value <= self.limit if self.bound == "max" else self.value >= self.limit

    @property
    def label(self) -> str:
        # A GPU's id comes from the report: shown inert (control characters as their escapes).
        from ..report.sections import printable

        return printable(f"{self.metric}{f' ({self.where})' if self.where else ''}")

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.label} = {self.value:.4g} ({self.bound} {self.limit:g})"
        verb = "above the maximum" if self.bound == "max" else "below the minimum"
        return (
            f"FAIL  {self.label} = {self.value:.4g}, {abs(self.value - self.limit):.4g} {verb} {self.limit:g}"
        )


@dataclass
class RuleResult(Result):
    """A denied advice rule: broken (value 1) when it fired."""

    title: str = ""

    def line(self) -> str:
        if self.ok:
            return f"ok    {self.label} did not fire"
        from ..report.sections import printable

        return f"FAIL  {self.label} fired: {printable(self.title)}"


def denied_rules(report, rules: list[str]) -> list[RuleResult]:
    from ..advice import RULE_IDS

    unknown = sorted(set(rules) - set(RULE_IDS))
    if unknown:
        raise UserError(f"--deny-rule {', '.join(unknown)}: unknown rule; known: {', '.join(RULE_IDS)}")
    fired = {a.get("rule"): a for a in report.advice}  # a report loaded without advice is advised
    return [
        RuleResult(
            f"advice:{r}",
            "max",
            0.0,
            1.0 if r in fired else 0.0,
            title=str(fired.get(r, {}).get("title", "")),
        )
        for r in rules
    ]


def parse_budget(text: str, flag: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    name = name.strip()
    try:
        limit = float(value)
    except ValueError:
        limit = math.nan
    if not sep or not name or math.isnan(limit):
        raise UserError(f"{flag} {text!r}: write NAME=NUMBER, e.g. {flag} dataloader_pct=5")
    return name, limit


def metrics(report, baseline=None) -> dict[str, list[tuple[str, float]]]:
    """Every checkable metric: name -> [(where, value)] (several values for per-GPU metrics)."""
    from ..report import sections as sec
    from ..report.model import CATEGORIES

    avg = report.average
    out: dict[str, list[tuple[str, float]]] = {
        k: [("", float(v))] for k, v in avg.items() if isinstance(v, (int, float))
    }
    out["step_time_us"] = [("", float(avg["total_us"]))]
    out["step_time_ms"] = [("", float(avg["total_us"]) / 1000.0)]
    if isinstance(avg.get("energy_j"), (int, float)):
        out["energy_per_step_j"] = [("", float(avg["energy_j"]))]
    out["dropped_events"] = [("", float(report.counts.get("dropped", 0)))]
    out["advice_count"] = [("", float(len(report.advice)))]
    flops = report.data.get("flops") if isinstance(report.data.get("flops"), dict) else {}
    for key, v in flops.items():  # FLOPs: mfu_pct, hfu_pct, tflops_per_s, ... where known
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = [("", float(v))]
    out["input_wait_pct"] = [("", _input_wait_pct(report))]
    for d in report.devices:
        for key, _ in sec.DEVICE_FIELDS:
            if isinstance(d.get(key), (int, float)):
                out.setdefault(key, []).append((f"GPU {d.get('id', '?')}", float(d[key])))
    _memory_metrics(report, out)
    if baseline is not None:
        base_total = float(baseline.average["total_us"])
        if base_total > 0:
            out["step_time_regression_pct"] = [("", 100.0 * (avg["total_us"] - base_total) / base_total)]
            for key, _ in CATEGORIES:
                delta = avg.get(f"{key}_us", 0.0) - baseline.average.get(f"{key}_us", 0.0)
                out[f"{key}_regression_pct"] = [("", 100.0 * delta / base_total)]
    return out


_FLOPS_METRICS = ("mfu_pct", "hfu_pct", "tflops_per_s", "per_step_flops", "memory_bound_pct")


MEMORY_METRICS = ("peak_memory_pct", "memory_growth_mb_per_step")


def _memory_metrics(report, out: dict) -> None:
    """The memory view's budgets: each device's peak against its memory (GPUs whose capacity the
    report knows), and each device's growth rate (the host's too)."""
    from ..advice import Facts

    facts = Facts(report.data)
    for device, peak in sorted(facts.memory_peaks.items(), key=lambda kv: int(kv[0])):
        capacity = facts.device_capacity(device)
        if capacity and isinstance(peak.get("bytes"), (int, float)):
            out.setdefault("peak_memory_pct", []).append((_where(device), 100.0 * peak["bytes"] / capacity))
    for device, g in sorted(facts.memory_growth.items(), key=lambda kv: int(kv[0])):
        if isinstance(g.get("mb_per_step"), (int, float)):
            out.setdefault("memory_growth_mb_per_step", []).append((_where(device), float(g["mb_per_step"])))


def _where(device: str) -> str:
    return "host" if str(device) == "-1" else f"GPU {device}"


def _input_wait_pct(report) -> float:
    """The share of the steps the loop waited for its next batch: measured inside the DataLoader's
    ``__next__`` in a live span (``input_pipeline.wait_pct``); in a report without that (an imported
    trace), the DataLoader category of the breakdown."""
    ip = report.data.get("input_pipeline")
    wait = ip.get("wait_pct") if isinstance(ip, dict) else None
    if isinstance(wait, (int, float)) and not isinstance(wait, bool):
        return float(wait)
    return float(report.average.get("dataloader_pct") or 0.0)


def evaluate(report, budgets: list[tuple[str, str, float]], baseline=None) -> list[Result]:
    known = metrics(report, baseline)
    results = []
    for bound, name, limit in budgets:
        if name not in known:
            if name.endswith("_regression_pct") and baseline is None:
                raise UserError(f"{name} compares with a baseline: add --baseline BASE (a report.json)")
            from ..report import sections as sec

            if name in MEMORY_METRICS:
                raise UserError(
                    f"{name} reads the memory view and this report has none for it: record with "
                    "gpuprof.profile(profile_memory=True) (or analyse a trace with [memory] events; "
                    "peak_memory_pct also needs the device's memory size)"
                )
            if name in _ENERGY_METRICS:
                raise UserError(_no_energy(name, report))
            if any(name == k for k, _ in sec.DEVICE_FIELDS):
                raise UserError(
                    f"{name} is a GPU metric and this report has no GPU summary "
                    "(profiled on the CPU, or without GPU collection)"
                )
            flops = report.data.get("flops") if isinstance(report.data.get("flops"), dict) else None
            if flops is not None and name in flops:  # FLOPs: known, but not for this report
                raise UserError(
                    f"{name} is not known for this report: {flops.get('note') or 'no FLOPs were counted'}"
                )
            if flops is None and name in _FLOPS_METRICS:
                raise UserError(
                    f"{name} needs the report's FLOPs section, which gpuprof writes from version "
                    "schema 4 on: make the report again with this gpuprof (gpuprof analyze TRACE --json OUT)"
                )
            raise UserError(f"unknown metric {name!r}; known here: {', '.join(sorted(known))}")
        for where, value in known[name]:
            results.append(Result(name, bound, limit, value, where))
    return results


# energy per step (docs/metrics.md, "Energy")
_ENERGY_METRICS = ("energy_per_step_j", "energy_j", "mean_power_w", "energy_per_sample_j")


def _no_energy(name: str, report) -> str:
    """Why an energy budget cannot be checked on this report, and what gives it the number."""
    if isinstance(report.average.get("energy_j"), (int, float)):  # energy measured, batch size not
        return (
            f"{name} needs the batch size, which this report does not record: profile with "
            "gpuprof.profile(batch_size=N), or iterate a DataLoader with a batch_size inside the span"
        )
    return (
        f"{name}: this report has no energy measurement (gpuprof reads it from NVML while it profiles "
        "a GPU: a CPU-only run, an imported Kineto trace or a run where NVML was off has none; "
        "the report's metadata gpu_samples says why NVML was off)"
    )
