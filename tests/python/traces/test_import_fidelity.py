"""Imported traces give the TensorBoard plugin's own numbers, and every real trace adds up.

The plugin's checked-in results for span 1 of the ResNet-50 sample (expected_overview.json) are the
reference: each step and each category must be within 0.5% of the step time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _traces import TRACES  # noqa: E402

import gpuprof
from gpuprof.report.build import build_report
from gpuprof.traces.read import import_trace

RESNET = TRACES / "tb_resnet50_v100_nw0"
SPAN1 = RESNET / "worker0.1623143089861.pt.trace.json.gz"

PLUGIN_KEYS = {
    "Kernel": "kernel_us",
    "Memcpy": "memcpy_us",
    "Memset": "memset_us",
    "Runtime": "runtime_us",
    "DataLoader": "dataloader_us",
    "CPU Exec": "cpu_exec_us",
    "Other": "other_us",
}

ALL_TRACES = sorted(TRACES.glob("*/*.json.gz")) if TRACES.is_dir() else []
NCCL_TRACES = {"hta_2xv100_ddp", "hta_a100_nccl"}


def need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"shared traces not found at {path} (they live in ../shared/traces)")


@pytest.fixture(scope="module")
def span1():
    need(SPAN1)
    return gpuprof.analyze(SPAN1)


def test_resnet_span1_every_step_and_category_matches_the_plugin(span1):
    expected = json.loads((RESNET / "expected_overview.json").read_text())
    assert [s["step"] for s in span1.steps] == [s["step"] for s in expected["steps"]] == [5, 6, 7, 8, 9, 10]
    for ours, theirs in zip(span1.steps, expected["steps"]):
        # The plugin's categories add up to its step time; ours to our step's wall time.
        their_total = sum(theirs[k] for k in PLUGIN_KEYS)
        tolerance = 0.005 * their_total
        assert ours["total_us"] == pytest.approx(their_total, abs=tolerance), ours["step"]
        for plugin_key, our_key in PLUGIN_KEYS.items():
            assert ours[our_key] == pytest.approx(theirs[plugin_key], abs=tolerance), (
                ours["step"],
                plugin_key,
            )
        assert ours["communication_us"] == 0  # a single-GPU run


def test_resnet_span1_averages_match_the_plugin(span1):
    expected = json.loads((RESNET / "expected_overview.json").read_text())
    avg = span1.average
    step_time = expected["average_us"]["Average Step Time"]
    assert avg["total_us"] == pytest.approx(step_time, abs=0.005 * step_time)
    for plugin_key, our_key in PLUGIN_KEYS.items():
        assert avg[our_key] == pytest.approx(expected["average_us"][plugin_key], abs=0.005 * step_time)
        assert avg[our_key.replace("_us", "_pct")] == pytest.approx(
            expected["average_pct"][plugin_key], abs=0.5
        )


def test_resnet_span1_report_says_where_it_came_from(span1):
    src = span1.to_dict()["source"]
    assert src["kind"] == "trace" and src["path"] == str(SPAN1)
    assert src["compressed"] is True and src["time_unit"] == "us"
    assert span1.counts["skipped"] == 0 and span1.counts["steps"] == 6
    assert span1.trace is not None


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_trace_adds_up_with_no_negative_time(path):
    report = gpuprof.analyze(path)
    assert report.steps, "no steps found"
    for s in report.steps:
        parts = [s[f"{k}_us"] for k, _ in gpuprof.report.model.CATEGORIES]
        assert all(p >= 0 for p in parts), s
        # Each category is rounded to the nanosecond (3 decimals of a microsecond): 1 us is generous.
        assert sum(parts) == pytest.approx(s["total_us"], abs=1.0), s
        assert s["total_us"] > 0
    if path.parent.name in NCCL_TRACES:
        assert report.average["communication_us"] > 0, "NCCL trace without communication time"


def test_folder_gives_one_report_per_trace_file():
    need(RESNET)
    reports = gpuprof.analyze(RESNET)
    # expected_overview.json is not a trace (no traceEvents) and is left out.
    assert [Path(r.to_dict()["source"]["path"]).name for r in reports] == [
        "worker0.1623143089861.pt.trace.json.gz",
        "worker0.1623143566756.pt.trace.json.gz",
    ]
    assert [s["step"] for s in reports[1].steps] == [16, 17, 18, 19, 20, 21]


def test_nanosecond_resolution_trace_keeps_sub_microsecond_times():
    path = TRACES / "hta_v100_ns" / "rank-0.pt.trace.json.gz"
    need(path)
    trace, stats = import_trace(path)
    # Its ts are microseconds with a decimal (1712195495519689.0 ...): displayTimeUnit "ns" is only
    # a display hint, and the magnitude rule keeps microseconds.
    assert stats["time_unit"] == "us"
    events = gpuprof._native._core.trace_events(trace, limit=50)
    assert any(e["start_ns"] % 1000 != 0 for e in events), "sub-microsecond digits were lost"
    steps = build_report(trace).steps
    assert 100_000 < steps[0]["total_us"] < 1_000_000  # ~0.1 s training steps, not 1000x off


def test_distributed_info_and_devices_reach_the_report():
    path = TRACES / "hta_2xv100_ddp" / "rank0.json.gz"
    need(path)
    report = gpuprof.analyze(path)
    meta = report.to_dict()["metadata"]
    assert meta["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2}  # the object
    contents = gpuprof._native._core.trace_contents(report.trace)
    assert [d["name"] for d in contents["devices"]] == ["Tesla V100-SXM2-32GB"] * 2
    assert contents["devices"][0]["num_sms"] == 80
    assert contents["memory_samples"] == 28010  # every [memory] instant event
    # copy properties: 2040 copies and 880 sets (a set keeps its bytes too)
    assert contents["kernels"] == 19370 and contents["copies"] == 2040 + 880


def test_memsets_keep_their_bytes_through_import_and_export(tmp_path):
    # A step with one 1 MiB set and one 4 KiB pageable copy, as Kineto writes them: the copy table
    # must show each one's bytes, after import and again after exporting and re-importing.
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 7,
            "ts": 100,
            "dur": 20,
            "args": {"device": 0, "stream": 7, "bytes": 1048576, "memory bandwidth (GB/s)": 52.4},
        },
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 200,
            "dur": 10,
            "args": {"device": 0, "stream": 7, "bytes": 4096},
        },
    ]
    path = tmp_path / "sets.json"
    path.write_text(json.dumps({"traceEvents": ev}))

    def bytes_by_kind(report):
        return {row["kind"]: row["bytes"] for row in report.to_dict()["copies"]}

    first = gpuprof.analyze(path)
    assert bytes_by_kind(first) == {"Memset": 1048576, "HtoD": 4096}
    again = tmp_path / "again.json"
    gpuprof.export_chrome_trace(first.trace, again)
    assert bytes_by_kind(gpuprof.analyze(again)) == {"Memset": 1048576, "HtoD": 4096}


@pytest.mark.parametrize(
    "name", ["hta_2xv100_ddp/rank0.json.gz", "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz"]
)
def test_a_large_plain_trace_read_in_two_halves_is_the_same_trace(name, tmp_path, shared_traces):
    """torch.profiler writes plain JSON by default: a file of 4 MiB or more is read by two threads
    (docs/analyze.md), and must give exactly what the gzip file read by one parser gives; so must
    the gzip file read by two threads (the default from two CPUs)."""
    import gzip
    import os

    from gpuprof._native import _core

    gz = shared_traces / name
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    t_plain, s_plain = _core.import_trace(str(plain))
    # A size limit keeps the import on one thread: the reference.
    t_one, s_one = _core.import_trace(str(gz), max_bytes=1 << 40)
    assert s_one["threads"] == 1
    if len(os.sched_getaffinity(0)) >= 2:
        assert s_plain["threads"] == 2  # the halves were used
    # The gzip file read by two threads (the default from two CPUs: import_cpus, which Python reads
    # from GPUPROF_IMPORT_CPUS, says how many the import counts on); the same trace.
    t_gz, s_gz = _core.import_trace(str(gz), import_cpus=4)
    assert s_gz["threads"] == 2
    # As gpuprof analyze reads it: with the default event cap, which this text cannot reach, the
    # plain file is still read by two threads, and gives the same trace; so is the gzip file, whose
    # second half keeps at most half the cap.
    from gpuprof.traces.read import default_max_events

    t_capped, s_capped = _core.import_trace(str(plain), max_events=default_max_events())
    t_gz_capped, s_gz_capped = _core.import_trace(str(gz), max_events=default_max_events())
    if len(os.sched_getaffinity(0)) >= 2:
        assert s_capped["threads"] == 2
        assert s_gz_capped["threads"] == 2
    assert _core.export_chrome_json(t_capped) == _core.export_chrome_json(t_one)
    assert _core.export_chrome_json(t_gz_capped) == _core.export_chrome_json(t_one)
    # A cap the text could reach keeps it on one thread.
    _, s_tight = _core.import_trace(str(plain), max_events=plain.stat().st_size // 16)
    assert s_tight["threads"] == 1
    # What a folder's worker gets on a busy machine.
    t_plain_one, s_plain_one = _core.import_trace(str(plain), import_cpus=1)
    assert s_plain_one["threads"] == 1
    assert _core.export_chrome_json(t_plain_one) == _core.export_chrome_json(t_plain)
    for key in ("json_bytes", "records", "ignored_records", "skipped_by_reason", "time_unit"):
        assert s_plain[key] == s_one[key] == s_gz[key], key
    assert (
        _core.export_chrome_json(t_plain) == _core.export_chrome_json(t_one) == _core.export_chrome_json(t_gz)
    )
    a = build_report(t_plain).to_dict()
    assert a == build_report(t_one).to_dict() == build_report(t_gz).to_dict()
