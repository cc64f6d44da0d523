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


# ---- the module tree -------------------------------------------------------------------------------
# Run after the report: reads the tree, collapses and expands it, picks a module for the timeline,
# and leaves what it saw in an attribute that --dump-dom shows.
MODULE_TREE = """<script>
window.addEventListener("load", function () {
  function visible() {
    return Array.prototype.filter.call(document.querySelectorAll("#module-tree .mod-row:not(.mod-head)"),
      // Closed <details> content is skipped by rendering (content-visibility), not sized to 0.
      function (r) { return r.checkVisibility ? r.checkVisibility() : r.getBoundingClientRect().height > 0; }).map(function (r) {
        return r.querySelector(".mod-name").getAttribute("title"); });
  }
  var out = {errors: window.__errors, rows: document.querySelectorAll("#module-tree .mod").length};
  out.initial = visible();
  var bar = document.querySelector("#module-tree .mod-row:not(.mod-head) .mod-bar");
  out.root_bar_pct = 100 * bar.getBoundingClientRect().width / bar.parentNode.getBoundingClientRect().width;
  out.root_share = document.querySelector("#module-tree .mod-share").textContent;
  document.querySelector('[data-mods="close"]').click();
  out.collapsed = visible();
  document.querySelector('[data-mods="open"]').click();
  out.expanded = visible().length;
  out.names = Array.prototype.map.call(document.querySelectorAll("#module-tree .mod-name"), function (n) { return n.textContent; });
  // The arrow of layer1: its calls and the work under it highlighted in the timelines, the rest dimmed.
  var views = JSON.parse(document.getElementById("gp-views").textContent);
  var link = Array.prototype.filter.call(document.querySelectorAll(".mod-link"), function (b) {
    return b.closest(".mod").querySelector(".mod-name").getAttribute("title") === "layer1"; })[0];
  var row = +link.getAttribute("data-row"), end = views.modules[row].end;
  link.click();
  var picked = document.querySelectorAll("rect.picked"), outside = 0;
  Array.prototype.forEach.call(picked, function (r) {
    var box = r.closest(".timeline"), t = views.timelines[+box.getAttribute("data-index")];
    var m = t.module_of[+r.getAttribute("data-i")];
    if (!(m >= row && m < end)) outside++;
  });
  out.picked = picked.length; out.outside = outside;
  out.dimmed = document.querySelectorAll("rect.ev[opacity]").length;
  out.status = document.getElementById("module-status").textContent;
  link.click();
  out.after_clear = document.querySelectorAll("rect.ev[opacity]").length;
  document.documentElement.setAttribute("data-test", JSON.stringify(out));
});
</script>"""


