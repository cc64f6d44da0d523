"""Trace analysis speed: gpuprof vs Holistic Trace Analysis vs the TensorBoard plugin's loader.

Each tool runs in its own subprocess, start-up included, on the same input; we record wall time,
CPU time (user + system, all processes of the tool: robust on a shared machine) and the peak
resident memory (ru_maxrss of the largest process in its tree). Inputs: the 53 MB
hta_2xv100_ddp trace, the 35 MB ResNet-50 trace, and a synthetic 2-million-event trace generated
here. Then gpuprof's own time is split into phases (decompression, JSON parsing + building the
Trace, analysis, report, text rendering, Python start-up) to say what bounds it.

    python bench/analyze_speed.py [--only gpuprof,hta,tb] [--repeat 3] [--timeout 900] [--out results.json]
                                  [--before DIR]   # an earlier gpuprof build, timed in the same run

With --repeat N each tool runs N times per input, the tools taking turns, and the table shows each
tool's fastest run (the run least disturbed by other work on a shared machine) with its CPU time
and peak RSS; the median wall time of the N runs is printed beside it.

Run by hand (not in CI). HTA and the plugin must be installed in the same environment. HTA is
published as `traceinsight` since 0.6 (same `hta` import); in a venv beside the installed gpuprof:
python3 -m venv --system-site-packages VENV && VENV/bin/pip install traceinsight torch-tb-profiler psutil
VENV/bin/python bench/analyze_speed.py ...   (the results record each tool's version)
A venv without --system-site-packages (with PYTHONPATH at the gpuprof to time, plus jinja2) leaves
out the .pth files of the system's site-packages, which every command of every tool pays at start:
the results record the interpreter's start and those files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / ".." / "shared" / "traces"

INPUTS = {
    "hta_2xv100_ddp": TRACES / "hta_2xv100_ddp" / "rank0.json.gz",
    "resnet50_v100": TRACES / "tb_resnet50_v100_nw0" / "worker0.1623143089861.pt.trace.json.gz",
}

# The `gpuprof` command as its console script runs it (cli.entry); a --before build without entry()
# is run as its console script ran it then.
GPUPROF = (
    "import sys, gpuprof.cli as c\n"
    "argv = ['analyze', sys.argv[1], '--json', sys.argv[2]]\n"
    "c.entry(argv) if hasattr(c, 'entry') else sys.exit(c.main(argv))\n"
)
HTA = (
    "import sys, logging; logging.disable(logging.WARNING)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "ta = TraceAnalysis(trace_dir=sys.argv[1])\n"
    "print(ta.get_temporal_breakdown(visualize=False).to_string())\n"
)
TB = (
    "import sys, tempfile, logging; logging.disable(logging.WARNING)\n"
    "from torch_tb_profiler.io.cache import Cache\n"
    "from torch_tb_profiler.profiler.loader import RunLoader\n"
    "if __name__ == '__main__':\n"
    "    run = RunLoader('bench', sys.argv[1], Cache(tempfile.mkdtemp())).load()\n"
    "    profiles = [p for p in run.get_profiles() if getattr(p, 'overview', None)]\n"
    "    assert profiles, 'the plugin produced no overview'\n"
    "    print(len(profiles), 'profiles; steps:', len(profiles[0].overview['steps']['rows']))\n"
)


def synthetic_trace(path: Path, n_events: int = 2_000_000, seed: int = 0) -> Path:
    """A Kineto-style trace of `n_events` complete events: steps of DataLoader + host ops, each op
    launching one kernel (cuda_runtime + kernel sharing a correlation id)."""
    if path.exists():
        return path
    rnd = random.Random(seed)
    ops_per_step = 2000
    ts = 1_700_000_000_000_000.0
    out = gzip.open(path, "wt", compresslevel=1)
    out.write(
        '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU", '
        '"totalGlobalMem": 34089730048, "computeMajor": 8, "computeMinor": 0, '
        '"maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, '
        '"regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, '
        '"sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912}],\n'
        '"traceEvents": [\n'
    )
    written = 0
    corr = 1
    step = 0
    first = True

    def emit(text: str) -> None:
        nonlocal first, written
        out.write(text if first else ",\n" + text)
        first = False
        written += 1

    while written < n_events:
        step_start = ts
        dl = rnd.uniform(50, 500)
        emit(
            '{"ph": "X", "cat": "user_annotation", '
            '"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", '
            f'"pid": 100, "tid": 100, "ts": {ts + 1:.3f}, "dur": {dl:.3f}}}'
        )
        ts += dl + 2
        gpu_ts = ts
        for i in range(ops_per_step):
            if written >= n_events - 4:
                break
            op_dur = rnd.uniform(8, 40)
            emit(
                f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{i % 50}", "pid": 100, "tid": 100, '
                f'"ts": {ts:.3f}, "dur": {op_dur:.3f}, "args": {{"External id": {corr}}}}}'
            )
            emit(
                f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, '
                f'"ts": {ts + 2:.3f}, "dur": 4.5, "args": {{"External id": {corr}, "correlation": {corr}}}}}'
            )
            gpu_ts = max(gpu_ts, ts + 8)
            k_dur = rnd.uniform(3, 60)
            emit(
                f'{{"ph": "X", "cat": "kernel", "name": "kernel_{i % 80}", "pid": 0, "tid": 7, '
                f'"ts": {gpu_ts:.3f}, "dur": {k_dur:.3f}, "args": {{"device": 0, "stream": 7, '
                f'"correlation": {corr}, "External id": {corr}, "registers per thread": 32, '
                f'"shared memory": 0, "blocks per SM": 1.2, "warps per SM": 9.6, "grid": [130, 1, 1], '
                f'"block": [256, 1, 1], "est. achieved occupancy %": 50}}}}'
            )
            gpu_ts += k_dur
            ts += op_dur + 1
            corr += 1
        end = max(ts, gpu_ts) + 5
        emit(
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 100, "tid": 100, '
            f'"ts": {step_start:.3f}, "dur": {end - step_start:.3f}}}'
        )
        ts = end + 1
        step += 1
    out.write('\n], "traceName": "synthetic"}\n')
    out.close()
    return path


def run_with_rss(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    # A tiny wrapper process runs the command and reports its children's ru_maxrss, so that each
    # measurement starts from zero (RUSAGE_CHILDREN of this process would keep the max of all runs).
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "wall = time.perf_counter() - t0\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': p.returncode, 'wall_s': wall, 'peak_rss_kib': ru.ru_maxrss, "
        "'cpu_s': ru.ru_utime + ru.ru_stime, "
        "'stderr_tail': p.stderr.decode(errors='replace')[-600:] if p.returncode else ''}))\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", wrapper, *cmd], capture_output=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"did not finish within {timeout:.0f} s"}
    res = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    res["ok"] = res["rc"] == 0
    return res


def single_file_dir(src: Path, name: str, root: Path) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    link = d / ("worker0.pt.trace.json" + (".gz" if src.suffix == ".gz" else ""))
    if not link.exists():
        link.symlink_to(src.resolve())
    return d


def gpuprof_phases(path: Path, repeats: int = 3) -> dict:
    """gpuprof's time, phase by phase, in this process (best of `repeats`)."""
    code = r"""
import json, sys, time, zlib
t0 = time.perf_counter()
import gpuprof
from gpuprof._native import _core
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
import gpuprof.report.text
try:
    from gpuprof.report.build import build_report
    make_report = lambda trace: build_report(trace, with_step_views=False)
except ImportError:   # a gpuprof from before the one builder (--before)
    make_report = gpuprof.Report.from_trace
t_renderer = time.perf_counter() - t0
path = sys.argv[1]; repeats = int(sys.argv[2])
best = {}
def keep(k, v): best[k] = min(best.get(k, 1e9), v)
raw = open(path, "rb").read()
for _ in range(repeats):
    t = time.perf_counter()
    if raw[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(16 + 15); n = 0
        for i in range(0, len(raw), 1 << 16):
            n += len(d.decompress(raw[i:i + (1 << 16)]))
    keep("inflate_s", time.perf_counter() - t)
    t = time.perf_counter(); trace, stats = _core.import_trace(path)
    keep("import_s", time.perf_counter() - t)
    t = time.perf_counter(); _core.compute_breakdown(trace, True)
    keep("breakdown_s", time.perf_counter() - t)
    t = time.perf_counter(); report = make_report(trace); keep("report_s", time.perf_counter() - t)
    t = time.perf_counter(); str(report); keep("text_render_s", time.perf_counter() - t)
best["python_and_module_import_s"] = t_import
best["renderer_import_s"] = t_renderer
best["json_bytes"] = stats["json_bytes"]; best["events"] = trace.num_events
print(json.dumps(best))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), str(repeats)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}
    ph = json.loads(proc.stdout.strip().splitlines()[-1])
    ph["parse_and_build_s"] = max(ph["import_s"] - ph["inflate_s"], 0.0)
    return ph


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="gpuprof,hta,tb")
    ap.add_argument(
        "--inputs",
        default="hta_2xv100_ddp,resnet50_v100,synthetic_2m",
        help="comma-separated: hta_2xv100_ddp, resnet50_v100, synthetic_2m, and NAME_plain for "
        "the first two as plain JSON (torch.profiler's default output), synthetic_2m_plain",
    )
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool and input (best one kept)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpuprof-bench"))
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument(
        "--before",
        metavar="DIR",
        default=None,
        help="also time an earlier gpuprof (a folder holding its installed `gpuprof` package, "
        "e.g. from `pip install --no-deps --target DIR .` at an older commit) as the tool "
        "gpuprof_before, taking turns with the others",
    )
    args = ap.parse_args()
    tools = args.only.split(",")
    if args.before:
        if not (Path(args.before) / "gpuprof" / "__init__.py").is_file():
            print(f"--before {args.before}: no gpuprof package in that folder", file=sys.stderr)
            return 2
        # Byte-compile it first: a copied package (cp -r gives new mtimes, so its .pyc files are
        # stale) run with PYTHONDONTWRITEBYTECODE=1 compiles every module on every run, 15-25 ms
        # that made earlier builds look slower than they were.
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(Path(args.before) / "gpuprof")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tools.append("gpuprof_before")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)

    inputs = {k: v for k, v in INPUTS.items() if k in args.inputs.split(",")}
    for _k, v in inputs.items():
        if not v.exists():
            print(f"missing {v}: the shared traces are not beside this checkout", file=sys.stderr)
            return 2
    # NAME_plain: the same trace as plain JSON, as torch.profiler writes it by default.
    for name in args.inputs.split(","):
        base = name.removesuffix("_plain")
        if name.endswith("_plain") and base in INPUTS:
            if not INPUTS[base].exists():
                print(
                    f"missing {INPUTS[base]}: the shared traces are not beside this checkout", file=sys.stderr
                )
                return 2
            plain = work / f"{name}.pt.trace.json"
            if not plain.exists():
                with open(plain, "wb") as f:
                    for c in _gunzip_chunks(INPUTS[base]):
                        f.write(c)
            inputs[name] = plain
    if {"synthetic_2m", "synthetic_2m_plain"} & set(args.inputs.split(",")):
        t = time.perf_counter()
        synthetic = synthetic_trace(work / "synthetic_2m.pt.trace.json.gz")
        if "synthetic_2m" in args.inputs.split(","):
            inputs["synthetic_2m"] = synthetic
        if "synthetic_2m_plain" in args.inputs.split(","):
            plain = work / "synthetic_2m_plain.pt.trace.json"
            if not plain.exists():
                with open(plain, "wb") as f:
                    for c in _gunzip_chunks(synthetic):
                        f.write(c)
            inputs["synthetic_2m_plain"] = plain
        print(f"synthetic trace ready ({time.perf_counter() - t:.1f} s)", flush=True)

    results = {}
    for name, path in inputs.items():
        folder = single_file_dir(path, name, work / "dirs")
        json_bytes = (
            sum(len(c) for c in _gunzip_chunks(path)) if path.suffix == ".gz" else path.stat().st_size
        )
        row = {"json_mb": json_bytes / 1e6, "gz_mb": path.stat().st_size / 1e6}
        runs = {tool: [] for tool in tools}
        for _ in range(max(1, args.repeat)):
            for tool in tools:
                if runs[tool] and not runs[tool][-1].get("ok"):
                    continue  # a tool that failed once is not retried
                env = None
                if tool in ("gpuprof", "gpuprof_before"):
                    cmd = [sys.executable, "-c", GPUPROF, str(path), str(work / f"{name}.{tool}.json")]
                    if tool == "gpuprof_before":
                        env = dict(
                            os.environ,
                            PYTHONPATH=os.pathsep.join(
                                [args.before] + [p for p in [os.environ.get("PYTHONPATH")] if p]
                            ),
                        )
                elif tool == "hta":
                    cmd = [sys.executable, "-c", HTA, str(folder)]
                else:
                    cmd = [sys.executable, "-c", TB, str(folder)]
                runs[tool].append(run_with_rss(cmd, args.timeout, env))
        for tool in tools:
            ok = sorted((r for r in runs[tool] if r.get("ok")), key=lambda r: r["wall_s"])
            res = dict(ok[0]) if ok else runs[tool][-1]
            if ok:
                res["runs"] = len(ok)
                res["median_wall_s"] = ok[len(ok) // 2]["wall_s"]
            row[tool] = res
            shown = (
                f"{res['wall_s']:8.2f} s wall {res['cpu_s']:8.2f} s CPU {res['peak_rss_kib'] / 1024:8.0f} MiB"
                f"  (median wall of {res['runs']}: {res['median_wall_s']:.2f} s)"
                if res.get("ok")
                else f"FAILED: {res.get('error') or res.get('stderr_tail')}"
            )
            print(f"{name:16s} {tool:8s} {shown}", flush=True)
        if "gpuprof" in tools:
            row["gpuprof_phases"] = gpuprof_phases(path)
            print(f"{name:16s} phases   {json.dumps(row['gpuprof_phases'])}", flush=True)
        results[name] = row

    print()
    print(
        f"{'input':16s} {'JSON MB':>8s} {'gpuprof s':>10s} {'MiB':>6s} {'HTA x':>8s} {'tb x':>8s} "
        f"{'HTA cpu x':>9s} {'tb cpu x':>9s} {'HTA mem x':>9s} {'tb mem x':>9s} {'gpuprof RSS / JSON':>18s}"
    )
    for name, row in results.items():
        g = row.get("gpuprof", {})

        def ratio(tool, key, row=row, g=g):
            r = row.get(tool, {})
            return f"{r[key] / g[key]:8.1f}" if r.get("ok") and g.get("ok") else "     n/a"

        print(
            f"{name:16s} {row['json_mb']:8.1f} {g.get('wall_s', float('nan')):10.2f} "
            f"{g.get('peak_rss_kib', 0) / 1024:6.0f} {ratio('hta', 'wall_s')} {ratio('tb', 'wall_s')} "
            f"{ratio('hta', 'cpu_s'):>9s} {ratio('tb', 'cpu_s'):>9s} "
            f"{ratio('hta', 'peak_rss_kib'):>9s} {ratio('tb', 'peak_rss_kib'):>9s} "
            f"{g.get('peak_rss_kib', 0) * 1024 / (row['json_mb'] * 1e6):18.2f}"
        )
    if args.before:
        print()
        for name, row in results.items():
            g, b = row.get("gpuprof", {}), row.get("gpuprof_before", {})
            if g.get("ok") and b.get("ok"):
                print(
                    f"{name:16s} before {b['wall_s']:.3f} s wall / {b['cpu_s']:.3f} s CPU / "
                    f"{b['peak_rss_kib'] / 1024:.0f} MiB -> now {g['wall_s']:.3f} s / {g['cpu_s']:.3f} s / "
                    f"{g['peak_rss_kib'] / 1024:.0f} MiB ({100 * (g['wall_s'] / b['wall_s'] - 1):+.0f}% wall)"
                )
    if args.out:
        results["_environment"] = environment()
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def hta_distribution():
    """The distribution whose `hta` package this Python imports (traceinsight or the older
    HolisticTraceAnalysis), None when there is none."""
    import importlib.util
    from importlib import metadata

    spec = importlib.util.find_spec("hta")
    if spec is None or not spec.origin:
        return None
    for dist in ("traceinsight", "HolisticTraceAnalysis"):
        try:
            if str(metadata.distribution(dist).locate_file("hta/__init__.py")) == spec.origin:
                return dist
        except metadata.PackageNotFoundError:
            continue
    return None


def environment() -> dict:
    """What the figures were measured with: each tool's installed version, pandas', Python's, the
    gpuprof commit, the machine's CPUs (their model: the figures move with it) and load."""
    from importlib import metadata

    def version(dist: str):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpuprof_commit": commit or None,
        "python": sys.version.split()[0],
        "traceinsight": version("traceinsight"),
        "holistictraceanalysis": version("HolisticTraceAnalysis"),
        # Both may be installed (a venv over the system's site-packages): the one `import hta` finds.
        "hta_imported_from": hta_distribution(),
        "torch_tb_profiler": version("torch-tb-profiler"),
        "pandas": version("pandas"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "load_average": os.getloadavg(),
        "venv": sys.prefix != sys.base_prefix,
        "interpreter_start_s": interpreter_start(),
        "site_pth_files": site_pth_files(),
    }


def interpreter_start(runs: int = 7) -> float:
    """`python -c pass`'s best wall time: every tool's command pays it, .pth files included."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        best = min(best, time.perf_counter() - t0)
    return round(best, 4)


def site_pth_files() -> list[str]:
    """The .pth files the interpreter runs at start (a sandbox's or a tool's own can cost ms)."""
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return sorted(p.name for d in dirs if os.path.isdir(d) for p in Path(d).glob("*.pth"))


def cpu_model() -> str | None:
    """The CPU's model name and family/model numbers from /proc/cpuinfo (None elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    fields = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if not key.strip():
            break  # the first CPU's block ends
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name")
    return f"{name} (family {fields.get('cpu family')}, model {fields.get('model')})" if name else None


def _gunzip_chunks(path: Path):
    d = zlib.decompressobj(16 + 15)
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            yield d.decompress(block)


if __name__ == "__main__":
    sys.exit(main())
