"""The plugin's views on hand-built Kineto traces read through the importer: the step rules and the
operator and kernel tables, each expected number worked out beside its timeline (microseconds)."""

from __future__ import annotations

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
