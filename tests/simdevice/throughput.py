"""Sustained throughput of the real CUPTI collector on the simulated device: the stand-in's own
thread makes kernel records at a set rate (as a busy GPU's CUPTI fills its buffers) for a set time
inside one gpuprof span, and every record made is accounted for in the report.

    python3 tests/simdevice/throughput.py RATE SECONDS MAX_EVENTS OUT.json

Accounting: records made = kernels in the report + the report's dropped count, which is CUPTI's
dropped records (a buffer refused: the collector fell behind) + records past the span's event budget
(`max_events`) + records with no time. Memory: the resident set sampled every 20 ms during the span
and the process's high-water mark (VmHWM), beside the one before the span; the trace holds at most
`max_events` events, whatever the rate. Cost: the CPU time gpuprof's completion callback took on
CUPTI's thread (the decode), per record. Run in a fresh interpreter (one simulated device a
process); tests/simdevice/test_throughput.py at a small scale, bench/simdevice_throughput.py at
1,000,000 records a second for 10 seconds."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simdevice import SimDevice  # noqa: E402


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def run(rate: int, seconds: float, max_events: int) -> dict:
    dev = SimDevice()
    import torch  # noqa: F401  (imported by the span anyway: its memory is not the records')

    import gpuprof

    rss_before = _status_kib("VmRSS")
    samples: list = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(_status_kib("VmRSS"))
            stop.wait(0.02)

    with gpuprof.profile(max_events=max_events) as prof:
        sampler = threading.Thread(target=sample)
        sampler.start()
        dev.produce(rate, seconds)
        producer = dev.produce_join()
        prof.step()
        stop.set()
        sampler.join()
    report = prof.report().to_dict()
    st = dev.stats()
    md = report["metadata"]
    kernels = sum(int(r["calls"]) for r in report["kernels"] or [])
    records = int(md.get("cupti_records", 0))
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "max_events": max_events,
        "producer": producer,
        "made": st["produced"],
        "stand_in_dropped": st["dropped"],
        "buffers_refused": st["buffers_refused"],
        "in_report": kernels,
        "report_dropped": report["counts"]["dropped"],
        "cupti_dropped_records": int(md.get("cupti_dropped_records", -1)),
        "cupti_untimed_records": int(md.get("cupti_untimed_records", -1)),
        "cupti_records": records,
        "trace_events": report["counts"]["events"],
        "decode_ns_per_record": st["complete_cpu_ns"] / records if records else None,
        "buffers_completed": st["buffers_completed"],
        "rss_before_mib": rss_before / 1024,
        "rss_peak_in_span_mib": max(samples, default=-1) / 1024,
        "vm_hwm_mib": _status_kib("VmHWM") / 1024,
        "gpu_collection": md.get("gpu_collection"),
    }


def main(argv: list) -> int:
    os.environ.setdefault("GPUPROF_CLOCK", "monotonic")
    rate, seconds, max_events, out = int(argv[0]), float(argv[1]), int(argv[2]), Path(argv[3])
    t = time.perf_counter()
    r = run(rate, seconds, max_events)
    r["wall_s"] = round(time.perf_counter() - t, 3)
    out.write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
