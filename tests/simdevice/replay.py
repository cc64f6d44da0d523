"""Replays a stored GPU trace through the simulated device under the real CUPTI collector, and
compares the report with `gpuprof analyze` of the same trace.

    python3 tests/simdevice/replay.py TRACE [--json OUT.json]

The trace is read with gpuprof's importer (so both sides start from the same events) and replayed
at its own relative times, one thread per host thread of the trace:

- host events (operators, user ranges, ProfilerStep ranges, ...) through the collector's own entry
  point `collector_record`, with their times and external ids, so the live trace has the same steps
  and operators;
- each runtime or driver call through the stand-in CUPTI on that thread, inside a push / pop of its
  operator's external id through the calls the RecordFunction hooks make (`gpu_external_push` /
  `gpu_external_pop`, which also tell the collector the thread's CUPTI and OS ids, so API records
  land on the operator's thread), so CUPTI makes the API record, an
  EXTERNAL_CORRELATION record and the records of the device work the call started (kernels with
  their grid, block, registers and shared memory; copies with their kinds; sets), all with the
  trace's times, delivered through gpuprof's buffer callbacks and decoded by its collector;
- the devices the trace names (its deviceProperties) presented by the stand-in driver, so SM
  efficiency and occupancy use the same device properties.

The collector's trace then goes through the report builder that `gpuprof analyze` uses. Compared:
every step's time per category, GPU utilization, SM efficiency and achieved occupancy per device,
kernel rows (calls, total time), kernel-by-operator rows and copy / set totals. What the collector
cannot see the same way is taken out of the stored side first (`as_collected`), and listed in the
result with its count and time:
- runtime calls gpuprof asks CUPTI not to record (state queries such as cudaStreamIsCapturing; they
  are replayed, and the stand-in CUPTI makes no record of them, as gpuprof asked);
- API calls that have no CUPTI callback id (HIP calls of a ROCm trace are replayed as their CUDA
  namesakes where one exists, the others are left out);
- Kineto's own GPU-side annotations (gpu_user_annotation), which CUPTI does not make;
- the external id of device work whose call was left out (CUPTI correlates work with its call);
- Kineto's estimated occupancy per kernel: CUPTI records carry none, so the live report computes
  occupancy with gpuprof's own rules from the kernel's launch and the device's properties.
The exit status is 1 when they differ. Test-only: run from a checkout with gpuprof installed or on
PYTHONPATH."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simdevice import Replay, SimDevice  # noqa: E402

KIND_RUNTIME, KIND_DRIVER = 5, 6  # CUPTI_ACTIVITY_KIND_*
DOMAIN = {"runtime": 2, "driver": 1}  # CUPTI_CB_DOMAIN_*_API
HOST_KINDS = {"host_op", "user_range", "step", "python_function", "other"}
DEVICE_WORK = {"kernel": 0, "memcpy": 1, "memset": 2}
DEVICE_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}  # CUPTI_ACTIVITY_MEMCPY_KIND_*
MEMORY_KINDS = {"pageable": 1, "pinned": 2, "device": 3, "array": 4, "managed": 5}  # ..._MEMORY_KIND_*
STATE_QUERIES = {  # cupti_decode.cpp's is_state_query_runtime_api: never recorded live
    "cudaGetDevice cudaSetDevice cudaGetLastError cudaPeekAtLastError cudaGetDeviceCount "
    "cudaDeviceGetAttribute cudaStreamIsCapturing cudaStreamGetCaptureInfo cudaFuncGetAttributes "
    "cudaDriverGetVersion cudaRuntimeGetVersion cudaGetDeviceProperties"
}
STATE_QUERIES = set(next(iter(STATE_QUERIES)).split())
WORK_DRIVER_PREFIXES = (  # cupti_decode.cpp's is_work_driver_api: the driver calls recorded live
    "cuLaunch cuGraphLaunch cuMemcpy cuMemset cuStreamSynchronize cuCtxSynchronize cuEventSynchronize "
    "cuStreamWaitEvent"
).split()


def api_name_to_cbid(name: str, ids: dict) -> int | None:
    if name in ids:
        return ids[name]
    if name.startswith("hip") and "cuda" + name[3:] in ids:
        return ids["cuda" + name[3:]]
    return None


def recorded_live(kind: str, name: str) -> bool:
    """Whether gpuprof keeps this API call (the decoder's rules, by the CUDA name)."""
    cuda = "cuda" + name[3:] if name.startswith("hip") else name
    if kind == "runtime":
        return cuda not in STATE_QUERIES
    return any(name.startswith(p) for p in WORK_DRIVER_PREFIXES)


def _load(path: Path):
    from gpuprof import _core
    from gpuprof.traces.read import import_trace

    trace, _ = import_trace(str(path))
    return _core.trace_events(trace, None, None), _core.trace_devices(trace)


def plan(events: list, ids: dict) -> dict:
    """What is replayed and what is left out (with why), from the imported events."""
    api = [e for e in events if e["kind"] in DOMAIN]
    api_by_corr = {}
    left_out: dict = defaultdict(lambda: [0, 0])
    replayed_api = []
    for e in api:
        cbid = api_name_to_cbid(e["name"], ids[e["kind"]])
        if cbid is None:
            why = f"no CUPTI callback id: {e['kind']} {e['name']}"
            left_out[why][0] += 1
            left_out[why][1] += e["dur_ns"]
            continue
        replayed_api.append((e, cbid))  # calls gpuprof switches off are made: CUPTI records none
        api_by_corr.setdefault(e["correlation"], e)
    work = [e for e in events if e["kind"] in DEVICE_WORK]
    by_corr = defaultdict(list)
    orphans = []
    for w in work:
        if w["correlation"] in api_by_corr:
            by_corr[w["correlation"]].append(w)
        else:
            orphans.append(w)
    for e in events:
        if e["kind"] not in HOST_KINDS and e["kind"] not in DOMAIN and e["kind"] not in DEVICE_WORK:
            why = f"not made by CUPTI: {e['kind']} events"
            left_out[why][0] += 1
            left_out[why][1] += e["dur_ns"]
    return {
        "host": [e for e in events if e["kind"] in HOST_KINDS],
        "api": replayed_api,
        "work_by_corr": by_corr,
        "orphans": orphans,
        "left_out": {k: tuple(v) for k, v in left_out.items()},
        "switched_off": sum(1 for e, _ in replayed_api if not recorded_live(e["kind"], e["name"])),
    }


def _work(w: dict, t: int, into: Replay) -> None:
    into.what = DEVICE_WORK[w["kind"]]
    into.name = w["name"].encode() if w["kind"] == "kernel" else None
    into.start, into.end = t, t + w["dur_ns"]
    into.correlation = w["correlation"] & 0xFFFFFFFF
    into.device = max(w["device"], 0)
    into.stream = max(int(w["tid"]), 0) if isinstance(w["tid"], int) else 0
    if w["kind"] == "kernel":
        into.grid[:] = [max(v, 0) for v in w["grid"]]
        into.block[:] = [max(v, 0) for v in w["block"]]
        into.registers = max(w["registers_per_thread"], 0)
        into.shared_mem = max(w["shared_mem_bytes"], 0)
    else:
        into.bytes = max(w["bytes"], 0)
        into.copy_kind = COPY_KINDS.get(w["copy_kind"], 0)
        into.src_kind = MEMORY_KINDS.get(w["src_kind"], 0)
        into.dst_kind = MEMORY_KINDS.get(w["dst_kind"], 0)


def _replay_thread(dev: SimDevice, host: list, api: list, work_by_corr: dict, at, errors: list) -> None:
    from gpuprof import _core

    try:
        items = [(e["start_ns"], 0, e, None) for e in host] + [(e["start_ns"], 1, e, c) for e, c in api]
        items.sort(key=lambda i: (i[0], i[1]))
        for _, is_api, e, cbid in items:
            start = at(e["start_ns"])
            if not is_api:
                _core.collector_record(e["kind"], e["name"], start, start + e["dur_ns"], e["external_id"])
                continue
            ext = e["external_id"]
            if ext:  # as the hooks push it: gpuprof's own call, which pushes to CUPTI
                _core.gpu_external_push(ext)
            works = work_by_corr.get(e["correlation"], [])
            for i, w in enumerate(works or [None]):
                r = Replay()
                if i == 0:
                    r.api_kind = KIND_RUNTIME if e["kind"] == "runtime" else KIND_DRIVER
                    r.cbid, r.api_start, r.api_end = cbid, start, start + e["dur_ns"]
                    r.correlation = e["correlation"] & 0xFFFFFFFF
                r.what = -1
                if w is not None:
                    _work(w, at(w["start_ns"]), r)
                dev.replay(r)
            if ext:
                _core.gpu_external_pop()
    except BaseException as e:  # reported by the caller
        errors.append(repr(e))


def replay(trace: Path, dev: SimDevice) -> dict:
    """The live report of the replayed trace, and the plan (what was left out)."""
    events, devices = _load(trace)
    if devices:
        by_id = {d["id"]: d for d in devices}
        dev.set_devices([dict(by_id.get(i, devices[0]), id=i) for i in range(max(by_id) + 1)])
    ids = {k: dev.api_ids(d) for k, d in DOMAIN.items()}
    p = plan(events, ids)
    from gpuprof import _core
    from gpuprof.collect.gpu import GpuCollection
    from gpuprof.report.build import build_report

    if _core.collector_ticks_are_tsc():
        raise SystemExit("replay.py needs GPUPROF_CLOCK=monotonic (ticks in nanoseconds)")
    t0 = min(e["start_ns"] for e in events)
    t1 = max(e["start_ns"] + e["dur_ns"] for e in events)
    max_events = 4 * len(events) + 100_000
    _core.collector_start(max_events)
    gpu = GpuCollection(True, max_events)
    gpu.start()
    base = _core.collector_ticks() + 1_000_000

    def at(ns: int) -> int:
        return base + ns - t0

    tids = sorted({e["tid"] for e in p["host"]} | {e["tid"] for e, _ in p["api"]}, key=str)
    errors: list = []
    threads = [
        threading.Thread(
            target=_replay_thread,
            args=(
                dev,
                [e for e in p["host"] if e["tid"] == tid],
                [(e, c) for e, c in p["api"] if e["tid"] == tid],
                p["work_by_corr"],
                at,
                errors,
            ),
        )
        for tid in tids
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for w in p["orphans"]:  # device work whose call the trace does not hold
        r = Replay()
        _work(w, at(w["start_ns"]), r)
        dev.replay(r)
    while _core.collector_ticks() < at(t1) + 1_000_000:  # the span ends after the trace's last event
        time.sleep(min(0.05, (at(t1) + 1_000_000 - _core.collector_ticks()) / 1e9 + 1e-3))
    gpu.flush()
    _core.collector_stop()
    live = _core.collector_drain()
    live.metadata = {"source": "gpuprof simulated-device replay"}
    gpu.drain_into(live)
    gpu.stop()
    gpu.release()
    if errors:
        raise RuntimeError("replay failed: " + "; ".join(errors[:3]))
    report = build_report(live, source={"kind": "replay", "path": str(trace)}).to_dict()
    return {"report": report, "plan": p, "stats": dev.stats(), "events": len(events)}


def as_collected(trace: Path, ids: dict, out: Path) -> dict:
    """A copy of the stored trace without what the live collector cannot record the same way (the
    module docstring's list), written to `out`; returns what was taken out (count, microseconds)."""
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    kinds = {"cuda_runtime": "runtime", "Runtime": "runtime", "cuda_driver": "driver"}
    removed: dict = defaultdict(lambda: [0, 0.0])
    kept, uncorrelated = [], set()
    for e in doc.get("traceEvents", []) if isinstance(doc, dict) else doc:
        cat, name = e.get("cat"), str(e.get("name", ""))
        why = None
        if cat == "gpu_user_annotation":
            why = "not made by CUPTI: gpu_user_annotation"
        elif cat in kinds and e.get("ph") == "X":
            if api_name_to_cbid(name, ids[kinds[cat]]) is None:
                why = f"no CUPTI callback id: {kinds[cat]} {name}"
            elif not recorded_live(kinds[cat], name):
                why = f"not recorded by gpuprof (state query / no work): {name}"
        if why is not None:
            removed[why][0] += 1
            removed[why][1] += float(e.get("dur", 0) or 0)
            if cat in kinds:
                uncorrelated.add((e.get("args") or {}).get("correlation"))
            continue
        kept.append(e)
    for e in kept:
        args = e.get("args")
        if e.get("cat") in DEVICE_CATS and isinstance(args, dict):
            args.pop("est. achieved occupancy %", None)
            if args.get("correlation") in uncorrelated:  # CUPTI correlates work only with its call
                removed["device work of a call left out: no external id"][0] += 1
                args.pop("External id", None)
                args.pop("external id", None)
    if isinstance(doc, dict):
        doc["traceEvents"] = kept
    else:
        doc = kept
    out.write_text(json.dumps(doc))
    return {k: [v[0], round(v[1], 3)] for k, v in removed.items()}


def tables(report: dict) -> dict:
    """The compared parts of a report, keyed for comparison."""
    cats = [k for k in (report.get("average") or {}) if k.endswith("_us") and k != "total_us"]
    steps = {s["step"]: {k: s.get(k, 0.0) for k in ["total_us"] + cats} for s in report.get("steps") or []}
    devices = {
        d["id"]: {k: d.get(k) for k in ("utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct")}
        for d in report.get("devices") or []
    }

    def rows(key: str, name) -> dict:
        out: dict = defaultdict(lambda: [0, 0.0])
        for r in report.get(key) or []:
            o = out[name(r)]
            o[0] += int(r.get("calls", r.get("count", 0)))
            o[1] += float(r["total_us"])
        return {k: tuple(v) for k, v in out.items()}

    return {
        "steps": steps,
        "devices": devices,
        "kernels": rows("kernels", lambda r: r["name"]),
        "kernel_ops": rows("kernel_ops", lambda r: f"{r['kernel']} <- {r['operator']}"),
        "copies": rows("copies", lambda r: "Memset" if r["kind"] == "Memset" else "copies"),
    }


def compare(replayed: dict, analyzed: dict) -> list[str]:
    """The differences beyond the tolerances: per step, each category within 1% of the step's time;
    utilization, SM efficiency and occupancy within 0.5 points; rows: calls equal, time within 1%."""
    diffs = []
    for step in sorted(set(replayed["steps"]) | set(analyzed["steps"])):
        a, b = replayed["steps"].get(step), analyzed["steps"].get(step)
        if a is None or b is None:
            diffs.append(f"step {step}: {'replay' if a is None else 'analyze'} lacks it")
            continue
        tol = 0.01 * max(b["total_us"], 1e-9)
        for k in b:
            if abs(a.get(k, 0.0) - b[k]) > tol:
                diffs.append(f"step {step} {k}: replay {a.get(k, 0.0):.3f}, analyze {b[k]:.3f}")
    for dev in sorted(set(replayed["devices"]) | set(analyzed["devices"])):
        a, b = replayed["devices"].get(dev, {}), analyzed["devices"].get(dev, {})
        for k in ("utilization_pct", "sm_efficiency_pct", "achieved_occupancy_pct"):
            x, y = a.get(k), b.get(k)
            if (x is None) != (y is None) or (x is not None and abs(x - y) > 0.5):
                diffs.append(f"device {dev} {k}: replay {x}, analyze {y}")
    for table in ("kernels", "kernel_ops", "copies"):
        ra, rb = replayed[table], analyzed[table]
        for name in sorted(set(ra) | set(rb)):
            a, b = ra.get(name, (0, 0.0)), rb.get(name, (0, 0.0))
            if a[0] != b[0] or abs(a[1] - b[1]) > 0.01 * max(a[1], b[1]) + 1e-3:
                diffs.append(
                    f"{table} {name!r}: replay {a[0]} calls {a[1]:.3f} us, analyze {b[0]} calls {b[1]:.3f} us"
                )
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--json", type=Path, help="write the result here")
    a = ap.parse_args(argv)
    os.environ.setdefault("GPUPROF_CLOCK", "monotonic")  # ticks are nanoseconds: exact times
    dev = SimDevice()
    r = replay(a.trace, dev)
    import gpuprof

    ids = {k: dev.api_ids(d) for k, d in DOMAIN.items()}
    with tempfile.TemporaryDirectory() as tmp:
        stored = Path(tmp) / "as_collected.json"
        removed = as_collected(a.trace, ids, stored)
        analyzed = tables(gpuprof.analyze(str(stored)).to_dict())
    raw = tables(gpuprof.analyze(str(a.trace)).to_dict())
    replayed = tables(r["report"])
    diffs = compare(replayed, analyzed)
    md = r["report"]["metadata"]

    def jsonable(t: dict) -> dict:
        return {k: {str(n): v for n, v in t[k].items()} for k in t}

    result = {
        "trace": str(a.trace),
        "events": r["events"],
        "api_replayed": len(r["plan"]["api"]),
        "device_work_without_call": len(r["plan"]["orphans"]),
        "calls_gpuprof_switches_off": r["plan"]["switched_off"],
        "left_out": {k: list(v) for k, v in r["plan"]["left_out"].items()},
        "taken_out_of_stored": removed,
        "stats": r["stats"],
        "dropped": md.get("cupti_dropped_records"),
        "gpu_collection": md.get("gpu_collection"),
        "replayed": jsonable(replayed),
        "analyzed": jsonable(analyzed),
        "analyzed_as_stored": jsonable(raw),
        "differences": diffs,
    }
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    print(
        f"{a.trace.name}: {r['events']} events, {len(replayed['steps'])} steps, "
        f"{len(replayed['kernels'])} kernel names, {len(diffs)} differences"
    )
    for d in diffs[:20]:
        print("  " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
