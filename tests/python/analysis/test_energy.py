"""Energy per step (docs/metrics.md, "Energy") from hand-built traces whose NVML samples are chosen
here: NVML's energy counter where the device has it, power samples integrated where it does not, and
no number, never 0, where neither covers a step. Each expected joule is worked out beside it. The
same numbers survive the JSON report and gpuprof's own Chrome trace, reach `gpuprof check` and
`gpuprof scaling`, and a CPU-only report says nothing about energy."""

from __future__ import annotations

import gzip
import json

import pytest

import gpuprof
from gpuprof import _core_testing as builders
from gpuprof._native import _core
from gpuprof.analysis.ranks import summary_from_report
from gpuprof.analysis.scaling import run_row, scaling_table
from gpuprof.cli import main
from gpuprof.report.build import build_report
from gpuprof.report.json_schema import SCHEMA

MS = 1_000_000  # ns


def _steps(n=3, step_ms=100):
    """n steps of step_ms each from 0, each launching one 10 ms kernel on GPU 0 (no step is dropped
    as a trailing step without device work)."""
    t = _core.Trace()
    for i in range(n):
        start = i * step_ms * MS
        t.add_event("step", f"ProfilerStep#{i}", start, step_ms * MS)
        t.add_event("runtime", "cudaLaunchKernel", start + MS, 10_000, correlation=i + 1)
        builders.add_kernel(t, "k", start + 2 * MS, 10 * MS, device=0, correlation=i + 1)
    return t


