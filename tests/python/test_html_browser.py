"""The HTML report in a real headless browser (Debian's chromium): it loads with no script error,
its charts render with a size, its tables sort, injected names never run, and a screenshot is taken.

Skipped, saying why, where no chromium is installed (apt-get install -y chromium).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess

import pytest
from report_samples import gpu_report

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)")

# The injected names would set this attribute on <html> if they ran (the text itself is on the page).
PWNED = re.compile(r"<html[^>]*\sdata-pwned=")

# Loaded first: records every uncaught error and console.error call of the page.
CATCH_ERRORS = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
var __origError = console.error;
console.error = function () { window.__errors.push(Array.prototype.join.call(arguments, " ")); __origError.apply(console, arguments); };
</script>"""

# Run after the report: measures the charts, clicks the kernel table's "total (us)" header twice,
# and leaves the results in an attribute that --dump-dom shows.
MEASURE = """<script>
window.addEventListener("load", function () {
  var charts = Array.prototype.map.call(document.querySelectorAll("svg.chart"), function (svg) {
    var box = svg.getBoundingClientRect();
    var drawn = Array.prototype.filter.call(svg.querySelectorAll("rect, polyline"), function (el) {
      var b = el.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length;
    return {id: svg.id, w: box.width, h: box.height, drawn: drawn};
  });
  var table = document.getElementById("table-kernels");
  var col = Array.prototype.findIndex.call(table.tHead.rows[0].cells, function (th) { return th.textContent.indexOf("total") === 0; });
  function firstTotals() { return Array.prototype.slice.call(table.tBodies[0].rows, 0, 3).map(function (r) { return parseFloat(r.cells[col].getAttribute("data-v")); }); }
  table.tHead.rows[0].cells[col].click();
  var desc = firstTotals();
  table.tHead.rows[0].cells[col].click();
  var asc = firstTotals();
  document.documentElement.setAttribute("data-test", JSON.stringify({charts: charts, desc: desc, asc: asc, errors: window.__errors}));
});
</script>"""


def _chromium(*args, timeout=120):
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _console_errors(stderr: str) -> list[str]:
    """Page errors chromium logs itself with --enable-logging (e.g. a script that fails to parse)."""
    return [
        line for line in stderr.splitlines() if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)
    ]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "report.html"
    gpu_report(hostile_names=True).to_html(path)
    return path


def test_page_loads_charts_render_tables_sort(report_file, tmp_path):
    page = report_file.read_text()
    harness = tmp_path / "harness.html"
    harness.write_text(
        page.replace("<head>", "<head>" + CATCH_ERRORS, 1).replace("</body>", MEASURE + "</body>", 1)
    )
    p = _chromium("--virtual-time-budget=5000", "--dump-dom", harness.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    dom = p.stdout
    match = re.search(r'data-test="([^"]*)"', dom)
    assert match, "the measuring script did not run: " + p.stderr[-2000:]
    result = json.loads(html.unescape(match.group(1)))
    assert result["errors"] == []
    assert not _console_errors(p.stderr)
    # The injected names stayed text: their scripts and onerror handlers never ran.
    assert not PWNED.search(dom)
    charts = {c["id"] or f"chart{i}": c for i, c in enumerate(result["charts"])}
    # Step chart, 2 NVML charts (utilization, memory used), 1 memory chart and the roofline: each
    # with a size and with visible bars or lines.
    assert len(charts) == 5
    assert all(c["w"] > 100 and c["h"] > 100 and c["drawn"] > 0 for c in charts.values()), charts
    assert charts["step-chart"]["drawn"] >= 6  # at least one segment per recorded step
    # Kernel totals are 700..100 us: one click sorts descending, the next ascending.
    assert result["desc"] == [700.0, 600.0, 500.0]
    assert result["asc"] == [100.0, 200.0, 300.0]


def test_untouched_page_runs_no_injected_script_and_screenshots(report_file):
    p = _chromium("--virtual-time-budget=3000", "--dump-dom", report_file.as_uri())
    assert p.returncode == 0 and "gpuprof report" in p.stdout
    assert not PWNED.search(p.stdout)
    assert not _console_errors(p.stderr)
    shot = report_file.with_suffix(".png")
    p = _chromium("--window-size=1280,3200", f"--screenshot={shot}", report_file.as_uri())
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    with open(shot, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert (width, height) == (1280, 3200)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(shot) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50  # text, bars and lines, not a blank page
    keep = os.environ.get("GPUPROF_SCREENSHOT_DIR")
    if keep:  # for a person to look at
        shutil.copy(shot, os.path.join(keep, "report.png"))
