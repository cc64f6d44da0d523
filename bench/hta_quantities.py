"""gpuprof's HTA quantities against Holistic Trace Analysis's own, on the stored GPU traces.

For each trace under ../shared/traces with device activity, runs traceinsight (HTA) and gpuprof
and writes both sides: idle time per stream (`get_idle_time_breakdown`, threshold 30 us),
kernel launch statistics (`get_cuda_kernel_launch_stats`, cut-offs 50 us / 100 us) summed over the
trace and per kernel name, queue length per stream (`get_queue_length_summary`,
`get_time_spent_blocked_on_full_queue`), copy bandwidth per kind (`get_memory_bw_summary`) and
operator launch delays per operator and kernel sequence (`get_aten_op_kernels_and_delay`) and,
for the operators of SEQUENCE_OPS, recurring kernel sequences (`get_frequent_cuda_kernel_sequences`).
HTA runs twice: as shipped (it rounds fractional microsecond timestamps: starts up, ends down,
so each duration loses up to 2 us) and with HTA_DISABLE_NS_ROUNDING=1, which keeps the trace's own
times as gpuprof does; the tests hold the second set (tests/python/analysis/test_hta_quantities.py,
test_hta_counters.py).

    pip install traceinsight==0.6.1    # in a separate environment: not a gpuprof dependency
    PYTHONPATH=python python bench/hta_quantities.py [--out bench/results/hta_quantities-DATE.json]

Each side runs in its own process (HTA's options are read from the environment once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
GPU_TRACES = [
    "hta_a100_nccl/rank0.json.gz",
    "hta_v100_ns/rank-0.pt.trace.json.gz",
    "hta_2xv100_ddp/rank0.json.gz",
    "hta_mi250_rocm/rank0.json.gz",
    "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
]

HTA_SIDE = r"""
import json, logging, os, shutil, sys, tempfile
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
src = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    shutil.copy(src, os.path.join(d, os.path.basename(src)))
    a = TraceAnalysis(trace_dir=d)
    rank = list(a.t.traces.keys())[0]
    df = a.t.get_trace(rank)
    names = a.t.symbol_table.get_sym_table()
    idle = a.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
    streams = {}
    for r in idle.itertuples():
        s = streams.setdefault(int(r.stream), {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0})
        s[r.idle_category + "_us"] = float(r.idle_time)
    ev = a.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    gpu = df[df["stream"].ne(-1)][["correlation", "name"]]
    ev = ev.merge(gpu, on="correlation", how="left")
    def summary(e):
        return {
            "launches": int(len(e)),
            "cpu_total_us": float(e.cpu_duration.sum()),
            "gpu_total_us": float(e.gpu_duration.sum()),
            "delay_total_us": float(e.launch_delay.sum()),
            "delay_p50_us": float(e.launch_delay.quantile(0.5)) if len(e) else 0.0,
            "delay_p95_us": float(e.launch_delay.quantile(0.95)) if len(e) else 0.0,
            "delay_max_us": float(e.launch_delay.max()) if len(e) else 0.0,
            "short_kernels": int(((e.cpu_duration <= 50) & (e.gpu_duration < e.cpu_duration)).sum()),
            "runtime_outliers": int((e.cpu_duration > 50).sum()),
            "delay_outliers": int((e.launch_delay > 100).sum()),
        }
    per_name = {names[int(n)]: summary(g) for n, g in ev.groupby("name")}
    series = a.get_queue_length_time_series(ranks=[rank])
    queue = {}
    if rank in series:
        q = a.get_queue_length_summary(ranks=[rank])
        blocked = a.get_time_spent_blocked_on_full_queue(series)
        for (_, stream), r in q.iterrows():
            queue[str(int(stream))] = {"samples": int(r[("queue_length", "count")]),
                                       "mean": float(r[("queue_length", "mean")]),
                                       "max": int(r[("queue_length", "max")]), "blocked_us": 0.0}
        for r in blocked.itertuples():
            queue[str(int(r.stream))]["blocked_us"] = float(r.duration_at_max_queue_length) / 1000.0
    bw = a.get_memory_bw_summary(ranks=[rank])
    copies = {}
    for (_, kind), r in (bw.iterrows() if bw is not None else []):
        copies[kind] = {"samples": int(r[("memory_bw_gbps", "count")])}
        for k, col in (("mean", "mean"), ("min", "min"), ("p50", "50%"), ("max", "max")):
            copies[kind][k + "_gb_per_s"] = float(r[("memory_bw_gbps", col)])
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis
    CudaKernelAnalysis.visualize_aten_op_kernels_and_overhead = classmethod(lambda cls, r, df: None)
    try:
        ops = a.get_aten_op_kernels_and_delay(ranks=[rank])[rank]
        op_delay = {r.aten_op_name + " | " + r.kernel_sequence: {
            "calls": int(r.occurrence_count), "op_delay_us": float(r.avg_aten_op_launch_delay),
            "runtime_delay_us": float(r.avg_runtime_delay)} for r in ops.itertuples()}
    except Exception as e:
        op_delay = {"error": f"{type(e).__name__}: {e}"}
    sequences = {}
    for name in sys.argv[2:]:   # HTA takes one operator name a call
        with tempfile.TemporaryDirectory() as out:
            seq = a.get_frequent_cuda_kernel_sequences(operator_name=name, output_dir=out, rank=rank,
                                                       visualize=False)
        sequences[name] = [{"kernels": r.pattern.split("|")[1:], "count": int(r.count),
                            "gpu_us": float(r[3]), "cpu_us": float(r[4])} for r in seq.itertuples()]
    print(json.dumps({"kernel_sequences": sequences,
                      "idle_time": {str(k): v for k, v in sorted(streams.items())},
                      "launch_stats": summary(ev), "launch_stats_by_name": per_name,
                      "queue_length": queue, "copy_bandwidth": copies, "op_launch_delay": op_delay}))
