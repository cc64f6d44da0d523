"""The per-step rows a windowed read holds on disk (``analysis.spill``) are written into --json and
the HTML's views by marking their place in the text around them and streaming them there: a string
from the trace that looks like such a mark must stay the string it is."""

from __future__ import annotations

import json

from gpuprof.analysis.spill import RowFile, SpilledRows, json_copy, materialized
from gpuprof.report.renderers import dumps_compact, dumps_report, write_compact, write_report


def _report_with_mark_like_names() -> dict:
    rows = SpilledRows(RowFile())
    rows.extend([{"step": 1, "total_us": 10.0}, {"step": 2, "total_us": 12.5}])
    # Names a trace could hold: the shape of the marks the writers used with no token in them.
    forged = ["\x00gpuprof-rows-0\x00", "\x00gpuprof-held-rows-0\x00", '"\\u0000gpuprof-rows-0\\u0000"']
    return {
        "kernels": [{"name": n, "calls": 1} for n in forged],
        "steps": rows,
        "critical_path": {"steps": rows, "note": forged[0]},
    }


def test_streamed_json_keeps_strings_shaped_like_the_marks():
    data = _report_with_mark_like_names()
    pieces: list = []
    write_report(data, pieces.append, indent=2)
    assert "".join(pieces) == dumps_report(materialized(data), indent=2)
    assert json.loads("".join(pieces))["kernels"][0]["name"] == "\x00gpuprof-rows-0\x00"


def test_streamed_compact_json_and_copies_keep_them_too():
    data = _report_with_mark_like_names()
    pieces: list = []
    write_compact(data, pieces.append)
    assert "".join(pieces) == dumps_compact(materialized(data))
    copy = json_copy(data)
    assert copy["kernels"] == materialized(data)["kernels"]
    assert copy["steps"] is data["steps"]  # the rows on disk shared, not read
