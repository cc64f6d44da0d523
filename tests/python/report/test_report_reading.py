"""A report a person reads: the tables as attributes, the trace beside every written report, the
repr in ms, and the package's one-way data flow (advice never imports report/)."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[3] / "python" / "gpuprof"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_advice_and_analysis_never_import_report():
    # collect -> store -> analyse -> advise -> report: nothing upstream points back at report/.
    for path in list((PKG / "advice").glob("*.py")) + list((PKG / "analysis").glob("*.py")):
        bad = [m for m in _imports(path) if "report" in m]
        assert not bad, f"{path.name} imports {bad}"
    for path in (PKG / "analysis").glob("*.py"):
        assert not [m for m in _imports(path) if "advice" in m]


@pytest.fixture(scope="module")
def live_report():
    torch = pytest.importorskip("torch")
    import gpuprof

    model = torch.nn.Linear(32, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(3):
            loss = model(torch.randn(16, 32)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return prof.report()


def test_tables_are_attributes(live_report):
    d = live_report.to_dict()
    assert live_report.operators == d["operators"] and live_report.operators
    assert any(r["name"] == "aten::addmm" for r in live_report.operators)
    assert live_report.kernels == d["kernels"] == []  # CPU only: no kernels
    assert live_report.memory == d["memory"]


def test_repr_uses_a_readable_unit(live_report):
    from gpuprof.report.model import fmt_duration_us

    assert fmt_duration_us(200220.5) == "200.2 ms" and fmt_duration_us(3.2e6) == "3.2 s"
    assert fmt_duration_us(850) == "850 us"
    assert " us," not in repr(live_report) or live_report.average["total_us"] < 1000


def test_cpu_only_tables_hide_device_columns(live_report):
    text = live_report.to_text(width=120)
    assert "device total" not in text and "device self" not in text
    assert "device total" not in live_report.to_markdown()


def test_trace_is_written_beside_the_report(tmp_path, live_report):
    import gpuprof

    live_report._data["source"].pop("trace_path", None)
    live_report.to_html(tmp_path / "run.html")
    trace = tmp_path / "run.trace.json.gz"
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert live_report.trace_path == str(trace)
    for text in (live_report.to_text(), live_report.to_markdown(), (tmp_path / "run.html").read_text()):
        assert "ui.perfetto.dev" in text and "run.trace.json.gz" in text and "chrome://tracing" in text
    # written once: the JSON beside it names the same trace
    live_report.to_json(tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())["source"]["trace_path"] == str(trace)
    assert not (tmp_path / "run.trace.json.gz.trace.json.gz").exists()
    # trace=False writes none; a loaded report has no trace to write
    loaded = gpuprof.Report.load(tmp_path / "run.json")
    loaded._data["source"].pop("trace_path")
    loaded.to_html(tmp_path / "again.html")
    assert not (tmp_path / "again.trace.json.gz").exists()


def test_about_shows_dates_not_unix_seconds(live_report):
    html = live_report.to_html()
    assert "UTC" in html and "source created unix" not in html


def test_terminal_tables_keep_calls_and_host_total_at_80_columns(live_report):
    text = live_report.to_text(width=80, color=False)
    block = text[text.index("Operators") :]
    header = block.splitlines()[1]
    assert "calls" in header and "host total" in header
    assert all(len(line) <= 80 for line in text.splitlines())
    # a long name is elided, its numbers are not
    long = dict(live_report.operators[0], name="x" * 300)
    from gpuprof.report.text import fit_columns

    cols = ["name", "calls", "host_self_us", "host_total_us", "tc_eligible"]
    kept = fit_columns(cols, {c: c for c in cols}, [long], 60)
    assert kept[0] == "name" and "calls" in kept and "host_total_us" in kept
