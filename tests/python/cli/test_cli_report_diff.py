"""`gpuprof report` and `gpuprof diff` on saved reports; errors are one line, exit 2."""

from __future__ import annotations

import copy
import json

import pytest
from report_samples import cpu_report_dict, with_gpu_sections

import gpuprof
from gpuprof.cli import main


def _save(tmp_path, name, data):
    path = tmp_path / name
    gpuprof.Report.from_dict(data).to_json(path)
    return str(path)


@pytest.mark.parametrize(
    "fmt, marker",
    [
        ("text", "gpuprof step breakdown"),
        ("md", "## gpuprof report"),
        ("html", "<!DOCTYPE html>"),
        ("json", '"schema_version": 4'),
    ],
)
def test_report_formats(tmp_path, capsys, fmt, marker):
    path = _save(tmp_path, "report.json", cpu_report_dict())
    assert main(["report", str(tmp_path), "--format", fmt]) == 0  # a folder holding report.json
    assert marker in capsys.readouterr().out
    out = tmp_path / f"out.{fmt}"
    assert main(["report", path, "--format", fmt, "-o", str(out)]) == 0
    assert marker in out.read_text()


def test_output_format_follows_the_suffix(tmp_path):
    path = _save(tmp_path, "report.json", cpu_report_dict())
    assert main(["report", path, "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().lstrip().startswith("<!DOCTYPE html>")
    assert main(["report", path, "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("## gpuprof report")


def test_report_errors(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": []}))
    (tmp_path / "future.json").write_text(json.dumps({"schema_version": 99, "steps": []}))
    (tmp_path / "empty").mkdir()
    cases = [
        (tmp_path / "missing.json", "no such file or folder"),
        (tmp_path / "bad.json", "is not valid JSON (line 1, column 2"),
        (tmp_path / "trace.json", "run `gpuprof analyze` on it"),
        (tmp_path / "future.json", "schema_version 99 is not one this gpuprof"),
        (tmp_path / "empty", "is a folder without report.json"),
    ]
    for path, message in cases:
        assert main(["report", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_diff_categories_and_kernels(tmp_path, capsys):
    base = with_gpu_sections(cpu_report_dict())
    new = copy.deepcopy(base)
    # Chosen changes: the mean step goes 100 ms -> 80 ms because DataLoader falls 60 -> 40 ms;
    # kernel_1 (600 us) doubles, kernel_6 disappears, a new kernel appears.
    for d, total, dl in ((base, 100_000.0, 60_000.0), (new, 80_000.0, 40_000.0)):
        d["average"].update(total_us=total, dataloader_us=dl, dataloader_pct=100 * dl / total)
    new["kernels"] = [
        dict(k, total_us=1200.0) if k["name"] == "kernel_1" else k
        for k in new["kernels"]
        if k["name"] != "kernel_6"
    ]
    new["kernels"].append({"name": "fresh_kernel", "calls": 1, "total_us": 50.0})
    b, n = _save(tmp_path, "base.json", base), _save(tmp_path, "new.json", new)
    assert main(["diff", b, n]) == 0
    out = capsys.readouterr().out
    assert "mean step time: 100.000 ms -> 80.000 ms (-20.0%)" in out
    assert "DataLoader      60,000.0      40,000.0     -20,000.0     60.0     50.0" in out
    lines = out.split("GPU kernels")[1].splitlines()[1:4]
    # Largest changes first: +600 (kernel_1), -100 (kernel_6, gone), +50 (fresh_kernel, new).
    assert "+600.0 us" in lines[0] and "kernel_1" in lines[0]
    assert "-100.0 us" in lines[1] and "kernel_6 [gone]" in lines[1]
    assert "+50.0 us" in lines[2] and "fresh_kernel [new]" in lines[2]
    assert main(["diff", b, n, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "**Mean step time: 100.000 ms → 80.000 ms (-20.0%)**" in md
    assert "| kernel\\_1 | 600.0 | 1,200.0 | +600.0 |  |" in md


def test_diff_of_cpu_reports_has_no_kernel_section(tmp_path, capsys):
    b = _save(tmp_path, "a.json", cpu_report_dict())
    assert main(["diff", b, b]) == 0
    out = capsys.readouterr().out
    assert "(+0.0%)" in out and "GPU kernels" not in out


def _timed_report(path, step_ms: float, batch_size):
    """A saved report of 3 steps of ``step_ms`` of one operator, run with ``batch_size`` samples per
    step (its DataLoader's, as a live report holds it)."""
    from gpuprof._native import _core
    from gpuprof.report.build import build_report

    t = _core.Trace()
    for i in range(3):
        start = i * 100_000_000
        t.add_event("step", f"ProfilerStep#{i}", start, int(step_ms * 1e6))
        t.add_event("host_op", "aten::mm", start, int(step_ms * 1e6))
    loader = {"iterator": "_SingleProcessDataLoaderIter", "dataset": "TensorDataset", "dataset_length": 1024}
    loader |= {"batch_size": batch_size, "num_workers": 0, "pin_memory": False, "prefetch_factor": None}
    build_report(t, dataloaders=[loader]).to_json(path, trace=False)
    return path


def test_diff_of_runs_with_other_batch_sizes_compares_per_sample(tmp_path, capsys):
    # 20 ms for 32 samples, then 31.1 ms for 64: +55.5% a step, but 0.625 -> 0.486 ms a sample
    # (-22.2%): the larger batch made each sample faster.
    base = str(_timed_report(tmp_path / "b32.json", 20.0, 32))
    new = str(_timed_report(tmp_path / "b64.json", 31.1, 64))

    def diff(*args) -> str:
        assert main(["diff", *args]) == 0
        return capsys.readouterr().out

    text = diff(base, new)
    assert "20.000 ms -> 31.100 ms (+55.5%)" in text
    assert (
        "batch size changed: 32 -> 64 samples per step, so the step times do not compare; "
        "per sample: 0.625 ms -> 0.486 ms (-22.2%)" in text
    ), text
    d = json.loads(diff(base, new, "-f", "json"))
    assert d["batch_size"] == {"base": 32, "new": 64}
    assert d["sample_time_us"]["base"] == pytest.approx(625.0)
    assert d["sample_time_us"]["new"] == pytest.approx(31100 / 64)
    assert "**Batch size changed: 32 -> 64" in diff(base, new, "-f", "md")
    # The same batch size: nothing said, nothing added.
    same = str(_timed_report(tmp_path / "b32b.json", 31.1, 32))
    d = json.loads(diff(base, same, "-f", "json"))
    assert "batch_size" not in d and "sample_time_us" not in d
    assert "batch size" not in diff(base, same)


def _run_report(path, steps: int, ops_per_step: dict[str, int]):
    """A saved report of ``steps`` steps of 1 ms, each calling every operator of ``ops_per_step``
    that many times, one after the other; an operator named aten::X launches one kernel X_kernel
    (none for aten::dropout, which runs on the host only here)."""
    from gpuprof._native import _core
    from gpuprof.report.build import build_report

    t = _core.Trace()
    corr = 0
    for i in range(steps):
        start = i * 1_000_000
        t.add_event("step", f"ProfilerStep#{i}", start, 1_000_000)
        at = start + 1_000
        for name, calls in ops_per_step.items():
            for _ in range(calls):
                t.add_event("host_op", name, at, 10_000, tid=1)
                if name != "aten::dropout":
                    corr += 1
                    t.add_event("runtime", "cudaLaunchKernel", at + 1_000, 2_000, correlation=corr, tid=1)
                    kernel = name.split("::")[1] + "_kernel"
                    t.add_event("kernel", kernel, at + 5_000, 3_000, correlation=corr, device=0, tid=7)
                at += 20_000
    build_report(t).to_json(path, trace=False)
    return str(path)


def test_diff_puts_kernels_and_operators_in_htas_categories_by_calls_per_step(tmp_path, capsys):
    # The base profiled 2 steps, the new run 4: mm's 4 calls then 8 are 2 a step either way
    # (unchanged); relu goes 1 -> 2 a step (increased), add 2 -> 1 (decreased), dropout is gone
    # (removed), gelu is new (added). Each operator's kernel follows it; dropout has none.
    base = _run_report(
        tmp_path / "base.json", 2, {"aten::mm": 2, "aten::relu": 1, "aten::add": 2, "aten::dropout": 1}
    )
    new = _run_report(
        tmp_path / "new.json", 4, {"aten::mm": 2, "aten::relu": 2, "aten::add": 1, "aten::gelu": 1}
    )
    assert main(["diff", base, new, "-f", "json"]) == 0
    d = json.loads(capsys.readouterr().out)

    def names(key, change):
        return [r["name"] for r in d["calls"][key][change]["rows"]]

    ops = d["calls"]["operators"]
    assert names("operators", "added") == ["aten::gelu"]
    assert names("operators", "removed") == ["aten::dropout"]
    assert names("operators", "increased") == ["aten::relu"]
    assert names("operators", "decreased") == ["aten::add"]
    assert names("operators", "unchanged") == ["aten::mm"]
    assert ops["increased"]["rows"][0] == {
        "name": "aten::relu",
        "base_calls_per_step": 1.0,
        "new_calls_per_step": 2.0,
    }
    assert {c: ops[c]["count"] for c in ops} == dict.fromkeys(ops, 1)
    kernels = d["calls"]["kernels"]
    assert names("kernels", "added") == ["gelu_kernel"]
    assert kernels["removed"]["count"] == 0  # dropout launched nothing
    assert names("kernels", "increased") == ["relu_kernel"]
    assert names("kernels", "decreased") == ["add_kernel"]
    assert names("kernels", "unchanged") == ["mm_kernel"]

    assert main(["diff", base, new]) == 0
    text = capsys.readouterr().out
    assert "Operators by calls per step: 1 added, 1 removed, 1 increased, 1 decreased, 1 unchanged" in text
    assert "  increased           1 -> 2           aten::relu" in text
    assert "  removed             1 -> 0           aten::dropout" in text
    assert main(["diff", base, new, "-f", "md"]) == 0
    md = capsys.readouterr().out
    assert (
        "**GPU kernels by calls per step: 1 added, 0 removed, 1 increased, 1 decreased, 1 unchanged**" in md
    )
    assert "- added: gelu\\_kernel (0 → 1)" in md