@pytest.fixture(scope="module")
def module_report_file(tmp_path_factory):
    """A live report of the small ResNet (tests/python/_loops.py) and its loss module, its classifier
    followed by a module whose class name and attribute name are markup: the tree shows them as text."""
    torch = pytest.importorskip("torch")
    from collections import OrderedDict

    from _loops import make_tiny_resnet
    from report_samples import SCRIPT_PAYLOAD

    import gpuprof

    torch.manual_seed(0)
    model = make_tiny_resnet()
    hostile = type(SCRIPT_PAYLOAD, (torch.nn.Identity,), {})()
    model.fc = torch.nn.Sequential(OrderedDict([("linear", model.fc), ("<b>named</b>", hostile)]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    step()
    with gpuprof.profile(with_modules=True) as prof:
        for _ in range(3):
            step()
            prof.step()
    path = tmp_path_factory.mktemp("modules") / "report.html"
    prof.report().to_html(path)
    return path, prof.report()


def test_module_tree_collapses_expands_and_links_to_the_timeline(module_report_file, tmp_path):
    """The tree has a row per module, opens two levels deep, collapses to the roots and expands to
    every row; the model's bar is as long as its share of the step; the markup in a module's names
    stays text; a module's arrow highlights exactly the timeline events of its subtree (and dims the
    rest), and clicking it again clears."""
    report_file, report = module_report_file
    page = report_file.read_text()
    harness = tmp_path / "harness.html"
    harness.write_text(
        page.replace("<head>", "<head>" + CATCH_ERRORS, 1).replace("</body>", MODULE_TREE + "</body>", 1)
    )
    p = _chromium("--virtual-time-budget=5000", "--dump-dom", harness.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    match = re.search(r'data-test="([^"]*)"', p.stdout)
    assert match, "the tree script did not run: " + p.stderr[-2000:]
    seen = json.loads(html.unescape(match.group(1)))
    assert seen["errors"] == [] and not _console_errors(p.stderr)
    assert not PWNED.search(p.stdout)
    rows = report.data["modules"]
    assert seen["rows"] == len(rows) == 38  # the ResNet's 37 (fc now a Sequential of 2) and the loss
    # Open two levels deep: the roots, the model's children and the blocks of layer1 and layer2.
    depth = {r["path"]: r["depth"] for r in rows}
    expected = [r["path"] or "(the model)" for r in rows if r["depth"] <= 2]
    assert seen["initial"] == expected
    assert seen["collapsed"] == ["(the model)", "CrossEntropyLoss"]
    assert seen["expanded"] == len(rows)
    share = 100.0 * rows[0]["host_total_us"] / sum(s["total_us"] for s in report.steps)
    assert seen["root_share"] == f"{share:.1f}%"
    assert seen["root_bar_pct"] == pytest.approx(min(share, 100.0), abs=1.0)
    from report_samples import SCRIPT_PAYLOAD

    assert any(SCRIPT_PAYLOAD in n and "<b>named</b>" in n for n in seen["names"])
    assert max(depth.values()) == 4
    assert seen["picked"] > 0 and seen["outside"] == 0
    assert seen["dimmed"] > 0 and seen["after_clear"] == 0
    assert seen["status"].startswith("Highlighted: the work of layer1 ")


def test_module_tree_screenshot(module_report_file):
    """A screenshot of the tree's part of the page, for a person to look at (GPUPROF_SCREENSHOT_DIR)."""
    report_file, _ = module_report_file
    shot = report_file.with_name("modules.png")
    p = _chromium(
        "--window-size=1200,2600", "--virtual-time-budget=3000", f"--screenshot={shot}", report_file.as_uri()
    )
    assert p.returncode == 0 and shot.is_file(), p.stderr[-2000:]
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("GPUPROF_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, os.path.join(keep, "modules.png"))


# ---- the operator table's "group by input shape" toggle ---------------------------------------------
# Run after the report: reads the rows of the operator table that shows, flips the toggle, sorts the
# by-shape table by its host total, flips back, and leaves what it saw in an attribute.
SHAPE_TOGGLE = """<script>
window.addEventListener("load", function () {
  function shows(el) { return el.checkVisibility ? el.checkVisibility() : el.getBoundingClientRect().height > 0; }
  function seen() {
    var tables = Array.prototype.filter.call(document.querySelectorAll("#operator-views table"), shows);
    var notes = Array.prototype.filter.call(document.querySelectorAll("#operator-views h2 .note"), shows);
    return {
      tables: tables.map(function (t) { return t.id; }),
      notes: notes.map(function (n) { return n.textContent; }),
      rows: tables.length !== 1 ? [] : Array.prototype.map.call(tables[0].tBodies[0].rows, function (r) {
        return Array.prototype.slice.call(r.cells, 0, 2).map(function (c) { return c.textContent; }); })
    };
  }
  var out = {errors: window.__errors};
  var toggle = document.getElementById("group-by-shape");
  out.label = toggle.parentNode.textContent.trim();
  out.before = seen();
  toggle.click();
  out.checked = toggle.checked;
  out.after = seen();
  var table = document.getElementById("table-operators_by_shape");
  var heads = table.tHead.rows[0].cells;
  var col = Array.prototype.findIndex.call(heads, function (th) { return th.textContent === "host total (us)"; });
  heads[col].click();
  out.sorted = Array.prototype.map.call(table.tBodies[0].rows, function (r) { return parseFloat(r.cells[col].getAttribute("data-v")); });
  toggle.click();
  out.back = seen();
  document.documentElement.setAttribute("data-test", JSON.stringify(out));
});
</script>"""


def _toggle_seen(report, tmp_path) -> tuple[dict, str]:
    """What SHAPE_TOGGLE saw on ``report``'s HTML page, and the page as the browser left it."""
    path = tmp_path / "report.html"
    report.to_html(path)
    harness = tmp_path / "harness.html"
    harness.write_text(
        path.read_text()
        .replace("<head>", "<head>" + CATCH_ERRORS, 1)
        .replace("</body>", SHAPE_TOGGLE + "</body>", 1)
    )
    p = _chromium("--virtual-time-budget=5000", "--dump-dom", harness.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    match = re.search(r'data-test="([^"]*)"', p.stdout)
    assert match, "the toggle script did not run: " + p.stderr[-2000:]
    seen = json.loads(html.unescape(match.group(1)))
    assert seen["errors"] == [] and not _console_errors(p.stderr)
    return seen, p.stdout


def test_group_by_input_shape_toggle_shows_the_shape_rows(tmp_path):
    """The operator table shows one row per name; the toggle swaps in the rows by name and input
    shapes (and their count), sortable like the others, and back. Names and shapes that are markup
    stay text. The hand-made rows: by name the injected operator 2000 us and aten::relu 300 us; by
    shape the injected one on two shapes (1500 and 500 us, the second's shapes markup too) and relu."""
    import copy

    from report_samples import IMG_PAYLOAD, SCRIPT_PAYLOAD, cpu_report_dict, with_gpu_sections

    import gpuprof

    data = with_gpu_sections(cpu_report_dict(), hostile_names=True)
    op0 = next(r["name"] for r in data["operators"] if r["name"] != "aten::relu")
    assert IMG_PAYLOAD in op0
    row = {"calls": 20, "host_self_us": 100.0, "device_self_us": 0.0, "device_total_us": 0.0}
    row.update(tc_self_pct=None, tc_total_pct=None)
    shaped = [
        (op0, "[[32, 64], [64, 64]]", 1500.0),
        (op0, "[[8, 64]] " + SCRIPT_PAYLOAD, 500.0),
        ("aten::relu", "[[32, 64]]", 300.0),
    ]
    data["operators_by_shape"] = [
        {"name": n, "input_shapes": s, **copy.deepcopy(row), "host_total_us": t} for n, s, t in shaped
    ]
    seen, dom = _toggle_seen(gpuprof.Report.from_dict(data), tmp_path)
    assert not PWNED.search(dom)
    assert seen["label"] == "group by input shape"
    assert seen["before"]["tables"] == ["table-operators"]
    assert seen["before"]["notes"] == ["(2 rows; click a column to sort)"]
    assert [r[0] for r in seen["before"]["rows"]] == [op0, "aten::relu"]
    assert seen["checked"] is True
    assert seen["after"]["tables"] == ["table-operators_by_shape"]
    assert seen["after"]["notes"] == ["(3 rows; click a column to sort)"]
    assert seen["after"]["rows"] == [[n, s] for n, s, _ in shaped]  # name, then input shapes
    assert seen["sorted"] == [1500.0, 500.0, 300.0]
    assert seen["back"]["tables"] == ["table-operators"]
    assert seen["back"]["rows"] == seen["before"]["rows"]


def test_group_by_input_shape_on_a_real_trace(tmp_path):
    """ResNet-50 on a V100 (torch.profiler, record_shapes): the plugin's 76 operators by name, and
    its 577 rows by name and input shape once the toggle is on."""
    from _traces import TRACES

    import gpuprof

    trace = TRACES / "tb_resnet50_v100_nw0" / "worker0.1623143089861.pt.trace.json.gz"
    if not trace.exists():
        pytest.skip(f"shared trace {trace} is absent (tests read ../shared/traces beside the repo)")
    seen, _ = _toggle_seen(gpuprof.analyze(str(trace)), tmp_path)
    assert len(seen["before"]["rows"]) == 76 and seen["before"]["notes"] == [
        "(76 rows; click a column to sort)"
    ]
    assert len(seen["after"]["rows"]) == 577 and seen["after"]["notes"] == [
        "(577 rows; click a column to sort)"
    ]
    assert ["aten::conv2d", "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], []]"] in seen["after"]["rows"]
    assert len(seen["sorted"]) == 577 and seen["sorted"] == sorted(seen["sorted"], reverse=True)
    assert len(seen["back"]["rows"]) == 76


def test_without_input_shapes_the_operator_table_says_how_to_get_them(tmp_path):
    """A live report recorded without record_shapes has no toggle, and says how to record them."""
    from report_samples import cpu_report

    report = cpu_report()
    assert report.data["operators_by_shape"] == [] and report.operators
    page = report.to_html()
    assert 'id="group-by-shape"' not in page
    assert "gpuprof.profile(record_shapes=True)" in page


# Run after the report: every token (a number, a word) of every table cell, as laid out, on one
# line; left in an attribute that --dump-dom shows.
TOKENS_WHOLE = """<script>
window.addEventListener("load", function () {
  var broken = [];
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable td"), function (td) {
    var node = td.firstChild;
    if (!node || node.nodeType !== 3 || td.offsetParent === null) return;
    var re = /\\S+/g, m;
    while ((m = re.exec(node.data)) !== null) {
      var range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      var lines = {};
      Array.prototype.forEach.call(range.getClientRects(), function (r) { if (r.width > 0) lines[Math.round(r.top)] = 1; });
      if (Object.keys(lines).length > 1 && m[0].length <= 40) broken.push(td.closest("table").id + ": " + m[0]);
    }
  });
  document.documentElement.setAttribute("data-test", JSON.stringify({broken: broken}));
});
</script>"""


def test_no_table_breaks_a_number_or_a_word_at_1400_px(tmp_path):
    """The roofline table beside the others at 1400 px: a column is never narrower than its
    longest token (numbers like 527,465 and words like convolution_backward stay whole; a wide
    table scrolls). A token longer than 40 characters (a hostile name) may still wrap."""
    page = tmp_path / "report.html"
    gpu_report().to_html(page)
    harness = tmp_path / "harness.html"
    harness.write_text(page.read_text().replace("</body>", TOKENS_WHOLE + "</body>", 1))
    p = _chromium("--window-size=1400,1000", "--virtual-time-budget=5000", "--dump-dom", harness.as_uri())
    assert p.returncode == 0, p.stderr[-2000:]
    match = re.search(r'data-test="([^"]*)"', p.stdout)
    assert match, "the measuring script did not run: " + p.stderr[-2000:]
    result = json.loads(html.unescape(match.group(1)))
    assert result["broken"] == []
