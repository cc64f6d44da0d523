"""The benchmark scripts run end to end (on the CPU here; their figures are taken on a GPU with
tests/gpu/run_on_gpu.sh). No timing is asserted: only that every condition ran and was measured."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _bench(script: str, *args, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python bench/SCRIPT ARGS...`` run to completion, its output captured as text."""
    cmd = [sys.executable, str(REPO / "bench" / script), *(str(a) for a in args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_gpu_overhead_smoke_run_measures_every_condition(tmp_path):
    out = tmp_path / "gpu_overhead.json"
    proc = _bench(
        "gpu_overhead.py",
        "--device",
        "cpu",
        "--steps",
        "2",
        "--rounds",
        "1",
        "--batch",
        "2",
        "--image-size",
        "32",
        "--out",
        str(out),
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SMOKE RUN" in proc.stdout  # CPU figures are never presented as the GPU result
    doc = json.loads(out.read_text())
    assert doc["smoke"] is True
    assert set(doc["conditions"]) == {"none", "gpuprof", "torch.profiler", "gpuprof+memory", "gpuprof-nvml"}
    for name, row in doc["conditions"].items():
        assert row["steps"] == 2, name  # 2 measured steps x 1 round
        assert 0 < row["p10_ms"] <= row["median_ms"] <= row["p90_ms"], name
    gp = doc["conditions"]["gpuprof"]
    assert gp["steps_recorded"] == [2]  # gpuprof's span covered exactly the measured steps
    assert gp["gpu_collection"][0].startswith("off")  # no GPU here: host-side only, and it says so
    assert doc["gpuprof_gpu_collection_on_all_rounds"] is False
    assert gp["end_of_span_median_ms"] > 0
    assert doc["conditions"]["torch.profiler"]["end_of_span_median_ms"] > 0
    for name in ("gpuprof", "torch.profiler", "gpuprof+memory", "gpuprof-nvml"):
        assert isinstance(doc["conditions"][name]["overhead_pct"], float)
    assert "ratio_gpuprof_to_torch" in doc and "meets_under_3pct" in doc


@pytest.mark.parametrize("script", ["gpu_overhead.py", "after_session.py", "gpu_step_costs.py"])
def test_gpu_benchmarks_without_a_gpu_say_so_and_exit_2(tmp_path, script):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the real benchmark runs from tests/gpu/run_on_gpu.sh")
    proc = _bench(script, "--device", "cuda", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--device cpu" in proc.stderr


def test_step_costs_smoke_run_measures_every_condition(tmp_path):
    # bench/gpu_step_costs.py on the CPU: the boundary's cost both ways and the operator's under each
    # profiler; the allocator's and NVML's figures need CUDA (null here, and said to be so).
    out = tmp_path / "costs.json"
    args = ["--device", "cpu", "--rounds", "2", "--steps", "5", "--ops", "100", "--out", str(out)]
    proc = _bench("gpu_step_costs.py", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SMOKE RUN" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["smoke"] is True and doc["allocator_stats_us"] is None and doc["energy_read_us"] is None
    assert set(doc["prof_step_us"]) == {"gpu_collection", "host_only"}
    assert all(s["n"] == 5 and 0 < s["median"] <= s["max"] for s in doc["prof_step_us"].values())
    assert set(doc["op_host_us"]) == {"none", "gpuprof_host_only", "gpuprof", "torch.profiler"}
    assert all(len(r["rounds_us"]) == 2 and r["median_us"] > 0 for r in doc["op_host_us"].values())


def test_after_session_smoke_run_compares_fresh_processes(tmp_path):
    # bench/after_session.py (docs/gpu.md, review item 9): a tiny CPU run, one round; no timing
    # asserted, only that both conditions ran in processes of their own with the steps asked for,
    # and that the verdict's odds are those of R rounds (1 in C(2R, R) = 2 for R = 1).
    out = tmp_path / "after.json"
    args = ["--device", "cpu", "--rounds", "1", "--steps", "2", "--warmup", "1", "--session-steps", "2"]
    proc = _bench("after_session.py", *args, "--batch", "2", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["summary"]) == {"never", "after"}
    for condition in doc["summary"].values():
        assert condition["median_ms"] > 0 and len(condition["round_median_ms"]) == 1
        assert condition["round_faults_per_step"][0] >= 0
    assert doc["chance_if_no_effect"] == 0.5 and isinstance(doc["measurable"], bool)
    assert doc["settings"]["glibc_default"] is False and len(doc["gpu_collection"]) == 1


def test_cpu_overhead_smoke_run_measures_every_variant(tmp_path):
    # bench/overhead.py (docs/performance.md, "Profiling overhead on the CPU"): a tiny run; no
    # timing asserted, only that every variant ran, with and without record_shapes.
    out = tmp_path / "overhead.json"
    proc = _bench("overhead.py", "--ops", "300", "--rounds", "1", "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["ns_per_op"]) == {
        "none",
        "gpuprof",
        "torch.profiler",
        "gpuprof (wait step)",
        "gpuprof shapes",
        "torch.profiler shapes",
    }
    assert all(v > 0 for v in doc["ns_per_op"].values())
    assert isinstance(doc["ratio_recording"], float)
    assert isinstance(doc["ratio_recording_record_shapes"], float)


def test_analyze_speed_times_an_earlier_build_beside_this_one(tmp_path):
    """`bench/analyze_speed.py --before DIR` runs the gpuprof found in DIR as `gpuprof_before`,
    taking turns with this one, and reports both (here DIR holds the installed package itself)."""
    trace = REPO.parent / "shared" / "traces" / "tb_resnet50_v100_nw0"
    if not trace.is_dir():
        pytest.skip(f"the real trace folder {trace} is not here")
    import gpuprof

    before = Path(gpuprof.__file__).resolve().parents[1]
    out = tmp_path / "speed.json"
    proc = _bench(
        "analyze_speed.py",
        "--only",
        "gpuprof",
        "--inputs",
        "resnet50_v100",
        "--before",
        str(before),
        "--workdir",
        str(tmp_path / "work"),
        "--out",
        str(out),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["resnet50_v100"]
    assert row["gpuprof"]["ok"] and row["gpuprof_before"]["ok"]
    assert row["gpuprof_before"]["wall_s"] > 0 and row["gpuprof"]["cpu_s"] > 0
    assert "before" in proc.stdout and "-> now" in proc.stdout
    bad = _bench("analyze_speed.py", "--before", str(tmp_path), timeout=120)
    assert bad.returncode == 2 and "no gpuprof package" in bad.stderr


def test_report_cost_times_both_commands_of_two_builds(tmp_path):
    """`bench/report_cost.py --before DIR` times `gpuprof analyze` and `--json --html` of both builds
    taking turns (here DIR holds the installed package itself; callgrind left out: slow), and says
    what is wrong with a folder that holds no gpuprof."""
    import gpuprof

    trace = tmp_path / "trace.json"
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "args": {"Input Dims": [[4, 4]]}}
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {**op, "name": "ProfilerStep#1", "ts": 0, "dur": 100},
                    {**op, "name": "aten::mm", "ts": 10, "dur": 50},
                ]
            }
        )
    )
    before = Path(gpuprof.__file__).resolve().parents[1]
    script = str(REPO / "bench" / "report_cost.py")
    out = tmp_path / "cost.json"
    args = [
        "--before",
        str(before),
        "--trace",
        str(trace),
        "--runs",
        "1",
        "--no-callgrind",
        "--out",
        str(out),
    ]
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for mode in ("text", "full"):
        for build in ("before", "now"):
            assert doc[f"timed_{mode}"][build]["wall_s"]["median"] > 0
            assert doc[f"timed_{mode}"][build]["cpu_s"]["min"] > 0
    assert "JSON + HTML, wall" in proc.stdout
    bad = subprocess.run(
        [sys.executable, script, "--before", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "no gpuprof package" in bad.stderr


def test_import_threads_smoke_run_reads_a_gzip_file_by_one_and_by_two_threads(tmp_path):
    # bench/import_threads.py (docs/performance.md): a small generated trace of 5 MiB of text, so
    # that a split is wanted; no timing asserted, only that each setting ran and read the same
    # events, and that the gzip file was read by two threads by default where two CPUs are there.
    import gzip

    sys.path.insert(0, str(REPO / "bench"))
    from analyze_speed import synthetic_trace

    gz = synthetic_trace(tmp_path / "small.pt.trace.json.gz", n_events=25_000)
    assert len(gzip.decompress(gz.read_bytes())) >= 4 << 20
    out = tmp_path / "import_threads.json"
    proc = _bench("import_threads.py", "--repeat", "1", "--out", str(out), str(gz), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["inputs"][gz.name]
    assert row["one thread"]["threads"] == 1
    if len(os.sched_getaffinity(0)) >= 2:
        assert row["default"]["threads"] == 2
    counts = {name: row[name]["events"] for name in row if isinstance(row[name], dict)}
    assert len(set(counts.values())) == 1 and counts["one thread"] >= 25_000, counts  # the same trace


def test_parser_bound_compares_with_simdjson_or_says_what_to_install(tmp_path):
    # bench/parser_bound.py (docs/performance.md) needs pysimdjson, which gpuprof does not depend
    # on: without it, one line naming the command that installs it and exit 2; with it, a smoke
    # run on a small generated trace (no timing asserted, only that every figure was taken).
    import gzip
    import importlib.util

    sys.path.insert(0, str(REPO / "bench"))
    from analyze_speed import synthetic_trace

    gz = synthetic_trace(tmp_path / "small.pt.trace.json.gz", n_events=2_000)
    out = tmp_path / "bound.json"
    proc = _bench("parser_bound.py", "--repeat", "1", "--out", str(out), str(gz))
    if importlib.util.find_spec("simdjson") is None:
        assert proc.returncode == 2 and "python -m pip install pysimdjson" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["results"][gz.name]
    assert round(row["json_mb"] * 1e6) == len(gzip.decompress(gz.read_bytes()))
    assert all(
        row[k] > 0
        for k in (
            "gpuprof_import_one_thread_s",
            "gpuprof_import_default_s",
            "simdjson_parse_s",
            "read_text_s",
            "zlib_inflate_s",
        )
    )


def test_straggler_calls_smoke_run_counts_one_slow_and_one_clean_job(tmp_path):
    # bench/straggler_calls.py (docs/distributed.md): one slowed and one clean 2-rank gloo job, no
    # busy loops; the counts are what the reports said (a 60 ms sleep in a rank's data loading).
    pytest.importorskip("torch")
    out = tmp_path / "calls.json"
    proc = _bench(
        "straggler_calls.py",
        "--runs",
        "1",
        "--busy",
        "0",
        "--delay-ms",
        "60",
        "--json",
        str(out),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["failed_jobs"] == 0 and len(got["slow"]) == 1 and len(got["clean"]) == 1
    assert got["slow_named_right"] == (got["slow"][0]["named"] == [1])
    assert "slowed rank named in" in proc.stdout


def test_the_gemm_bench_counts_its_products(tmp_path):
    """bench/flops_gemm_cpu.py on small matrices: gpuprof's FLOPs per step are the bench's count by
    hand (2 n^3 per product), and the fraction of the estimated peak is reported (not asserted)."""
    out = tmp_path / "gemm.json"
    proc = _bench(
        "flops_gemm_cpu.py", "--n", "64", "--steps", "2", "--reps", "3", "--json", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["per_step_flops"] == doc["flops_per_step_by_hand"] == 3 * 2 * 64**3
    assert doc["peak_source"].startswith("Estimate") and doc["mfu_pct"] > 0
    assert "of the estimated peak" in proc.stdout


def test_memory_overhead_smoke_run_measures_every_variant(tmp_path):
    # The wall-clock mode (the callgrind mode takes minutes): every variant ran, each profile_memory
    # variant recorded every allocation of the loop (the script asserts it), and the side costs.
    out = tmp_path / "memory_overhead.json"
    proc = _bench(
        "memory_overhead.py",
        "--wall",
        "--allocs",
        "2000",
        "--rounds",
        "1",
        "--side-costs",
        "--json",
        str(out),
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["per_allocation"]) == {
        "none",
        "gpuprof",
        "gpuprof memory",
        "torch.profiler",
        "torch.profiler memory",
    }
    assert all(v > 0 for v in doc["per_allocation"].values())
    assert set(doc["recording_added"]) == {"gpuprof", "torch.profiler"}
    assert doc["side_costs"]["per_gradient_us"] > 0 and doc["side_costs"]["objects_tracked"] > 0


def test_modules_overhead_smoke_run_measures_every_variant(tmp_path):
    # bench/modules_overhead.py (docs/performance.md, "The module view"): a tiny run; no timing
    # asserted, only that every variant ran and the module view recorded the model.
    out = tmp_path / "modules.json"
    proc = _bench(
        "modules_overhead.py", "--steps", "2", "--rounds", "1", "--json", str(out), cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["median_ms_per_step"]) == {
        "none",
        "gpuprof",
        "gpuprof modules",
        "torch.profiler with_stack",
    }
    assert all(ms > 0 for ms in doc["median_ms_per_step"].values())
    assert doc["module_calls_per_step"] == 41


def test_pipeline_overhead_smoke_run_measures_every_variant(tmp_path):
    # bench/pipeline_overhead.py (docs/performance.md, "Input pipeline"): a tiny run; no timing
    # asserted, only that each fetch variant ran beside torch's and the per-batch figures came out.
    out = tmp_path / "pipeline.json"
    proc = _bench(
        "pipeline_overhead.py", "--batches", "20", "--rounds", "1", "--json", str(out), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["added"]) == {
        "1 samples",
        "1 samples + transform",
        "32 samples",
        "32 samples + transform",
        "256 samples",
        "256 samples + transform",
        "next(), 32 samples, num_workers=0",
    }
    assert all(v["gpuprof_ns"] > 0 and v["torch_ns"] > 0 for v in doc["added"].values())
    assert doc["ns_per_batch"]["reader, per record"] > 0 and doc["record_bytes"] < 512


def test_watch_overhead_smoke_run_measures_both_loops(tmp_path):
    # bench/watch_overhead.py (docs/performance.md, "Watching a run"), wall-clock mode: both loops
    # ran, and the watched rounds wrote their steps (warm-up round of 200 + 1 round of 50 steps).
    out = tmp_path / "watch_overhead.json"
    proc = _bench("watch_overhead.py", "--steps", "50", "--rounds", "1", "--json", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())["wall_clock"]
    assert doc["unwatched_us_per_step"] > 0 and doc["watched_us_per_step"] > 0
    assert doc["unwatched_thread_cpu_us_per_step"] > 0 and doc["watched_thread_cpu_us_per_step"] > 0
    assert doc["write_of_100_steps_us"] > 0
    # Two watched runs (200 + 50 steps), each a start line, its steps and an end line, and the
    # longer one a baseline line (a busy machine may add a flag line or two).
    assert doc["lines_written"] >= 2 * 2 + 200 + 50 + 1


def test_compiled_kernels_cost_smoke_run_measures_every_condition(tmp_path):
    # bench/compiled_kernels_cost.py (docs/performance.md, "Compiled kernels (opt-in)"): three fresh
    # processes compile the residual block; only the opt-in's report names the generated kernels.
    out = tmp_path / "compiled_kernels_cost.json"
    proc = _bench(
        "compiled_kernels_cost.py", "--rounds", "1", "--steps", "2", "--out", out, cwd=tmp_path, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())["conditions"]
    assert set(doc) == {"default", "default_warm", "opt_in"}
    for name, row in doc.items():
        assert row["first_step_s_median"] > 0 and row["step_ms_median"] > 0, name
    assert doc["default"]["kernels"] == 0 and doc["default_warm"]["kernels"] == 0
    assert doc["opt_in"]["kernels_with_ops"] >= 5  # every fused kernel but the input layout copy


def test_tokenizer_bound_times_every_reader_on_the_same_text(tmp_path):
    """bench/tokenizer_bound.py on a small trace: every reader read it whole (the same number of
    values where they visit the same ones), and the whole import counted its records."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op\\u00e9{i}", "pid": 1, "tid": 1, "ts": 1000.25 + i,
         "dur": 0.5, "args": {"External id": i, "grid": [1, 2, 3]}}
        for i in range(3000)
    ]  # fmt: skip
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events, "traceName": "small"}, indent=1))
    out = tmp_path / "bound.json"
    proc = _bench("tokenizer_bound.py", "--repeat", "1", "--out", out, trace, cwd=REPO / "bench")
    if proc.returncode == 2 and "cannot build" in proc.stderr:
        pytest.skip("needs g++ and libsimdjson-dev (apt-get install libsimdjson-dev)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())["results"]["t.json"]
    assert r["records"] == 3000
    for reader in ("sax", "ondemand", "ondemand-chunks", "ondemand-skip-args", "dom", "gpuprof_import"):
        assert r[f"{reader}_cpu_s"] > 0, reader
    assert "gpuprof tokenizer" in proc.stdout


@pytest.mark.parametrize("mode", ["gpu_tables", "export", "drawn"])
def test_critical_path_cost_times_the_analysis_or_the_export_of_two_builds(tmp_path, mode, shared_traces):
    """`bench/critical_path_cost.py` times `gpu_tables` (with `--export`, the Chrome export that
    draws the path; with `--drawn`, the drawn steps' pieces) of both builds in processes taking turns
    (here both are this checkout)."""
    files = sorted((shared_traces / "hta_v100_ns").glob("*.json.gz"))
    out = tmp_path / "cost.json"
    import gpuprof

    installed = Path(gpuprof.__file__).resolve().parents[1]  # both builds: the gpuprof tests run on
    args = ["--before", installed, "--trace", files[0], "--repeat", 1, "--rounds", 1, "--out", out]
    proc = _bench(
        "critical_path_cost.py", *args, *([f"--{mode}"] if mode != "gpu_tables" else []), timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    timed = {"gpu_tables": "gpu_tables", "export": "export_chrome_trace", "drawn": "critical_path_pieces"}
    assert result["timed"] == timed[mode]
    assert len(result["runs"]["before"]) == len(result["runs"]["now"]) == 1
    assert result["best"]["now"]["wall_s"] > 0 and result["ratio_cpu"] > 0


def test_import_speed_times_both_builds_and_counts_them(tmp_path):
    """bench/import_speed.py on a small trace, this build as its own "before": both builds imported
    every record, each timing and (where valgrind is) each count is there, and the whole analyze of
    a gzip trace ran for both."""
    import gzip
    import shutil

    import gpuprof

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": 1000.25 + i,
         "dur": 0.5, "args": {"External id": i, "Input Dims": [[2, 3], []]}}
        for i in range(2000)
    ]  # fmt: skip
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}, indent=2))
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    before = Path(gpuprof.__file__).resolve().parents[1]
    counted = ["--callgrind", trace] if shutil.which("valgrind") else []
    out = tmp_path / "speed.json"
    proc = _bench(
        "import_speed.py", "--before", before, "--repeat", "1", "--gz", gz, "--out", out, *counted, trace
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    row = doc["inputs"]["t.json"]
    assert row["records"] == 2000 and row["bytes"] == trace.stat().st_size
    for build in ("before", "now"):
        assert row[f"cpu_s_{build}"] > 0 and row[f"gb_per_s_{build}"] > 0, build
        assert doc["analyze_wall_s"][build] > 0, build
        if counted:
            assert row[f"instructions_{build}"] > 1000, build
