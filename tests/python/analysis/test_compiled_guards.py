"""``compiled.guard_us`` and ``guard_calls``: the time Dynamo spends evaluating a compiled frame's
guards and looking up its cache, from the ranges torch records (``TorchDynamo Cache Lookup``), on
hand-built operator rows."""

from gpuprof.analysis import _compiled_regions
from gpuprof.analysis.compiled import guard_time


def _op(name, calls, total_us):
    return {
        "name": name,
        "calls": calls,
        "host_self_us": total_us,
        "host_total_us": total_us,
        "device_self_us": 0.0,
    }


def test_guard_time_is_the_cache_lookups_of_the_span():
    # Four calls of a compiled frame: four lookups of 30, 12, 11 and 11 us (the first call also
    # compiled, outside the lookup); the region and graph rows are not guard time.
    section = _compiled_regions(
        [
            _op("TorchDynamo Cache Lookup", 4, 64.0),
            _op("Torch-Compiled Region: 0/0", 4, 900.0),
            _op("## Call CompiledFxGraph fx1 ##", 4, 200.0),
        ]
    )
    assert section["guard_us"] == 64.0 and section["guard_calls"] == 4
    assert section["cache_lookup_us"] == 64.0  # the same ranges: torch records no other guard range
    assert "; guards and cache lookups 0.064 ms over 4 calls (16.0 us each)" in section["note"]


def test_no_lookup_recorded_is_not_measured_rather_than_zero():
    # A trace from an older torch that records no lookup ranges (the CompiledFunction wrappers
    # only, as the stored DDP sample): null, not 0, and no words for it in the note.
    section = _compiled_regions([_op("CompiledFunction", 2, 100.0)])
    assert section["guard_us"] is None and section["guard_calls"] is None
    assert "guards" not in section["note"]
    assert guard_time([]) == {"guard_us": None, "guard_calls": None}
