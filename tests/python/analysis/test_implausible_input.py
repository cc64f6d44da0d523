"""Implausible input is said, not reported as fact (docs/metrics.md, "Implausible input"): each
trace below holds one thing that cannot be true, goes through `gpuprof analyze` as a user runs it,
and the report says what it found, with the count, in its warnings (JSON, text, Markdown, HTML),
while the numbers stay those of the plausible rest. Each of these traces was reported as fact before
(occupancy 500%, a 0.010 ms mean step, a 1000 s step, 512 TiB on a 16 GiB GPU, two "step 1")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.report.build import build_report
from gpuprof.report.model import Report

T0 = 1_700_000_000_000_000  # us since the epoch, as Kineto writes them
STEP_US = 10_000
GPU = {"id": 0, "name": "GPU", "numSms": 80, "totalGlobalMem": 16 * 2**30, "computeMajor": 8}


def event(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def trace(occupancy: float = 50.0, steps: int = 3) -> dict:
    """Three 9.9 ms steps; each: aten::mm 1 ms whose cudaLaunchKernel (10 us) runs a 5 ms gemm."""
    events = []
    for i in range(steps):
        t = T0 + i * STEP_US
        kernel_args = {"correlation": i + 1, "device": 0, "stream": 7, "grid": [80, 1, 1]}
        kernel_args.update({"block": [256, 1, 1], "est. achieved occupancy %": occupancy})
        events += [
            event("user_annotation", f"ProfilerStep#{i + 1}", t, STEP_US - 100),
            event("cpu_op", "aten::mm", t + 10, 1000),
            event("cuda_runtime", "cudaLaunchKernel", t + 20, 10, correlation=i + 1),
            event("kernel", "gemm", t + 100, 5000, pid=0, tid=7, **kernel_args),
        ]
    return {"traceEvents": events, "deviceProperties": [GPU]}


def analyze(tmp_path: Path, name: str, data: dict) -> tuple[dict, str]:
    """`gpuprof analyze FILE --json OUT` as a user runs it: (the report dict, the text printed)."""
    path = tmp_path / name
    path.write_text(json.dumps(data))
    out = tmp_path / (name + ".report.json")
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return json.loads(out.read_text()), p.stdout


def warning(report: dict, kind: str) -> dict:
    rows = [w for w in report["warnings"] if w["kind"] == kind]
    assert len(rows) == 1, report["warnings"]
    return rows[0]


def shown_everywhere(report: dict, message: str, tmp_path: Path) -> None:
    r = Report(report)
    assert message in r.to_text(color=False, width=400)
    assert message in r.to_markdown()
    html = r.to_html(tmp_path / "r.html")
    assert 'id="warnings"' in html and message.replace("'", "&#39;") in html


def test_a_plausible_trace_has_no_warning(tmp_path):
    report, _ = analyze(tmp_path, "ok.json", trace())
    assert report["warnings"] == []
    assert [s["total_us"] for s in report["steps"]] == [9900.0] * 3


def test_occupancy_above_100_percent_is_taken_as_100_with_a_warning(tmp_path):
    report, _ = analyze(tmp_path, "occ.json", trace(occupancy=500.0))
    (device,) = report["devices"]
    assert device["achieved_occupancy_pct"] == 100.0  # was 500.0
    assert report["kernels"][0]["mean_occupancy_pct"] == 100.0
    w = warning(report, "occupancy_over_100")
    assert w["count"] == 3 and "(up to 500%): taken as 100%" in w["message"]
    shown_everywhere(report, w["message"], tmp_path)


def test_one_nanosecond_timestamp_does_not_switch_the_file_to_nanoseconds(tmp_path):
    # An event with a 1.7e18 timestamp first in a file of microseconds: it made every time in the
    # file 1000x shorter (3 steps of 0.010 ms). It is skipped and counted; steps stay 9.9 ms.
    data = trace()
    data["traceEvents"].insert(0, event("cpu_op", "aten::zero_", 1.7e18, 1))
    report, _ = analyze(tmp_path, "ns_first.json", data)
    assert [s["total_us"] for s in report["steps"]] == [9900.0] * 3
    assert report["source"]["time_unit"] == "us"
    w = warning(report, "timestamp_unit")
    assert w["count"] == 1 and "timestamp in nanoseconds in a microsecond trace" in w["message"]
    shown_everywhere(report, w["message"], tmp_path)


def test_a_file_of_nanoseconds_is_still_read_as_nanoseconds(tmp_path):
    data = trace()
    for e in data["traceEvents"]:
        e["ts"] *= 1000
        e["dur"] *= 1000
    report, _ = analyze(tmp_path, "ns.json", data)
    assert report["source"]["time_unit"] == "ns"
    assert [s["total_us"] for s in report["steps"]] == [9900.0] * 3
    assert report["warnings"] == []


def test_a_kernel_shifted_1000_s_by_clock_skew_does_not_make_a_1000_s_step(tmp_path):
    data = trace()
    data["traceEvents"][-1]["ts"] += 1000 * 10**6  # step 3's kernel
    report, _ = analyze(tmp_path, "skew.json", data)
    assert [s["total_us"] for s in report["steps"]] == [9900.0] * 3  # step 3 was 1,000,005,100 us
    w = warning(report, "clock_skew")
    assert w["count"] == 1 and "up to 1,000.0 s after" in w["message"]
    assert report["step_rules"]["skewed_device_events"] == 1
    shown_everywhere(report, w["message"], tmp_path)


def test_memory_above_the_device_is_flagged(tmp_path):
    data = trace()
    levels = {"Total Reserved": 2**50, "Total Allocated": 2**49, "Bytes": 2**49}
    sample = {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1}
    sample.update(ts=T0 + 50, args={**levels, "Device Type": 1, "Device Id": 0, "Addr": 1})
    data["traceEvents"].append(sample)
    report, text = analyze(tmp_path, "mem.json", data)
    w = warning(report, "memory_over_capacity")
    assert w["count"] == 1
    assert "above GPU 0's memory (up to 1,048,576.0 GiB of 16.0 GiB)" in w["message"]
    assert "above the device's memory: implausible" in text
    # No advice reads it as a fact ("Peak device memory is 3276800% of the GPU's" before).
    assert not [a for a in report["advice"] if a["rule"] == "memory_capacity"]
    shown_everywhere(report, w["message"], tmp_path)


def test_a_malformed_step_number_is_reported_not_a_second_step_1(tmp_path):
    data = trace()
    data["traceEvents"][4]["name"] = "ProfilerStep#abc\x1b]0;pwned\x07"  # step 2's marker, hostile
    report, text = analyze(tmp_path, "badstep.json", data)
    assert [s["step"] for s in report["steps"]] == [1, 2, 3]  # was 1, 1, 3
    w = warning(report, "malformed_step_markers")
    assert w["count"] == 1 and "1 ProfilerStep marker carries no step number" in w["message"]
    assert "\x1b" not in text and "\x07" not in text  # the name is shown inert
    assert "ProfilerStep#abc\\x1b]0;pwned\\x07" in text
    assert "\x1b" not in Report(report).to_markdown()
    html = Report(report).to_html(tmp_path / "r.html")
    shown = html.split('id="warnings"')[1].split("</ul>")[0]
    assert "\x1b" not in shown and "ProfilerStep#abc\\x1b]0;pwned\\x07" in shown


def test_percentages_out_of_range_in_a_saved_report_are_clamped_when_read(tmp_path):
    # A saved report (or an NVML sample) with a utilization of 500% and -3%: read back through the
    # one builder, they are 100% and 0%, and the report says so.
    report, _ = analyze(tmp_path, "ok.json", trace())
    report["devices"][0]["utilization_pct"] = 500.0
    report["devices"][0]["sm_efficiency_pct"] = -3.0
    rebuilt = build_report(analysed=report).to_dict()
    assert rebuilt["devices"][0]["utilization_pct"] == 100.0
    assert rebuilt["devices"][0]["sm_efficiency_pct"] == 0.0
    w = warning(rebuilt, "percent_out_of_range")
    assert w["count"] == 2 and "sm_efficiency_pct (1), utilization_pct (1)" in w["message"]


@pytest.mark.parametrize("kind", ["duplicate", "nested"])
def test_merged_step_markers_are_warnings_with_their_count(tmp_path, kind):
    data = trace()
    marker = dict(data["traceEvents"][0])
    if kind == "nested":
        marker.update(name="ProfilerStep#9", ts=marker["ts"] + 100, dur=200)
    data["traceEvents"].append(marker)
    report, _ = analyze(tmp_path, f"{kind}.json", data)
    w = warning(report, f"{kind}_step_markers")
    assert w["count"] == (2 if kind == "duplicate" else 1)
