"""The critical path where a user sees it: the Chrome export's "Critical path" track (a process of
its own, one complete event per piece) and the HTML timeline's band over each drawn step, on a
stored GPU trace (skipped without ../shared) and a live CPU loop. The pieces of a step, with those
left out past the bound, make the step's length."""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)"
)
CAUSES = {
    "cpu_bound",
    "data_loading",
    "gpu_compute_bound",
    "gpu_communication_bound",
    "gpu_kernel_kernel_overhead",
    "gpu_kernel_launch_overhead",
}


def _stored_trace(shared_traces: Path) -> Path:
    """The V100 sample (the ``shared_traces`` fixture skips without ../shared)."""
    return sorted((shared_traces / "hta_v100_ns").glob("*.json.gz"))[0]


def test_chrome_export_has_the_critical_path_track(tmp_path, shared_traces):
    import gpuprof

    report = gpuprof.analyze(_stored_trace(shared_traces))
    out = tmp_path / "t.trace.json.gz"
    gpuprof.export_chrome_trace(report.trace, out)
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    meta = {e["name"]: e["args"] for e in events if e.get("ph") == "M" and e.get("pid") == "Critical path"}
    assert meta["process_name"] == {"name": "Critical path"}
    assert meta["process_sort_index"]["sort_index"] < 0  # above the host and device processes
    pieces = [e for e in events if e.get("cat") == "gpuprof_critical_path"]
    by_step = defaultdict(list)
    for e in pieces:
        assert e["ph"] == "X" and e["pid"] == "Critical path" and e["tid"] == "steps"
        assert e["args"]["cause"] in CAUSES
        assert (
            e["name"].startswith(e["args"]["cause"] + ": ") and len(e["name"]) > len(e["args"]["cause"]) + 2
        )
        by_step[e["args"]["step"]].append(e)
    steps = report.to_dict()["critical_path"]["steps"]
    cut_steps = 0
    assert steps and sorted(by_step) == sorted(s["step"] for s in steps)
    for s in steps:
        mine = sorted(by_step[s["step"]], key=lambda e: e["ts"])
        head = mine[0]["args"]
        assert head["step pieces"] == len(mine) <= 2000
        # Pieces meet end to start (times in microseconds with three decimals: integer ns), unless
        # the step had more than 2,000 and the shortest were left out.
        meet = [round((a["ts"] + a["dur"]) * 1000) == round(b["ts"] * 1000) for a, b in zip(mine, mine[1:])]
        assert all(meet) if head["cut"] == 0 else len(mine) == 2000 and head["cut us"] > 0
        cut_steps += head["cut"] > 0
        total_ns = sum(round(e["dur"] * 1000) for e in mine) + round(head["cut us"] * 1000)
        assert total_ns == round(s["length_us"] * 1000)
    # This trace's steps run through thousands of kernels, each with the gap before it: past the
    # bound, so what was left out is counted.
    assert cut_steps > 0
    # Reading the export back leaves the track out: the same steps, the same critical path.
    again = gpuprof.analyze(out)
    assert again.to_dict()["critical_path"] == report.to_dict()["critical_path"]


def test_drawn_steps_carry_their_critical_path(shared_traces):
    import gpuprof

    report = gpuprof.analyze(_stored_trace(shared_traces))
    data = report.to_dict()
    lengths = {s["step"]: s["length_us"] for s in data["critical_path"]["steps"]}
    timelines = data["step_views"]["timelines"]
    assert timelines
    for tl in timelines:
        cp = tl["critical_path"]
        assert 0 < len(cp["pieces"]) <= 2000 and cp["merged"] >= 0
        assert {p[2] for p in cp["pieces"]} <= CAUSES
        # Each name and place once, every one used.
        assert sorted({p[3] for p in cp["pieces"]}) == list(range(len(cp["names"]))) and len(
            set(cp["names"])
        ) == len(cp["names"])
        assert sorted({p[4] for p in cp["pieces"]}) == list(range(len(cp["places"])))
        # The V100 steps are kernel-bound: the path runs through the step's kernels on their streams.
        kernels = {tl["names"][e[1]] for e in tl["events"] if e[5] == "kernel"}
        assert any(n in kernels for n in cp["names"]) and any(w.startswith("GPU ") for w in cp["places"])
        if cp["cut"] == 0:
            assert cp["pieces"][0][0] == 0
            for a, b in zip(cp["pieces"], cp["pieces"][1:]):
                assert a[0] + a[1] == pytest.approx(b[0], abs=1e-6)
        drawn = sum(p[1] for p in cp["pieces"]) + cp["cut_us"]
        assert drawn == pytest.approx(lengths[tl["step"]], abs=1e-3)
        assert drawn == pytest.approx(tl["total_us"], abs=1e-3)


PROBE = """<script>
window.addEventListener("load", function () {
  var tls = Array.prototype.map.call(document.querySelectorAll(".timeline"), function (box) {
    var rects = box.querySelectorAll("rect.cp");
    var titles = Array.prototype.map.call(rects, function (r) { return r.textContent; });
    return {pieces: rects.length, titles: titles};
  });
  document.documentElement.setAttribute("data-test", JSON.stringify({timelines: tls}));
});
</script>"""


def _probe(page: str, tmp_path: Path) -> dict:
    harness = tmp_path / "harness.html"
    harness.write_text(page.replace("</body>", PROBE + "</body>", 1))
    p = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
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
    assert not re.search(r"<html[^>]*\sdata-pwned=", p.stdout)
    return json.loads(html.unescape(m.group(1)))


@needs_chromium
def test_html_timeline_draws_the_critical_path_band(tmp_path, shared_traces):
    import gpuprof

    report = gpuprof.analyze(_stored_trace(shared_traces))
    path = tmp_path / "gpu.html"
    report.to_html(path, trace=False)
    page = path.read_text()
    assert "critical path: " in page  # the causes' legend
    result = _probe(page, tmp_path)
    timelines = report.to_dict()["step_views"]["timelines"]
    # Every piece is drawn at full zoom, one rect each, its title naming it and its cause.
    assert [t["pieces"] for t in result["timelines"]] == [
        len(t["critical_path"]["pieces"]) for t in timelines
    ]
    for drawn, tl in zip(result["timelines"], timelines):
        for title, piece in zip(drawn["titles"], tl["critical_path"]["pieces"]):
            name, place = tl["critical_path"]["names"][piece[3]], tl["critical_path"]["places"][piece[4]]
            assert title.startswith(name + " \u2014 ") and "critical path, " in title
            assert title.endswith(f" ({place})") if place else not title.endswith(")")


@needs_chromium
def test_html_critical_path_names_stay_text(tmp_path):
    torch = pytest.importorskip("torch")
    import gpuprof

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hostile = "</script><img src=x onerror=\"document.documentElement.setAttribute('data-pwned',1)\">"
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(6):
            with gpuprof.range(hostile):
                # Host time inside the range and outside any operator: on the path under its name.
                sum(i * i for i in range(20000))
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
    timelines = report.to_dict()["step_views"]["timelines"]
    names = {tl["critical_path"]["names"][p[3]] for tl in timelines for p in tl["critical_path"]["pieces"]}
    assert hostile in names
    result = _probe(page, tmp_path)
    titles = [t for tl in result["timelines"] for t in tl["titles"]]
    assert any(t.startswith(hostile + " \u2014 ") for t in titles)  # drawn as text, not markup
