"""`gpuprof check`: budgets for CI, on reports whose values are chosen here."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from report_samples import cpu_report_dict, with_gpu_sections

import gpuprof
from gpuprof.cli import main


def _write(tmp_path, name, data) -> str:
    path = tmp_path / name
    gpuprof.Report.from_dict(data).to_json(path)
    return str(path)


def _report(tmp_path, *, total_us=100_000.0, dataloader_pct=73.0, gpus=(71.5,), name="r.json"):
    """A report whose mean step is total_us with dataloader_pct of it in DataLoader, and one GPU
    per entry of ``gpus`` with that utilization."""
    d = with_gpu_sections(cpu_report_dict())
    d["average"].update(
        total_us=total_us, dataloader_pct=dataloader_pct, dataloader_us=total_us * dataloader_pct / 100
    )
    d["devices"] = [dict(d["devices"][0], id=i, utilization_pct=u) for i, u in enumerate(gpus)]
    return _write(tmp_path, name, d)


def test_broken_budget_exits_1_and_says_by_how_much(tmp_path, capsys):
    path = _report(tmp_path, dataloader_pct=73.0)
    assert main(["check", path, "--max", "dataloader_pct=5"]) == 1
    out = capsys.readouterr().out
    # 73 - 5 = 68 above the budget.
    assert "FAIL  dataloader_pct = 73, 68 above the maximum 5" in out
    assert "1 of 1 budgets broken" in out


def test_budgets_that_hold_exit_0(tmp_path, capsys):
    path = _report(tmp_path, dataloader_pct=3.0, gpus=(71.5,))
    assert main(["check", path, "--max", "dataloader_pct=5", "--min", "utilization_pct=60"]) == 0
    assert "all 2 budgets hold" in capsys.readouterr().out


def test_per_gpu_minimum_names_the_gpu_that_breaks_it(tmp_path, capsys):
    path = _report(tmp_path, gpus=(80.0, 40.0))
    assert main(["check", path, "--min", "utilization_pct=60"]) == 1
    out = capsys.readouterr().out
    assert "ok    utilization_pct (GPU 0) = 80" in out
    assert "FAIL  utilization_pct (GPU 1) = 40, 20 below the minimum 60" in out


def test_step_time_regression_against_a_baseline(tmp_path, capsys):
    base = _report(tmp_path, total_us=100_000.0, name="base.json")
    new = _report(tmp_path, total_us=115_000.0, name="new.json")
    # (115 - 100) / 100 = 15% slower: breaks a 10% budget, holds a 20% one.
    assert main(["check", new, "--baseline", base, "--max", "step_time_regression_pct=10"]) == 1
    assert "step_time_regression_pct = 15, 5 above the maximum 10" in capsys.readouterr().out
    assert main(["check", new, "--baseline", base, "--max", "step_time_regression_pct=20"]) == 0


def test_junit_xml_and_github_step_summary(tmp_path, monkeypatch, capsys):
    path = _report(tmp_path, dataloader_pct=73.0)
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit = tmp_path / "out" / "check.xml"
    rc = main(
        ["check", path, "--max", "dataloader_pct=5", "--max", "step_time_ms=1000", "--junit", str(junit)]
    )
    assert rc == 1
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert failed == ["dataloader_pct max 5"]
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, not overwritten
    assert (
        "### gpuprof check: 1 of 2 budgets broken" in text
        and "| ❌ | dataloader\\_pct | 73 | max 5 |" in text
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max", "dataloader_pct"], "--max 'dataloader_pct': write NAME=NUMBER"),
        (["--max", "dataloader_pct=lots"], "write NAME=NUMBER"),
        (["--max", "nonsense_pct=1"], "unknown metric 'nonsense_pct'; known here:"),
        (["--max", "step_time_regression_pct=10"], "add --baseline BASE"),
        ([], "no budget given"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    path = _report(tmp_path)
    assert main(["check", path, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_gpu_metric_on_a_cpu_report_is_explained(tmp_path, capsys):
    path = _write(tmp_path, "cpu.json", cpu_report_dict())
    assert main(["check", path, "--min", "utilization_pct=60"]) == 2
    assert "utilization_pct is a GPU metric and this report has no GPU summary" in capsys.readouterr().err


def test_an_mfu_budget_reads_the_flops_section(tmp_path, capsys):
    d = cpu_report_dict()
    d["flops"].update(mfu_pct=12.5, hfu_pct=13.0, tflops_per_s=0.04)
    path = _write(tmp_path, "mfu.json", d)
    assert main(["check", path, "--min", "mfu_pct=40"]) == 1
    # 40 - 12.5 = 27.5 below the budget
    assert "FAIL  mfu_pct = 12.5, 27.5 below the minimum 40" in capsys.readouterr().out
    assert main(["check", path, "--min", "mfu_pct=10", "--min", "tflops_per_s=0.01"]) == 0
    assert "all 2 budgets hold" in capsys.readouterr().out


def test_an_mfu_budget_on_a_report_without_a_peak_says_why(tmp_path, capsys):
    d = cpu_report_dict()
    d["flops"].update(mfu_pct=None, peak_tflops=None, note="no peak, so no MFU: pass it: --peak-tflops N")
    path = _write(tmp_path, "nopeak.json", d)
    assert main(["check", path, "--min", "mfu_pct=40"]) == 2
    err = capsys.readouterr().err
    assert "mfu_pct is not known for this report: no peak, so no MFU" in err and "--peak-tflops" in err
