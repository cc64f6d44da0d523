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

import os
import sys

from ..report.budgets import (  # noqa: F401 (metrics, RuleResult: the API of gpuprof check)
    Result,
    RuleResult,
    denied_rules,
    evaluate,
    metrics,
    parse_budget,
)
from . import UserError
from .report import load_report


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
    budgets = [("max", *parse_budget(t, "--max")) for t in args.max] + [
        ("min", *parse_budget(t, "--min")) for t in args.min
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
