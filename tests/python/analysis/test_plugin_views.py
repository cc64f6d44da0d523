"""The plugin's views on hand-built Kineto traces read through the importer: the step rules and the
operator and kernel tables, each expected number worked out beside its timeline (microseconds)."""

from __future__ import annotations

import gzip
import json

import gpuprof


def _op(name, ts, dur, ext, tid=123, **args):
    return {
        "ph": "X",
        "cat": "Operator",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext, **args},
    }


def _runtime(name, ts, dur, corr, ext, tid=123):
    return {
        "ph": "X",
        "cat": "Runtime",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "external id": ext},
    }


def _device(cat, name, ts, dur, corr, ext, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": "stream 7",
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "external id": ext, "device": 0, "stream": 7, **args},
    }


def _analyze(tmp_path, events) -> dict:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))  # the Trace Event Format's bare list, as the plugin's tests
    return gpuprof.analyze(str(path)).to_dict()


def test_first_step_starts_after_device_work_left_from_before(tmp_path):
    """The plugin's two overlapping steps: a kernel [150, 240) launched before the trace runs into
    step 1's host range [100, 300) and ends before step 1's own copy starts (280), so step 1 is
    [240, 380): 140 us, Memcpy 100, Runtime 5, CPU Exec [240, 260) less the runtime call = 15, no
    Kernel, Other 20. Step 2 is [380, 610): Kernel 200, Runtime 5, CPU Exec 25, Other 0."""
    data = _analyze(
        tmp_path,
        [
            _op("ProfilerStep#1", 100, 200, 1),
            _op("aten::to", 200, 60, 2),
            _op("ProfilerStep#2", 350, 150, 3),
            _op("aten::mm", 360, 50, 4),
            _device("Kernel", "void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 150, 90, 123, 0),
            _device("Memcpy", "Memcpy HtoD (Pageable -> Device)", 280, 100, 334, 2),
            _runtime("cudaMemcpyAsync", 250, 5, 334, 2),
            _device(
                "Kernel", "void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 410, 200, 40348, 4
            ),
            _runtime("cudaLaunchKernel", 400, 5, 40348, 4),
        ],
    )
    one, two = data["steps"]
    assert (one["step"], one["total_us"]) == (1, 140.0)
    assert (one["kernel_us"], one["memcpy_us"], one["runtime_us"], one["cpu_exec_us"], one["other_us"]) == (
        0.0,
        100.0,
        5.0,
        15.0,
        20.0,
    )
    assert (two["step"], two["total_us"]) == (2, 230.0)
    assert (two["kernel_us"], two["runtime_us"], two["cpu_exec_us"], two["other_us"]) == (
        200.0,
        5.0,
        25.0,
        0.0,
    )


def test_input_dims_group_the_operators_by_shape(tmp_path):
    """Kineto's "Input Dims" (record_shapes) fill operators_by_shape[].input_shapes in the form live
    record_shapes gives ("[[5, 3], [], []]", Python's str of the list): two aten::conv2d calls of
    one shape (30 + 10 us), one of another (50 us); an op whose trace has no Input Dims has none
    (""). operators[] stays one row per name, as the plugin's default view: conv2d 3 calls, 90 us,
    with no input_shapes key."""
    conv = "aten::conv2d"
    data = _analyze(
        tmp_path,
        [
            _op(conv, 0, 30, 1, **{"Input Dims": [[32, 3, 224, 224], [64, 3, 7, 7], [], []]}),
            _op(conv, 40, 10, 2, **{"Input Dims": [[32, 3, 224, 224], [64, 3, 7, 7], [], []]}),
            _op(conv, 60, 50, 3, **{"Input Dims": [[32, 64, 56, 56], [64, 64, 3, 3], [], []]}),
            _op("aten::zeros", 120, 5, 4),
        ],
    )
    rows = {
        (r["name"], r["input_shapes"]): (r["calls"], r["host_total_us"]) for r in data["operators_by_shape"]
    }
    assert rows == {
        (conv, "[[32, 3, 224, 224], [64, 3, 7, 7], [], []]"): (2, 40.0),
        (conv, "[[32, 64, 56, 56], [64, 64, 3, 3], [], []]"): (1, 50.0),
        ("aten::zeros", ""): (1, 5.0),
    }
    assert [(r["name"], r["calls"], r["host_total_us"]) for r in data["operators"]] == [
        (conv, 3, 90.0),
        ("aten::zeros", 1, 5.0),
    ]
    assert not any("input_shapes" in r for r in data["operators"])


def test_without_input_dims_there_is_no_shape_view(tmp_path):
    """A trace recorded without record_shapes: the by-shape view would repeat the by-name one, so it
    is empty, and the operators are as before."""
    data = _analyze(tmp_path, [_op("aten::mm", 0, 30, 1), _op("aten::mm", 40, 10, 2)])
    assert data["operators_by_shape"] == []
    assert [(r["name"], r["calls"], r["host_total_us"]) for r in data["operators"]] == [("aten::mm", 2, 40.0)]


def test_torch_ranges_an_old_trace_lists_as_operators_are_ranges(tmp_path):
    """torch 1.8's traces write record_function ranges as cat "Operator"; the plugin's operator view
    leaves torch's own out (its DataLoader and optimizer nodes). Here Optimizer.step#SGD.step [0, 100)
    holds aten::add_ [10, 40); the DataLoader's next() [200, 260) holds aten::stack [210, 230).
    Operators: add_ and stack only. Ranges: both, as a newer trace's user_annotation of the same
    names would give them, with the same time."""
    nxt = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [
        _op("Optimizer.step#SGD.step", 0, 100, 1),
        _op("aten::add_", 10, 30, 2),
        _op(nxt, 200, 60, 3),
        _op("aten::stack", 210, 20, 4),
    ]
    data = _analyze(tmp_path, events)
    assert [(r["name"], r["host_total_us"]) for r in data["operators"]] == [
        ("aten::add_", 30.0),
        ("aten::stack", 20.0),
    ]
    old_ranges = [(r["name"], r["calls"], r["host_total_us"]) for r in data["ranges"]]
    assert old_ranges == [("Optimizer.step#SGD.step", 1, 100.0), (nxt, 1, 60.0)]
    for e in events[::2]:
        e["cat"] = "user_annotation"
    newer = _analyze(tmp_path, events)
    assert [(r["name"], r["calls"], r["host_total_us"]) for r in newer["ranges"]] == old_ranges
    assert newer["operators"] == data["operators"]


def test_markdown_lists_the_shape_rows_and_the_terminal_the_names(tmp_path):
    """Markdown gives the heaviest rows of both views; the terminal's top operators are names (it
    listed one name's shapes as separate operators)."""
    path = tmp_path / "trace.json"
    dims = {"Input Dims": [[8, 16], [16, 4]]}
    path.write_text(
        json.dumps(
            [
                _op("aten::mm", 0, 30, 1, **dims),
                _op("aten::mm", 40, 20, 2, **{"Input Dims": [[64, 16], [16, 4]]}),
                _op("aten::relu", 70, 5, 3, **{"Input Dims": [[8, 4]]}),
            ]
        )
    )
    report = gpuprof.analyze(str(path))
    md = report.to_markdown()
    assert "### Operators (top 2 of 2)" in md
    assert "### Operators by input shape (top 3 of 3)" in md
    assert "| aten::mm | \\[\\[64, 16\\], \\[16, 4\\]\\] | 1 |" in md
    text = report.to_text()
    assert "Operators (top 2 of 2)" in text


def _stream_kernel(name, ts, dur, corr, ext, stream, blocks_per_sm):
    event = _device("Kernel", name, ts, dur, corr, ext, **{"blocks per SM": blocks_per_sm})
    event["tid"] = f"stream {stream}"
    event["args"]["stream"] = stream
    return event


def test_sm_efficiency_track_is_the_plugins_ranges(tmp_path):
    """The plugin's GPU-utilization case: the trace runs [100, 220), so 10 us utilization buckets
    (120 / 1 > 100, 120 / 10 <= 100). Four kernels with the trace's "blocks per SM" (no device
    properties, so the share is min(blocks per SM, 1)): stream 7 runs 0.5 on [130, 140) and 0.3 on
    [145, 170), stream 8 runs 0.6 on [135, 150) (and a 0 us launch at 150, left out), stream 7 again
    10.5 on [200, 220). The SM share summed over the running kernels, capped at 1, changes at every
    edge: 50 on [130, 135), 1.1 -> 100 on [135, 140), 60 on [140, 145), 0.6 + 0.3 = 90 on [145, 150),
    30 on [150, 170), 100 on [200, 220): the plugin's ranges, each drawn as its level from its start
    (a counter holds it to the next point) and 0 where a gap follows. Averaged per bucket instead,
    [130, 140) and [140, 150) would both read 75."""
    events = [
        _op("aten::mat_mul", 100, 100, 2),
        _op("aten::mm", 120, 70, 4),
        _stream_kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 130, 10, 334, 4, 7, 0.5),
        _runtime("cudaLaunchKernel", 120, 0, 334, 4),
        _stream_kernel("void gemmSN_TN_kernel_64addr", 135, 15, 335, 2, 8, 0.6),
        _stream_kernel("void gemmSN_TN_kernel_64addr", 150, 0, 335, 2, 8, 0.3),
        _runtime("cudaLaunchKernel", 120, 0, 335, 2),
        _stream_kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 145, 25, 336, 4, 7, 0.3),
        _runtime("cudaLaunchKernel", 125, 3, 336, 4),
        _stream_kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel<float>", 200, 20, 337, 2, 7, 10.5),
        _runtime("cudaLaunchKernel", 195, 1, 337, 2),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))
    report = gpuprof.analyze(str(path))
    buckets = report.data["gpu_timeline"]["0"]
    assert [b["start_us"] for b in buckets] == [100.0 + 10 * i for i in range(12)]
    assert [b["utilization_pct"] for b in buckets] == [0, 0, 0, 100, 100, 100, 100, 0, 0, 0, 100, 100]
    report.to_json(tmp_path / "r.json")
    doc = json.loads(gzip.decompress((tmp_path / "r.trace.json.gz").read_bytes()))
    track = [
        (e["ts"], e["args"]["sm efficiency %"])
        for e in doc["traceEvents"]
        if e.get("ph") == "C" and e["name"] == "GPU 0 Est. SM Efficiency"
    ]
    ts0 = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    got = [(round(ts - ts0, 3), round(pct, 4)) for ts, pct in track]
    assert got == [(30.0, 50.0), (35.0, 100.0), (40.0, 60.0), (45.0, 90.0), (50.0, 30.0), (70.0, 0.0)] + [
        (100.0, 100.0),
        (120.0, 0.0),
    ]


