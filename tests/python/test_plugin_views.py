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


def test_input_dims_become_operators_input_shapes(tmp_path):
    """Kineto's "Input Dims" (record_shapes) fill operators[].input_shapes in the form live
    record_shapes gives ("[[5, 3], [], []]", Python's str of the list), and the table splits an
    operator by them: two aten::conv2d calls of one shape, one of another; an op whose trace has no
    Input Dims has none ("")."""
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
    rows = {(r["name"], r["input_shapes"]): (r["calls"], r["host_total_us"]) for r in data["operators"]}
    assert rows == {
        (conv, "[[32, 3, 224, 224], [64, 3, 7, 7], [], []]"): (2, 40.0),
        (conv, "[[32, 64, 56, 56], [64, 64, 3, 3], [], []]"): (1, 50.0),
        ("aten::zeros", ""): (1, 5.0),
    }
