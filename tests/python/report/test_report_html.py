"""The one-file HTML report: self-contained, escaped, every section when present."""

from __future__ import annotations

import importlib.resources
import re

from report_samples import cpu_report, gpu_report

import gpuprof


def test_self_contained_no_network():
    html = gpu_report().to_html()
    assert html.lstrip().startswith("<!DOCTYPE html>")
    # No external resource of any kind: no src/href to a URL, no @import, no link tags.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    assert "<link" not in html and "@import" not in html


def test_every_name_is_escaped():
    html = gpu_report(hostile_names=True).to_html()
    # Our own inline scripts (table sorting; drill-down and timeline; their JSON data) are the only
    # ones; the injected ones appear as text.
    assert html.count("<script") == 3 and html.count('<script type="application/json"') == 1
    assert "<img" not in html
    assert "&lt;script&gt;document.documentElement.setAttribute(&#39;data-pwned&#39;,&#39;1&#39;)" in html
    assert "aten::addmm&lt;img src=x onerror=" in html


def test_step_chart_has_one_bar_segment_per_nonzero_category_and_step():
    r = cpu_report()
    html = r.to_html()
    chart = html.split('id="step-chart"')[1].split("</svg>")[0]
    keys = [k for k, _ in gpuprof.report.model.CATEGORIES]
    expected = sum(1 for s in r.steps for k in keys if s[f"{k}_us"] > 0)
    assert chart.count("<rect") == expected > 0
    assert f"step {r.steps[0]['step']}: DataLoader" in chart  # each segment has its tooltip


def test_gpu_sections_render_when_present_and_notes_when_absent():
    gpu = gpu_report().to_html()
    for anchor in (
        'id="gpu-summary"',
        'id="table-kernels"',
        'id="table-operators"',
        'id="table-copies"',
        'id="table-syncs"',
        "NVML, GPU 0: utilization",
        "GPU 0 memory",
    ):
        assert anchor in gpu
    assert gpu.index("The input pipeline starves the GPU") < gpu.index("Use mixed precision")
    # NVML utilization, NVML memory used, allocated, reserved (the roofline's roofs are not a series)
    assert gpu.count('<polyline class="series"') == 4
    cpu = cpu_report().to_html()
    # Advice: the sample's sleepy DataLoader (~8 ms per step) is advised; without advice the
    # section says there is none.
    assert "No GPU activity in this report" in cpu and "docs/advice.md#dataloader" in cpu
    assert (
        "No recommendation in this report"
        in gpuprof.Report.from_dict({**cpu_report().to_dict(), "advice": []}).to_html()
    )
    # A CPU run has no GPU sections; its memory section charts the host's resident set size.
    assert 'id="gpu-summary"' not in cpu and "GPU 0 memory" not in cpu
    assert "Host memory" in cpu and cpu.count('<polyline class="series"') == 1


def test_kernel_table_rows_carry_sort_values():
    html = gpu_report().to_html()
    table = html.split('id="table-kernels"')[1].split("</table>")[0]
    totals = re.findall(
        r'data-v="([0-9.]+)">[0-9,]+</td><td class="num" data-v="[0-9.]+">[0-9.]+</td></tr>', table
    )
    assert [float(t) for t in totals] == [700.0, 600.0, 500.0, 400.0, 300.0, 200.0, 100.0]


def test_notebook_fragment_is_scoped():
    frag = cpu_report()._repr_html_()
    assert "<html" not in frag and "<body" not in frag
    assert frag.lstrip().startswith('<div class="gpuprof-report">')
    styles = frag.split("<style>")[1].split("</style>")[0]
    selectors = [line.split("{")[0] for line in styles.splitlines() if "{" in line]
    assert selectors and all(s.strip().startswith(".gpuprof-report") for s in selectors)


def test_template_is_installed_as_package_data():
    assert (importlib.resources.files("gpuprof.report") / "templates" / "report.html.j2").is_file()


def test_to_html_writes_the_file(tmp_path):
    path = gpu_report().to_html(tmp_path / "sub" / "report.html")
    assert (tmp_path / "sub" / "report.html").read_text() == path


def test_long_series_are_thinned_but_keep_their_peaks():
    d = gpu_report().to_dict()
    # 100k memory samples 1 us apart, allocated 0 except one 4 GiB spike at sample 31,337.
    d["memory"] = [
        {"device": 0, "time_us": i, "allocated_bytes": (4 * 2**30 if i == 31_337 else 0)}
        for i in range(100_000)
    ]
    html = gpuprof.Report.from_dict(d).to_html()
    chart = html.split("GPU 0 memory")[1].split("</svg>")[0]
    points = re.search(r'points="([^"]*)"', chart).group(1).split()
    assert len(points) <= 2 * 760  # at most two points per pixel column
    ys = [float(p.split(",")[1]) for p in points]
    # The spike is the maximum: 4 GiB is the top tick (ticks 0..4 GiB), drawn at y = PAD_T = 12.
    assert min(ys) == 12.0


def test_dropped_events_are_flagged_and_the_run_is_described():
    d = cpu_report().to_dict()
    assert 'id="dropped-warning"' not in gpuprof.Report.from_dict(d).to_html()
    d["counts"]["dropped"] = 12_345
    d["metadata"]["torch"] = "2.13.0+cpu<b>"
    html = gpuprof.Report.from_dict(d).to_html()
    assert "12,345 events were dropped" in html
    about = html.split('id="about"')[1].split("</table>")[0]
    assert "<td>torch</td><td>2.13.0+cpu&lt;b&gt;</td>" in about


def test_the_shapes_note_does_not_contradict_the_roofline():
    """A live run without record_shapes: the FLOP-counted operators' shapes are in the roofline
    table, so the operator table's note says only those were recorded, not that none were."""
    r = cpu_report()
    assert r.data["operators_by_shape"] == [] and any(row["input_shapes"] for row in r.data["roofline"])
    html = r.to_html()
    assert "Input shapes were not recorded" not in html
    assert "Only the operators whose FLOPs are counted had their input shapes recorded" in html
    # Without roofline shapes (a trace recorded without them), the note says none were.
    data = r.to_dict()
    data["roofline"] = []
    assert "Input shapes were not recorded" in gpuprof.Report(data).to_html()
