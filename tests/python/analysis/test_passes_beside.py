"""report_dict runs the GPU timeline's native pass on a thread of its own beside the tables' pass
(``analysis._Beside``): the same report, the same errors, and no thread left behind."""

import threading
import types

import pytest

from gpuprof._native import _core
from gpuprof.analysis import _Beside, report_dict


def test_beside_returns_the_value_or_raises_the_error_of_its_call():
    assert _Beside(sorted, [3, 1, 2]).result() == [1, 2, 3]
    failing = _Beside(int, "not a number")
    with pytest.raises(ValueError, match="not a number"):
        failing.result()


def test_the_report_holds_the_timeline_a_call_of_its_own_gives(shared_traces):
    from gpuprof.traces.read import import_trace

    trace, _ = import_trace(shared_traces / "hta_2xv100_ddp" / "rank0.json.gz")
    data = report_dict(trace)
    assert data["gpu_timeline"] == _core.gpu_timeline(trace)
    assert data["gpu_timeline"]  # the sample ran kernels: one timeline per device, not {}


def test_a_failing_tables_pass_raises_its_own_error_and_leaves_no_thread():
    # Not a Trace (only its metadata): both passes fail; the tables' error is the one raised, as
    # when the timeline ran after it, and the timeline's thread has ended by then.
    before = threading.active_count()
    with pytest.raises(TypeError, match="gpu_tables"):
        report_dict(types.SimpleNamespace(metadata={}))
    assert threading.active_count() == before