def test_kernels_missing_launch_fields_keep_what_they_have(tmp_path):
    """The plugin's case of kernel1 launched five times by op1, each launch missing other fields:
    the grid, the block, the registers, the shared memory, then all four. Each launch is a row of
    its own, grouped by the fields it has; a missing field is null, never [0, 0, 0]; the Chrome
    trace leaves the missing dimensions out rather than writing zeros."""
    full = {"grid": [16, 1, 1], "block": [16, 16, 16], "registers per thread": 18, "shared memory": 0}
    missing = ["grid", "block", "registers per thread", "shared memory", None]
    events = [_op("op1", 200, 60, 3, **{"Input Dims": [[2, 8, 5], [], [], [], [], [], [], []]})]
    for i, gone in enumerate(missing):
        args = {k: v for k, v in full.items() if k != gone} if gone else {}
        events.append(_device("Kernel", "kernel1", 220 + 10 * i, i + 1, 1000 + i, 3, **args))
        events.append(_runtime("cudaLaunchKernel", 210 + 10 * i, 5, 1000 + i, 3, tid=456))
    rows = _analyze(tmp_path, events)["kernel_ops"]
    got = [
        (
            r["kernel"],
            r["operator"],
            r["grid"],
            r["block"],
            r["registers_per_thread"],
            r["shared_memory_bytes"],
        )
        + (r["calls"], r["total_us"], r["min_us"], r["max_us"])
        for r in sorted(rows, key=lambda r: r["total_us"])
    ]
    assert got == [
        ("kernel1", "op1", None, [16, 16, 16], 18, 0, 1, 1.0, 1.0, 1.0),
        ("kernel1", "op1", [16, 1, 1], None, 18, 0, 1, 2.0, 2.0, 2.0),
        ("kernel1", "op1", [16, 1, 1], [16, 16, 16], None, 0, 1, 3.0, 3.0, 3.0),
        ("kernel1", "op1", [16, 1, 1], [16, 16, 16], 18, None, 1, 4.0, 4.0, 4.0),
        ("kernel1", "op1", None, None, None, None, 1, 5.0, 5.0, 5.0),
    ]
    report = gpuprof.analyze(str(tmp_path / "trace.json"))
    report.to_json(tmp_path / "r.json")
    doc = json.loads(gzip.decompress((tmp_path / "r.trace.json.gz").read_bytes()))
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["dur"])
    assert [("grid" in e["args"], "block" in e["args"]) for e in kernels] == [
        (False, True),
        (True, False),
        (True, True),
        (True, True),
        (False, False),
    ]
    assert "None" not in report.to_markdown() and "[0, 0, 0]" not in json.dumps(report.to_dict())
