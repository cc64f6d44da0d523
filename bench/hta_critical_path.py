"""gpuprof's critical path against Holistic Trace Analysis's, on the stored GPU traces.

HTA's `critical_path_analysis` takes one annotation instance: here the second `ProfilerStep`
(instance 1; the first when there is one only). For it the script records HTA's path length (the sum
of the weights on its longest path), the step's own length, and HTA's summary by cause, beside
gpuprof's `critical_path` row for the same ProfilerStep number. docs/metrics.md ("Critical path")
explains, by definition, why the two differ where they do.

    pip install traceinsight==0.6.1    # in a separate environment: not a gpuprof dependency
    PYTHONPATH=python python bench/hta_critical_path.py --hta-python /path/to/venv/bin/python \
        [--out bench/results/hta_critical_path-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hta_quantities import GPU_TRACES, ROOT, TRACES  # noqa: E402  (the same traces, compared the same way)

HTA_SIDE = r"""
import json, logging, os, re, shutil, sys, tempfile
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
src = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    shutil.copy(src, os.path.join(d, os.path.basename(src)))
    a = TraceAnalysis(trace_dir=d)
    rank = list(a.t.traces.keys())[0]
    df = a.t.get_trace(rank)
    names = a.t.symbol_table.get_sym_table()
    ids = [i for i, n in enumerate(names) if "ProfilerStep" in n]
    steps = df[df["name"].isin(ids)].sort_values("ts")
    if len(steps) == 0:
        print(json.dumps({"error": "no ProfilerStep"})); sys.exit(0)
    k = 1 if len(steps) > 1 else 0
    # HTA takes the instance by position among the annotation's rows as the trace holds them.
    ann = df[df["name"].isin(ids)]
    row = ann.iloc[k]
    step_name = names[int(row["name"])]
    res = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=k,
                                   data_load_events=[r"enumerate\(DataLoader\)"])
    out = {"instance": k, "step": int(re.search(r"#(\d+)", step_name).group(1)),
           "annotation_us": float(row["dur"])}
    if res is None or not res[1]:
        out["error"] = "HTA's analysis failed"
    else:
        g = res[0]
        edf = g.get_critical_path_breakdown()
        out["length_us"] = float(edf.duration.sum())
        summary = edf.groupby("bound_by").duration.sum() / edf.duration.sum() * 100
        out["by_cause_pct"] = {str(c): round(float(v), 3) for c, v in summary.items() if c}
        top = edf[edf.bound_by.ne("")].groupby("s_name").duration.sum().sort_values(ascending=False)
        out["top"] = [[str(n), float(v)] for n, v in top.head(5).items()]
    print(json.dumps(out))
"""

GPUPROF_SIDE = r"""
import json, sys
from gpuprof.report.build import analyze_file
d = analyze_file(sys.argv[1]).data
step = int(sys.argv[2])
rows = [s for s in d["critical_path"]["steps"] if s["step"] == step]
total = [s["total_us"] for s in d["steps"] if s["step"] == step]
print(json.dumps({"step": step, "row": rows[0] if rows else None,
                  "step_total_us": total[0] if total else None,
                  "steps": len(d["critical_path"]["steps"])}))
"""


def run(python: str, code: str, *args: str, env: dict) -> tuple[dict, float]:
    t0 = time.perf_counter()
    out = subprocess.run([python, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default=sys.executable, help="a Python with traceinsight 0.6.1 installed")
    ap.add_argument(
        "--out",
        default=str(ROOT / "bench" / "results" / f"hta_critical_path-{time.strftime('%Y-%m-%d')}.json"),
    )
    args = ap.parse_args()
    if not TRACES.is_dir():
        print(f"the stored traces are absent: expected {TRACES}", file=sys.stderr)
        return 2
    results = {"hta": "traceinsight 0.6.1 (HTA_DISABLE_NS_ROUNDING=1)", "traces": {}}
    for rel in GPU_TRACES:
        trace = TRACES / rel
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
        try:
            hta, t_hta = run(args.hta_python, HTA_SIDE, str(trace), env=env)
        except subprocess.CalledProcessError as e:
            hta, t_hta = {"error": e.stderr.strip().splitlines()[-1] if e.stderr.strip() else "failed"}, 0.0
        step = hta.get("step")
        ours, t_ours = run(
            sys.executable, GPUPROF_SIDE, str(trace), str(step if step is not None else -1), env=env
        )
        results["traces"][rel] = {
            "hta": hta,
            "gpuprof": ours,
            "seconds": {"hta": round(t_hta, 2), "gpuprof": round(t_ours, 2)},
        }
        print(rel, json.dumps({"hta": hta, "gpuprof": ours}))
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
