"""The HTML report's timeline and per-step drill-down in headless Chromium: the drawn step has the
step's kernels (a real GPU trace) and operators (a live CPU loop), a click on a step changes what is
shown, no console error, no network request, injected names stay text. Also: the advice
explanations are in the file, and their packaged copy is docs/advice.md."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT.parent / "shared" / "traces" / "hta_v100_ns"
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)"
)
PWNED = re.compile(r"<html[^>]*\sdata-pwned=")

CATCH = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push(String(e.message)); });
var __e = console.error; console.error = function () { window.__errors.push(Array.prototype.join.call(arguments, " ")); __e.apply(console, arguments); };
</script>"""

PROBE = """<script>
window.addEventListener("load", function () {
  var tls = Array.prototype.map.call(document.querySelectorAll(".timeline"), function (box) {
    var n = function (k) { return box.querySelectorAll("rect.ev-" + k).length; };
    return {kernel: n("kernel"), host_op: n("host_op"), boundaries: box.querySelectorAll(".step-boundary").length};
  });
  var detail = document.getElementById("step-detail");
  var before = detail.textContent;
  var bars = document.querySelectorAll(".step-bar");
  bars[bars.length - 1].dispatchEvent(new MouseEvent("click", {bubbles: true}));
  var afterBar = detail.textContent;
  var rows = document.querySelectorAll(".step-row");
  rows[0].click();
  var afterRow = detail.textContent;
  var btn = document.querySelector(".tl-tools button[data-zoom=in]");
  var total = document.querySelector(".timeline").querySelectorAll("rect.ev").length;
  btn.click();
  var zoomed = document.querySelector(".timeline").querySelectorAll("rect.ev").length;
  document.documentElement.setAttribute("data-test", JSON.stringify({
    timelines: tls, before: before, afterBar: afterBar, afterRow: afterRow, total: total, zoomed: zoomed,
    selected: document.querySelectorAll(".step-row.selected").length,
    resources: performance.getEntriesByType("resource").length, errors: window.__errors}));
});
</script>"""


def _probe(page: str, tmp_path: Path) -> tuple[dict, str]:
    harness = tmp_path / "harness.html"
    harness.write_text(page.replace("<head>", "<head>" + CATCH, 1).replace("</body>", PROBE + "</body>", 1))
    p = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            harness.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'data-test="([^"]*)"', p.stdout)
    assert m, "the probe did not run: " + p.stderr[-2000:]
    assert not [
        line
        for line in p.stderr.splitlines()
        if "CONSOLE" in line and ("Error" in line or "Uncaught" in line)
    ]
    return json.loads(html.unescape(m.group(1))), p.stdout


def _screenshot(path: Path) -> Path:
    shot = path.with_suffix(".png")
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1280,4000",
            f"--screenshot={shot}",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return shot


def _check_common(result: dict, zoom_may_be_empty: bool = False) -> None:
    assert result["errors"] == []
    assert result["resources"] == 0  # nothing fetched: no network, no external file
    assert "Select a step" in result["before"]
    assert result["afterBar"] != result["before"] and result["afterRow"] != result["afterBar"]
    assert result["selected"] == 1
    # Zooming in halves the window around the step's middle: a recorded trace always has events
    # there; a live step the OS paused in its middle (seen under load) may rightly show none.
    assert (0 if zoom_may_be_empty else 1) <= result["zoomed"] <= result["total"]
    assert all(t["boundaries"] >= 1 for t in result["timelines"])


@needs_chromium
def test_timeline_of_a_real_gpu_trace_has_the_steps_kernels(tmp_path):
    files = sorted(TRACE.glob("*.json.gz")) if TRACE.is_dir() else []
    if not files:
        pytest.skip(f"the real trace folder {TRACE} is not here")
    import gpuprof

    report = gpuprof.analyze(files[0])
    path = tmp_path / "gpu.html"
    report.to_html(path, trace=False)
    result, _ = _probe(path.read_text(), tmp_path)
    _check_common(result)
    views = report.to_dict()["step_views"]
    for drawn, tl in zip(result["timelines"], views["timelines"]):
        step_kernels = views["per_step"][str(tl["step"])]["kernels_count"]
        # Every kernel of the step is drawn (device events are kept first), and the kernel table's
        # calls over the span are the per-step counts added up.
        assert drawn["kernel"] == tl["counts"]["kernel"] == step_kernels > 0
    assert sum(v["kernels_count"] for v in views["per_step"].values()) == sum(
        r["calls"] for r in report.kernels
    )
    _screenshot(path)


