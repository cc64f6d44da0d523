"""Sustained records through the real CUPTI collector (tests/simdevice/throughput.py), at a small
scale: the stand-in's own thread makes 200,000 kernel records a second for half a second inside one
span whose event budget is 60,000 (gpuprof.profile(max_events=...): the device records' budget).
Every record made is accounted for: it reached gpuprof's completion callback or was dropped by CUPTI
for want of a buffer (counted alike on both sides; on a loaded machine the decode can fall 32
buffers behind), and a decoded one is either in the report's kernel table or counted as dropped past
the budget, which bounds the trace's size. No timed
assertion: the rate is the producer's schedule; what is checked is counts.
bench/simdevice_throughput.py runs it at 1,000,000 records a second for 10 seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RATE, SECONDS, BUDGET = 200_000, 0.5, 60_000


def test_every_record_made_is_in_the_report_or_counted_dropped(simdevice_libdir, tmp_path):
    out = tmp_path / "throughput.json"
    r = subprocess.run(
        [sys.executable, str(HERE / "throughput.py"), str(RATE), str(SECONDS), str(BUDGET), str(out)],
        env=dict(os.environ, GPUPROF_CLOCK="monotonic"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    res = json.loads(out.read_text())
    assert res["gpu_collection"].startswith("on (CUPTI")
    assert res["made"] == RATE * SECONDS
    # CUPTI dropped what the stand-in dropped (nothing, unless the decode fell 32 buffers behind),
    # and every other record reached gpuprof's decoder.
    assert res["cupti_dropped_records"] == res["stand_in_dropped"]
    assert res["cupti_records"] == res["made"] - res["stand_in_dropped"]
    assert res["cupti_untimed_records"] == 0
    # In the report or counted dropped: nothing lost silently.
    assert res["in_report"] + res["report_dropped"] == res["made"]
    # The span's budget bounds what is kept of the device's records (the host side has its own:
    # here one step marker), whatever the rate: the rest is counted.
    assert res["in_report"] == min(BUDGET, res["cupti_records"])
    assert res["trace_events"] == res["in_report"] + 1
    assert res["decode_ns_per_record"] > 0