def _counter_trace(watts=300, device=0, n=3):
    """The counter of a GPU drawing a steady `watts` (watts mJ per ms, from 1,000,000 mJ), read as a
    live session reads it: 20 us after every step boundary, and every 50 ms by the sampler."""
    t = _steps(n)
    times = sorted({b * 100 * MS + 20_000 for b in range(n + 1)} | {k * 50 * MS for k in range(2 * n + 1)})
    for ts in times:
        builders.add_gpu_sample(t, ts, device=device, energy_mj=1_000_000 + watts * ts // MS)
    return t


def _power_trace(device=0):
    """A GPU without the counter whose power ramps up 1 W per ms from 100 W at 0, sampled at 0, 70,
    170, 270 and 300 ms (not on the step boundaries)."""
    t = _steps(3)
    for ms in (0, 70, 170, 270, 300):
        builders.add_gpu_sample(t, ms * MS, device=device, power_mw=(100 + ms) * 1000, gpu_util_pct=50)
    return t


def test_the_counter_gives_each_steps_energy_mean_power_and_energy_per_sample():
    # 300 W over each 100 ms step: 30 J, 300 W; batch 64 (the DataLoader's): 30 / 64 = 0.46875 J.
    report = build_report(_counter_trace(), dataloaders=[{"batch_size": 64}])
    for s in report.steps:
        assert s["energy_j"] == pytest.approx(30.0)
        assert s["mean_power_w"] == pytest.approx(300.0)
        assert s["energy_per_sample_j"] == pytest.approx(0.46875)
        assert "device_energy_j" not in s  # one device: the step's energy is its
    avg = report.average
    assert (avg["energy_j"], avg["mean_power_w"], avg["energy_per_sample_j"]) == pytest.approx(
        (30.0, 300.0, 0.46875)
    )
    (row,) = report.data["energy"]
    assert row == {
        "device": 0,
        "method": "counter",
        "steps": 3,
        "energy_j": pytest.approx(90.0),
        "energy_per_step_j": pytest.approx(30.0),
        "mean_power_w": pytest.approx(300.0),
        "note": "",
    }
    # The samples keep the counter's readings, in joules.
    assert report.gpu_samples[0]["energy_counter_j"] == 1000.0


def test_without_a_counter_power_samples_are_integrated_by_the_trapezoid_rule():
    # Power 100 + t W (t in ms): linear in time, so the trapezoid rule is exact whatever the samples'
    # places: step [0, 100 ms) holds (100 + 200) / 2 W x 0.1 s = 15 J, [100, 200) 25 J, [200, 300)
    # 35 J; the mean step 25 J at 250 W. No batch size known (a trace): no energy per sample.
    report = build_report(_power_trace())
    assert [s["energy_j"] for s in report.steps] == pytest.approx([15.0, 25.0, 35.0])
    assert [s["mean_power_w"] for s in report.steps] == pytest.approx([150.0, 250.0, 350.0])
    assert all(s["energy_per_sample_j"] is None for s in report.steps)
    assert report.average["energy_j"] == pytest.approx(25.0)
    assert report.average["mean_power_w"] == pytest.approx(250.0)
    (row,) = report.data["energy"]
    assert row["method"] == "power"
    assert row["note"] == "no energy counter on this device"


def test_a_device_reporting_neither_has_no_energy_with_the_reason_never_zero():
    t = _steps(2)
    for ms in (0, 100, 200):
        builders.add_gpu_sample(t, ms * MS, device=0, gpu_util_pct=90)
    report = build_report(t)
    assert [s["energy_j"] for s in report.steps] == [None, None]
    assert report.average["energy_j"] is None and report.average["mean_power_w"] is None
    (row,) = report.data["energy"]
    assert row["method"] is None and row["energy_j"] is None and row["steps"] == 0
    assert "NVML reported neither its energy counter nor its power draw" in row["note"]
    text = str(report)
    assert "Energy: not measured" in text
    assert "GPU 0: not measured; 2 of 2 steps not measured" in text


def test_two_gpus_each_step_sums_them_and_keeps_each():
    # GPU 0: counter at 300 W, 30 J a step; GPU 1: the power ramp above, 15, 25 and 35 J.
    t = _counter_trace(watts=300, device=0)
    for ms in (0, 70, 170, 270, 300):
        builders.add_gpu_sample(t, ms * MS, device=1, power_mw=(100 + ms) * 1000)
    report = build_report(t)
    assert [s["energy_j"] for s in report.steps] == pytest.approx([45.0, 55.0, 65.0])
    assert report.steps[0]["device_energy_j"] == {"0": pytest.approx(30.0), "1": pytest.approx(15.0)}
    assert [r["method"] for r in report.data["energy"]] == ["counter", "power"]
    assert report.average["energy_j"] == pytest.approx(55.0)


def test_a_step_one_gpu_did_not_measure_has_no_sum():
    # GPU 1's power samples end at 50 ms: the last step [200, 300 ms) ends 250 ms after them (more
    # than the 200 ms a sample is held), so that step's sum is unknown, not GPU 0's part alone; GPU 0's
    # 30 J stays in device_energy_j, and the mean step is over the two steps both measured.
    t = _counter_trace(watts=300, device=0)
    for ms in (0, 50):
        builders.add_gpu_sample(t, ms * MS, device=1, power_mw=100_000)
    report = build_report(t)
    last = report.steps[2]
    assert last["energy_j"] is None and last["mean_power_w"] is None
    assert last["device_energy_j"] == {"0": pytest.approx(30.0), "1": None}
    # Steps 0 and 1: 30 J + 100 W x 0.1 s = 40 J each.
    assert report.average["energy_j"] == pytest.approx(40.0)
    gpu1 = report.data["energy"][1]
    assert gpu1["steps"] == 2 and gpu1["note"].startswith("1 of 3 steps not measured")


def test_the_text_markdown_and_html_reports_show_it_under_the_gpu_summary():
    report = build_report(_counter_trace(), dataloaders=[{"batch_size": 64}])
    line = "Energy: 30 J per step, mean power 300.0 W, 0.4688 J per sample"
    text = str(report)
    assert line in text and "GPU 0: 30 J per step, 300.0 W (NVML energy counter, 3 steps)" in text
    assert text.index("GPU summary") < text.index(line)
    md = report.to_markdown()
    assert "### Energy" in md and line in md
    assert md.index("### GPU summary") < md.index("### Energy")
    html = report.to_html()
    assert '<ul id="energy">' in html and line in html
    assert html.index("<h2>GPU summary</h2>") < html.index('<ul id="energy">')


def test_a_cpu_only_report_says_nothing_about_energy():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(16, 4)
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(2):
            model(torch.randn(8, 16)).sum().backward()
            prof.step()
    report = prof.report()
    data = report.to_dict()
    assert "energy" not in data
    assert all("energy_j" not in s for s in data["steps"]) and "energy_j" not in data["average"]
    for out in (str(report), report.to_markdown()):
        assert "Energy" not in out and "J per step" not in out
    html = report.to_html()
    assert 'id="energy"' not in html and "J per step" not in html


def test_the_json_report_and_gpuprofs_chrome_trace_keep_it(tmp_path):
    report = build_report(_counter_trace(), dataloaders=[{"batch_size": 64}])
    path = tmp_path / "r.json"
    report.to_json(path)
    saved = json.loads(path.read_text())
    assert saved["schema_version"] == 4
    assert [s["energy_j"] for s in saved["steps"]] == pytest.approx([30.0] * 3)
    again = gpuprof.Report.load(path)
    assert again.average["energy_per_sample_j"] == pytest.approx(0.46875)
    assert "Energy: 30 J per step" in str(again)
    # The Chrome trace beside it carries the NVML samples (Kineto's format has no place for them),
    # and a power counter track a trace viewer draws; read back, the steps have the same energy.
    trace_file = tmp_path / "r.trace.json.gz"
    exported = json.loads(gzip.decompress(trace_file.read_bytes()))
    assert exported["gpuprofGpuSamples"][0] == {"ts_ns": 0, "device": 0, "energy_mj": 1_000_000}
    reread = gpuprof.analyze(trace_file)
    assert [s["energy_j"] for s in reread.steps] == pytest.approx([30.0] * 3)
    assert reread.data["energy"][0]["method"] == "counter"
    power = build_report(_power_trace())
    power.to_json(tmp_path / "p.json")
    events = json.loads(gzip.decompress((tmp_path / "p.trace.json.gz").read_bytes()))["traceEvents"]
    track = [e for e in events if e.get("ph") == "C" and e["name"] == "GPU 0 Power"]
    assert [e["args"]["power W"] for e in track] == [100.0, 170.0, 270.0, 370.0, 400.0]
    assert [s["energy_j"] for s in gpuprof.analyze(tmp_path / "p.trace.json.gz").steps] == pytest.approx(
        [15.0, 25.0, 35.0]
    )


def test_the_report_validates_against_the_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    t = _counter_trace(device=0)
    for ms in (0, 70, 170, 270, 300):
        builders.add_gpu_sample(t, ms * MS, device=1, power_mw=(100 + ms) * 1000)
    jsonschema.validate(build_report(t, dataloaders=[{"batch_size": 8}]).to_dict(), SCHEMA)


def test_check_gates_energy_per_step_and_says_why_it_cannot(tmp_path, capsys):
    path = tmp_path / "r.json"
    build_report(_counter_trace(), dataloaders=[{"batch_size": 64}]).to_json(path, trace=False)
    assert main(["check", str(path), "--max", "energy_per_step_j=25"]) == 1
    assert "FAIL  energy_per_step_j = 30, 5 above the maximum 25" in capsys.readouterr().out
    assert main(["check", str(path), "--max", "energy_per_step_j=40", "--max", "mean_power_w=350"]) == 0
    assert main(["check", str(path), "--max", "energy_per_sample_j=0.5"]) == 0
    capsys.readouterr()
    no_batch = tmp_path / "trace_report.json"
    build_report(_counter_trace()).to_json(no_batch, trace=False)
    assert main(["check", str(no_batch), "--max", "energy_per_sample_j=1"]) == 2
    assert "needs the batch size" in capsys.readouterr().err
    cpu = tmp_path / "cpu.json"
    build_report(_steps(2)).to_json(cpu, trace=False)
    assert main(["check", str(cpu), "--max", "energy_per_step_j=1"]) == 2
    assert "this report has no energy measurement" in capsys.readouterr().err


def _rank_report(rank, world, watts, batch=32):
    info = {
        "rank": rank,
        "local_rank": rank,
        "world_size": world,
        "hostname": "node0",
        "backend": "nccl",
        "device": f"cuda:{rank}",
        "batch_size": batch,
    }
    return build_report(_counter_trace(watts=watts, device=rank), rank=info).to_dict()


def test_scaling_shows_the_jobs_energy_per_step_and_per_sample(tmp_path, capsys):
    # One rank at 300 W: 30 J a step, batch 32: 0.9375 J a sample. Two ranks at 250 and 350 W:
    # each rank's row keeps its own (25 J, 35 J), the job's step is 60 J for a global batch of 64:
    # 0.9375 J a sample.
    one = _rank_report(0, 1, 300)
    assert one["ranks"][0]["energy_j"] == pytest.approx(30.0)
    assert one["ranks"][0]["energy_per_sample_j"] == pytest.approx(0.9375)
    two_ranks = [_rank_report(r, 2, w) for r, w in ((0, 250), (1, 350))]
    summaries = [summary_from_report(d, rank_info=d["distributed"]) for d in two_ranks]
    two = build_report(analysed=two_ranks[0], rank_summaries=summaries).to_dict()
    assert [r["energy_j"] for r in two["ranks"]] == pytest.approx([25.0, 35.0])
    rows = scaling_table([run_row(one, label="w1"), run_row(two, label="w2")])
    assert [r["energy_per_step_j"] for r in rows] == pytest.approx([30.0, 60.0])
    assert [r["energy_per_sample_j"] for r in rows] == pytest.approx([0.9375, 0.9375])
    # A job one of whose ranks has no energy gives none: a part of the job is not the job's energy.
    partial = json.loads(json.dumps(two))
    partial["ranks"][1]["energy_j"] = None
    assert run_row(partial)["energy_per_step_j"] is None
    (tmp_path / "w1.json").write_text(json.dumps(one))
    (tmp_path / "w2.json").write_text(json.dumps(two))
    assert main(["scaling", str(tmp_path / "w1.json"), str(tmp_path / "w2.json")]) == 0
    out = capsys.readouterr().out
    assert "energy J/step" in out and "energy J/sample" in out and "0.9375" in out
    assert main(["check", str(tmp_path / "w1.json"), "--max", "energy_per_step_j=31"]) == 0


def test_a_boundary_reading_without_nvml_does_nothing():
    # On this machine NVML is absent (or the session holds no sampler): the step-boundary reading is
    # a no-op, and a drained trace gets no sample from it.
    status = _core.gpu_start([])
    for _ in range(3):
        _core.gpu_sample_energy()
    t = _core.Trace()
    _core.gpu_drain(t)
    _core.gpu_release()
    if status["nvml"]:
        pytest.skip("NVML runs here: tests/gpu covers the readings")
    assert _core.gpu_samples(t) == []
