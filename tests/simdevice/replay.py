"""Replays a stored GPU trace through the simulated device under the real CUPTI collector, and
compares the report's GPU tables with `gpuprof analyze` of the same trace.

    python3 tests/simdevice/replay.py TRACE [--json OUT.json]

The trace's kernels, copies and sets run on the stand-in device with their recorded durations,
grouped by the host operator that launched them (the trace's `External id`): that operator is
replayed as a range through the collector's own entry point (`collector_range_enter`, whose id the
stand-in's CUPTI receives as the pushed external correlation id, as the RecordFunction hooks push
it), and every launch inside it makes a runtime record, an EXTERNAL_CORRELATION record and the
device record, delivered through gpuprof's buffer callbacks. The replay is compressed in time (the
device runs each piece of work for its recorded duration, back to back): what must agree is what
does not depend on the host's timing: per kernel name, the calls and the total time; the copies'
and sets' calls and total time (the stand-in's copies are all host-to-device, so copy kinds are
compared summed). Not compared: kernels by operator (the replayed operators are ranges, which the
report does not count as operators: the hooks' operators come from torch's RecordFunction only),
and the steps (the replay is one span). The result (JSON) holds both sides and the differences;
the exit status is 1 when they differ. Test-only: run from a checkout with gpuprof installed or on
PYTHONPATH."""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simdevice import COPY, KERNEL, SET, SimDevice  # noqa: E402

CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 = 3  # cupti_activity.h
DEVICE_CATS = {
    "kernel": KERNEL,
    "Kernel": KERNEL,
    "gpu_memcpy": COPY,
    "Memcpy": COPY,
    "gpu_memset": SET,
    "Memset": SET,
}
HOST_CATS = {"cpu_op", "Operator", "user_annotation"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}


def _events(path: Path) -> list:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    return doc.get("traceEvents", []) if isinstance(doc, dict) else doc


def device_work(events: list) -> tuple[dict, list]:
    """(host op name by external id, [(launch ts, external id, what, name, ns, bytes)]) in launch
    order. A device record's external id is its own `External id`, else its runtime call's."""
    names: dict = {}
    runtime_ext: dict = {}
    for e in events:
        args = e.get("args") or {}
        cat = e.get("cat")
        if cat in HOST_CATS and "External id" in args and e.get("ph") == "X":
            names.setdefault(args["External id"], str(e.get("name", "")))
        elif cat in RUNTIME_CATS and "correlation" in args:
            runtime_ext[args["correlation"]] = (args.get("External id", 0), float(e.get("ts", 0)))
    work = []
    for e in events:
        what = DEVICE_CATS.get(e.get("cat"))
        if what is None or e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        ext, launch_ts = runtime_ext.get(args.get("correlation"), (0, float(e.get("ts", 0))))
        ext = args.get("External id", ext) or ext
        ns = round(float(e.get("dur", 0)) * 1000)
        work.append(
            (launch_ts, int(ext or 0), what, str(e.get("name", "")), ns, int(args.get("bytes", 0) or 0))
        )
    work.sort(key=lambda w: w[0])
    return names, work


def replay(trace: Path) -> dict:
    dev = SimDevice()
    push = dev.cupti.cuptiActivityPushExternalCorrelationId
    push.argtypes = [ctypes.c_int, ctypes.c_uint64]
    pop = dev.cupti.cuptiActivityPopExternalCorrelationId
    pop.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
    import gpuprof
    from gpuprof import _core

    names, work = device_work(_events(trace))
    out = ctypes.c_uint64()
    with gpuprof.profile(max_events=8 * len(work) + 100_000) as prof:
        i = 0
        while i < len(work):
            ext = work[i][1]
            j = i
            while j < len(work) and work[j][1] == ext:
                j += 1
            # The launching operator as a host range: its id is the external id CUPTI gets.
            key = id(work) + i
            rid = _core.collector_range_enter(key, names.get(ext, "replayed launch"))
            if push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, rid) != 0:
                raise RuntimeError(f"the stand-in refused external id {rid}")
            for _, _, what, name, ns, nbytes in work[i:j]:
                dev.launch(what, name if what == KERNEL else None, device_ns=ns, nbytes=nbytes)
            pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, ctypes.byref(out))
            _core.collector_range_exit(key)
            i = j
        prof.step()
    return {"report": prof.report().to_dict(), "stats": dev.stats(), "launches": len(work)}


def gpu_tables(report: dict) -> dict:
    """Per kernel name (calls, total ns); copies and sets (calls, total ns)."""
    kernels = defaultdict(lambda: [0, 0])
    for row in report.get("kernels") or []:
        k = kernels[row["name"]]
        k[0] += int(row["calls"])
        k[1] += round(float(row["total_us"]) * 1000)
    copies, sets = [0, 0], [0, 0]
    for row in report.get("copies") or []:
        side = sets if row["kind"] == "Memset" else copies
        side[0] += int(row["count"])
        side[1] += round(float(row["total_us"]) * 1000)
    return {
        "kernels": {n: tuple(v) for n, v in kernels.items()},
        "copies": tuple(copies),
        "sets": tuple(sets),
    }


def compare(replayed: dict, analyzed: dict, calls_per_record_ns: int = 1) -> list[str]:
    """The differences: calls must be equal; times within 1 ns a call (rounding of the stored
    microseconds to the device's nanoseconds)."""
    diffs = []

    def check(what: str, a: tuple, b: tuple) -> None:
        if a[0] != b[0] or abs(a[1] - b[1]) > calls_per_record_ns * max(a[0], b[0]):
            diffs.append(f"{what}: replay {a[0]} calls {a[1]} ns, analyze {b[0]} calls {b[1]} ns")

    for name in sorted(set(replayed["kernels"]) | set(analyzed["kernels"])):
        check(
            f"kernel {name!r}", replayed["kernels"].get(name, (0, 0)), analyzed["kernels"].get(name, (0, 0))
        )
    check("copies", replayed["copies"], analyzed["copies"])
    check("sets", replayed["sets"], analyzed["sets"])
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--json", type=Path, help="write the result here")
    a = ap.parse_args(argv)
    os.environ.setdefault("GPUPROF_CLOCK", "monotonic")  # ticks are nanoseconds: exact durations
    r = replay(a.trace)
    import gpuprof

    analyzed = gpu_tables(gpuprof.analyze(str(a.trace)).to_dict())
    replayed = gpu_tables(r["report"])
    diffs = compare(replayed, analyzed)
    result = {
        "trace": str(a.trace),
        "launches": r["launches"],
        "stats": r["stats"],
        "dropped": r["report"]["metadata"].get("cupti_dropped_records"),
        "gpu_collection": r["report"]["metadata"].get("gpu_collection"),
        "replayed": {**replayed, "kernels": {n: list(v) for n, v in replayed["kernels"].items()}},
        "analyzed": {**analyzed, "kernels": {n: list(v) for n, v in analyzed["kernels"].items()}},
        "differences": diffs,
    }
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    print(
        f"{a.trace.name}: {r['launches']} launches replayed, {len(replayed['kernels'])} kernel names, "
        f"{len(diffs)} differences"
    )
    for d in diffs[:20]:
        print("  " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