"""

GPUPROF_SIDE = r"""
import json, sys
from gpuprof.report.build import analyze_file
d = analyze_file(sys.argv[1]).data
idle = {str(r["stream"]): {k: r[k] for k in ("device", "host_wait_us", "kernel_wait_us", "other_us")}
        for r in d["idle_time"]}
rows = d["launch_stats"]
tot = {"launches": sum(r["launches"] for r in rows),
       "cpu_total_us": sum(r["cpu_mean_us"] * r["launches"] for r in rows),
       "gpu_total_us": sum(r["gpu_mean_us"] * r["launches"] for r in rows),
       "delay_total_us": sum(r["delay_total_us"] for r in rows),
       "delay_max_us": max((r["delay_max_us"] for r in rows), default=0.0)}
for k in ("short_kernels", "runtime_outliers", "delay_outliers"):
    tot[k] = sum(r[k] for r in rows)
by_name = {r["name"]: r for r in rows}
queue = {str(r["stream"]): {k: r[k] for k in ("device", "samples", "mean", "max", "blocked_us")}
         for r in d["queue_length"]}
copies = {r["kind"]: r for r in d["copy_bandwidth"]}
full = d.get("long_names") or {}   # a sequence over 1024 bytes is shown shortened
sequences = {name: [{"kernels": full.get(r["kernels"], r["kernels"]).split(" -> "),
                     **{k: r[k] for k in ("count", "gpu_us", "cpu_us")}}
                    for r in d["kernel_sequences"] if r["op"] == name] for name in sys.argv[2:]}
op_delay = {full.get(r["op"], r["op"]) + " | " + full.get(r["kernels"], r["kernels"]):
            {k: r[k] for k in ("calls", "op_delay_us", "runtime_delay_us")} for r in d["op_launch_delay"]}
print(json.dumps({"kernel_sequences": sequences, "idle_time": idle, "launch_stats": tot,
                  "launch_stats_by_name": by_name, "queue_length": queue, "copy_bandwidth": copies,
                  "op_launch_delay": op_delay}))
"""


# The operators whose kernel sequences are compared, per trace (HTA computes one name a call, and
# writes the whole trace again each time).
SEQUENCE_OPS = {"hta_a100_nccl/rank0.json.gz": ["aten::conv2d", "aten::convolution_backward"]}


def run(python: str, code: str, trace: Path, env: dict, ops: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [python, "-c", code, str(trace), *ops], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default=sys.executable, help="a Python with traceinsight 0.6.1 installed")
    ap.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / f"hta_quantities-{time.strftime('%Y-%m-%d')}.json")
    )
    args = ap.parse_args()
    if not TRACES.is_dir():
        print(f"the stored traces are absent: expected {TRACES}", file=sys.stderr)
        return 2
    results = {"hta": "traceinsight 0.6.1", "traces": {}}
    for rel in GPU_TRACES:
        trace = TRACES / rel
        env = dict(os.environ)
        ops = SEQUENCE_OPS.get(rel, [])
        hta_exact, t_hta = run(args.hta_python, HTA_SIDE, trace, {**env, "HTA_DISABLE_NS_ROUNDING": "1"}, ops)
        hta_rounded, _ = run(args.hta_python, HTA_SIDE, trace, {**env, "HTA_DISABLE_NS_ROUNDING": "0"}, [])
        ours, t_ours = run(sys.executable, GPUPROF_SIDE, trace, env, ops)
        results["traces"][rel] = {
            "hta_exact_times": hta_exact,
            "hta_as_shipped": {
                k: hta_rounded[k]
                for k in ("idle_time", "launch_stats", "queue_length", "copy_bandwidth", "op_launch_delay")
            },
            "gpuprof": ours,
            "seconds": {"hta": round(t_hta, 2), "gpuprof": round(t_ours, 2)},
        }
        print(rel, json.dumps({"hta": hta_exact["launch_stats"], "gpuprof": ours["launch_stats"]}))
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
