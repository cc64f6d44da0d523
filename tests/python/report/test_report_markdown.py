"""Markdown rendering for CI comments and job summaries."""

from __future__ import annotations

from report_samples import cpu_report, gpu_report

import gpuprof
from gpuprof.report.markdown import md_escape


def _table_rows(md: str, first_header: str) -> list[list[str]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_category_table_holds_the_reports_averages():
    r = cpu_report()
    md = r.to_markdown()
    assert md.startswith("## gpuprof report")
    assert f"**{len(r.steps)} steps, mean step time {r.average['total_us'] / 1000:.3f} ms**" in md
    rows = {row[0]: row for row in _table_rows(md, "category")}
    # The slow Dataset makes DataLoader time; every shown category carries the average's numbers.
    assert rows["DataLoader"][1] == f"{r.average['dataloader_us']:,.1f}"
    assert rows["DataLoader"][2] == f"{r.average['dataloader_pct']:.1f}"
    assert rows["Other"][2] == f"{r.average['other_pct']:.1f}"
    # One per-step row per recorded step.
    assert len(_table_rows(md, "step")) == len(r.steps)
    assert "### GPU summary" not in md
    # Advice: the sample's sleepy DataLoader is advised, and only that.
    assert "### Recommendations" in md and "(`dataloader`, up to" in md and md.count("1. **") == 1


def test_gpu_sections_and_ranked_advice():
    md = gpu_report().to_markdown()
    gpu = _table_rows(md, "GPU")[0]
    assert gpu[0] == "0 NVIDIA H100 80GB HBM3" and gpu[1] == "71.5%"
    recs = md.split("### Recommendations")[1]
    assert recs.index("The input pipeline starves the GPU") < recs.index("Use mixed precision")
    assert "(`dataloader`, up to 73% of the step, confidence high)" in recs
    kernels = _table_rows(md, "name")  # the first name table is the kernels', heaviest first
    assert [k[2] for k in kernels] == ["700", "600", "500", "400", "300", "200", "100"]


def test_names_cannot_break_the_table_or_inject_html():
    d = gpu_report(hostile_names=True).to_dict()
    d["kernels"][-1]["name"] = "a|b\n<script>x</script>"
    md = gpuprof.Report.from_dict(d).to_markdown()
    assert "<script>" not in md and "<img" not in md
    assert "a\\|b\\\\n&lt;script&gt;x&lt;/script&gt;" in md  # the newline shown as \n (escaped)
    assert md_escape("*bold* _it_ `code`") == "\\*bold\\* \\_it\\_ \\`code\\`"