def test_timeline_colours_are_the_breakdowns_categories():
    """The timeline colours each event as the breakdown counts it: in this NCCL job the host-side
    `nccl:all_reduce` / `nccl:broadcast` ranges are Communication (as in the step breakdown), as NCCL's
    kernels would be, the DataLoader's `__next__` ranges DataLoader, synchronisations Runtime, aten ops CPU
    Exec, copies Memcpy."""
    files = sorted(TRACE.glob("*.json.gz")) if TRACE.is_dir() else []
    if not files:
        pytest.skip(f"the real trace folder {TRACE} is not here")
    import gpuprof

    report = gpuprof.analyze(files[0])
    seen = {}
    for tl in report.to_dict()["step_views"]["timelines"]:
        for _lane, name, start_us, dur_us, category, kind in tl["events"]:
            seen.setdefault((kind, tl["names"][name]), set()).add(category)
            assert 0 <= start_us and dur_us >= 0
    assert all(len(cats) == 1 for cats in seen.values())
    cat = {key: next(iter(cats)) for key, cats in seen.items()}
    comm_ranges = [k for k in cat if k[0] == "user_range" and k[1].startswith("nccl:")]
    assert comm_ranges and all(cat[k] == "communication" for k in comm_ranges)
    kernels = [k for k in cat if k[0] == "kernel"]
    assert kernels and all(
        cat[k] == ("communication" if "nccl" in k[1].lower() else "kernel") for k in kernels
    )
    assert all(cat[k] == "dataloader" for k in cat if k[1].startswith("enumerate(DataLoader)#"))
    assert all(cat[k] == "runtime" for k in cat if k[0] == "sync")
    assert all(cat[k] == "memcpy" for k in cat if k[0] == "memcpy")
    ops = [k for k in cat if k[0] == "host_op" and k[1].startswith("aten::")]
    assert ops and all(cat[k] == "cpu_exec" for k in ops)
    assert report.average["communication_us"] > 0


@needs_chromium
def test_timeline_of_a_live_cpu_loop_has_the_steps_operators_and_names_stay_text(tmp_path):
    torch = pytest.importorskip("torch")
    import gpuprof

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hostile = "</script><img src=x onerror=\"document.documentElement.setAttribute('data-pwned',1)\">"
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(6):
            with gpuprof.range(hostile):
                loss = model(torch.randn(32, 64)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    report = prof.report()
    path = tmp_path / "cpu.html"
    report.to_html(path)
    page = path.read_text()
    assert "</script><img" not in page
    result, dom = _probe(page, tmp_path)
    _check_common(result, zoom_may_be_empty=True)
    assert not PWNED.search(dom)
    views = report.to_dict()["step_views"]
    for drawn, tl in zip(result["timelines"], views["timelines"]):
        assert tl["left_out"] == 0
        # Every host op is drawn; the step's operator count leaves out the inner half of a same-name
        # pair (aten::add_ inside aten::add_), as the operator table does.
        assert (
            drawn["host_op"]
            == tl["counts"]["host_op"]
            >= views["per_step"][str(tl["step"])]["operators_count"]
            > 0
        )
    # the span's operator table is the per-step counts added up
    assert sum(v["operators_count"] for v in views["per_step"].values()) == sum(
        r["calls"] for r in report.operators
    )
    _screenshot(path)


def test_packaged_advice_explanations_are_docs_advice_md():
    packaged = ROOT / "python" / "gpuprof" / "advice" / "advice.md"
    assert packaged.read_text() == (ROOT / "docs" / "advice.md").read_text(), (
        "copy docs/advice.md to python/gpuprof/advice/advice.md"
    )


def test_each_recommendation_embeds_its_explanation():
    from gpuprof.advice.explain import explanation
    from gpuprof.report.sections import md_to_html

    assert "DataLoader" in explanation("dataloader")
    out = md_to_html("a `<script>x</script>` and **<b>bold</b>**\n\n- item <i>")
    assert "<script>" not in out and "&lt;script&gt;" in out and "&lt;i&gt;" in out
    from report_samples import gpu_report

    page = gpu_report().to_html()
    rules = re.findall(r'<div class="advice" id="advice-(\w+)"', page)
    assert rules
    for rule in rules:
        assert f'<details class="explain" id="explain-{rule}">' in page
