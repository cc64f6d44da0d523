"""``gpuprof check REPORT --max NAME=VALUE --min NAME=VALUE [--baseline BASE] [--junit OUT.xml]``:
performance budgets for CI. Exit 0 when every budget holds, 1 when one is broken, 2 on a mistake.

Metrics: every key of the report's ``average`` (``dataloader_pct``, ``kernel_us``, ``total_us``,
``mean_power_w``, ``energy_per_sample_j``...), ``step_time_us`` / ``step_time_ms``,
``energy_per_step_j`` (the mean step's energy on the sampled GPUs), ``dropped_events``, the FLOPs
section's numbers (``mfu_pct``, ``hfu_pct``, ``tflops_per_s``, ``per_step_flops``,
``memory_bound_pct``...), the GPU summary's per-device fields
(``utilization_pct``, ``sm_efficiency_pct``... checked on every GPU), ``advice_count``,
``input_wait_pct`` (the loop's wait for batches, ``input_pipeline.wait_pct``), and with
``--baseline``: ``step_time_regression_pct`` and ``<category>_regression_pct`` (change of the mean
step time, or of one category's mean time, as % of the baseline's mean step time), and from the memory
view (checked on every device that has it): ``peak_memory_pct`` (the peak allocated level, % of the
device's memory) and ``memory_growth_mb_per_step`` (the rate allocated memory grows at step ends).
``--deny-rule RULE`` (repeatable) fails when that advice rule fires (docs/advice.md lists the ids).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from . import UserError
from .report import load_report


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


def _parse_budget(text: str, flag: str) -> tuple[str, float]:
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


# ---- energy per step (docs/metrics.md, "Energy") ---------------------------------------------------
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


# ---- end energy


def junit_xml(results: list[Result], report_path: str) -> str:
    """JUnit XML, one test case per budget. Every string in it is valid XML 1.0 text: a control
    character in the report's path or a GPU's id (which XML forbids even as a character reference)
    shows as its escape, ``\\x1b``."""
    import xml.etree.ElementTree as ET

    from ..report.sections import printable
    from ..traces.read import display_path

    report_path = printable(display_path(report_path))

    suite = ET.Element(
        "testsuite",
        name="gpuprof check",
        tests=str(len(results)),
        failures=str(sum(not r.ok for r in results)),
        errors="0",
    )
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname="gpuprof.check", name=f"{r.label} {r.bound} {r.limit:g}"
        )
        if not r.ok:
            failure = ET.SubElement(case, "failure", message=r.line())
            failure.text = f"{report_path}: {r.line()}"
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def markdown_summary(results: list[Result], report_path: str) -> str:
    from ..report.markdown import md_code, md_escape, table
    from ..traces.read import display_path

    failed = sum(not r.ok for r in results)
    head = (
        f"### gpuprof check: {failed} of {len(results)} budgets broken"
        if failed
        else "### gpuprof check: the budget holds"
        if len(results) == 1
        else f"### gpuprof check: all {len(results)} budgets hold"
    )
    rows = [
        ["❌" if not r.ok else "✅", md_escape(r.label), f"{r.value:.4g}", f"{r.bound} {r.limit:g}"]
        for r in results
    ]
    return (
        "\n".join(
            [head, "", f"Report: {md_code(display_path(report_path))}", ""]
            + table(["", "metric", "value", "budget"], rows, [":-:", ":--", "--:", "--:"])
        )
        + "\n\n"
    )


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "check",
        help="CI budgets: exit 1 when a metric breaks its budget",
        description="Check a report against budgets; exit 0 when all hold, 1 when "
        "one is broken. Appends a Markdown summary to $GITHUB_STEP_SUMMARY when set.",
    )
    p.add_argument("report", metavar="REPORT", help="report.json, or a `gpuprof run` folder")
    p.add_argument(
        "--max",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fail when NAME is above VALUE (repeatable), e.g. dataloader_pct=5",
    )
    p.add_argument(
        "--min",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="fail when NAME is below VALUE (repeatable), e.g. utilization_pct=60",
    )
    p.add_argument(
        "--deny-rule",
        action="append",
        default=[],
        metavar="RULE",
        help="fail when this advice rule fires (repeatable), e.g. dataloader (docs/advice.md)",
    )
    p.add_argument(
        "--baseline", metavar="BASE", default=None, help="baseline report for *_regression_pct metrics"
    )
    p.add_argument("--junit", metavar="OUT.xml", default=None, help="also write JUnit XML here")
    p.set_defaults(run=run)


def run(args) -> int:
    budgets = [("max", *_parse_budget(t, "--max")) for t in args.max] + [
        ("min", *_parse_budget(t, "--min")) for t in args.min
    ]
    deny = getattr(args, "deny_rule", [])
    if not budgets and not deny:
        raise UserError("no budget given: add --max NAME=VALUE, --min NAME=VALUE and/or --deny-rule RULE")
    scaling = _scaling_results(args.report, budgets)
    if scaling is not None:
        return _print_results(args, scaling)
    report = load_report(args.report)
    baseline = load_report(args.baseline) if args.baseline else None
    results = evaluate(report, budgets, baseline) + denied_rules(report, deny)
    return _print_results(args, results)


def _print_results(args, results: list[Result]) -> int:
    for r in results:
        print(r.line())
    failed = [r for r in results if not r.ok]
    print(
        f"gpuprof check: {len(failed)} of {len(results)} budgets broken"
        if failed
        else "gpuprof check: the budget holds"
        if len(results) == 1
        else f"gpuprof check: all {len(results)} budgets hold"
    )
    if args.junit:
        from ..traces.atomic import write_text

        try:
            write_text(args.junit, junit_xml(results, args.report))
        except OSError as e:
            raise UserError(f"cannot write {args.junit}: {e.strerror}") from None
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(markdown_summary(results, args.report))
        except OSError as e:
            print(
                f"gpuprof check: could not append to $GITHUB_STEP_SUMMARY ({summary}): {e.strerror}",
                file=sys.stderr,
            )
    return 1 if failed else 0


def _scaling_results(path: str, budgets) -> list[Result] | None:
    """Results for a ``{"scaling": [...]}`` file (``gpuprof scaling --json OUT``), else None.
    Metrics, per run (world size N):
    ``parallel_efficiency_pct`` (alias ``efficiency_pct``), ``speedup``, ``samples_per_s``, ``step_us``,
    ``tflops_per_rank``, ``energy_per_step_j``, ``energy_per_sample_j``."""

    if not (os.path.isfile(path) and path.endswith(".json")):
        return None
    from ..traces.read import InputTooLarge, read_json

    try:
        data = read_json(path)
    except InputTooLarge as e:
        raise UserError(str(e)) from None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("scaling"), list):
        return None
    names = {
        "parallel_efficiency_pct": "efficiency_pct",
        "efficiency_pct": "efficiency_pct",
        "speedup": "speedup",
        "samples_per_s": "samples_per_s",
        "step_us": "step_us",
        "tflops_per_rank": "tflops_per_rank",
        "energy_per_step_j": "energy_per_step_j",
        "energy_per_sample_j": "energy_per_sample_j",
    }
    out = []
    for bound, name, limit in budgets:
        if name not in names:
            raise UserError(f"unknown scaling metric {name!r}; known: {', '.join(sorted(names))}")
        for row in data["scaling"]:
            v = row.get(names[name])
            if isinstance(v, (int, float)):
                out.append(Result(name, bound, limit, float(v), f"world size {row.get('world_size')}"))
    if not out:
        raise UserError(f"{path}: no run of the scaling table has these metrics (was the batch size known?)")
    return out
