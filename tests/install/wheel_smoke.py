"""What an installed gpuprof must do in an environment WITHOUT torch: analyse a trace, render it,
diff and check it, and say plainly that live profiling needs torch. Run by CI against a wheel
repaired with auditwheel and installed into a fresh venv, and by cibuildwheel's test step.
Exits non-zero with the reason on the first thing that is wrong."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent


def trace() -> dict:
    # Two training steps as torch.profiler writes them (microseconds): a DataLoader wait of 300 us
    # then 600 us of CPU operators in step 1, and 900 us of operators in step 2.
    ev = []
    for step, start in ((1, 1000), (2, 2000)):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 1000,
            }
        )
    ev += [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "pid": 1,
            "tid": 1,
            "ts": 1000,
            "dur": 300,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 1300, "dur": 600},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 2000, "dur": 900},
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def gpuprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "gpuprof"), *args], capture_output=True, text=True, timeout=300)


def need(ok: bool, what: str, proc: subprocess.CompletedProcess | None = None) -> None:
    if not ok:
        detail = f"\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}" if proc else ""
        sys.exit(f"wheel smoke test: {what}{detail}")


def main() -> int:
    need(
        importlib.util.find_spec("torch") is None,
        "torch is installed here; this test needs an environment without it",
    )
    need(
        importlib.util.find_spec("gpuprof._core_testing") is None,
        "the wheel ships gpuprof._core_testing, the test suite's trace builders (built only with "
        "GPUPROF_TESTING_MODULE=ON, which a wheel build leaves off)",
    )
    work = Path(tempfile.mkdtemp(prefix="gpuprof-wheel-"))
    path = work / "rank0.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace(), f)

    proc = gpuprof("analyze", str(path), "--json", str(work / "a.json"))
    need(proc.returncode == 0, "gpuprof analyze failed", proc)
    data = json.loads((work / "a.json").read_text())
    steps = data["steps"]
    need(len(steps) == 2, f"expected 2 steps, got {len(steps)}", proc)
    need(
        abs(steps[0]["total_us"] - 1000) < 1e-6 and abs(steps[0]["dataloader_us"] - 300) < 1e-6,
        f"step 1 should be 1000 us with 300 us in the DataLoader: {steps[0]}",
        proc,
    )

    for fmt in ("text", "md", "html", "json"):
        out = work / f"r.{fmt}"
        proc = gpuprof("report", str(work / "a.json"), "-f", fmt, "-o", str(out))
        need(proc.returncode == 0 and out.stat().st_size > 0, f"gpuprof report -f {fmt} failed", proc)
    proc = gpuprof("diff", str(work / "a.json"), str(work / "a.json"))
    need(proc.returncode == 0, "gpuprof diff failed", proc)
    proc = gpuprof("check", str(work / "a.json"), "--max", "step_time_ms=100")
    need(proc.returncode == 0, "gpuprof check failed", proc)
    proc = gpuprof("doctor")
    need(
        proc.returncode == 0 and "torch cannot be imported" in proc.stdout,
        "gpuprof doctor should say torch is missing",
        proc,
    )

    # A live session without torch: one clear line, not a traceback.
    code = "import gpuprof\nwith gpuprof.profile() as p:\n    p.step()\n    p.step()\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    need(
        "Traceback" not in proc.stderr and "torch is not installed" in proc.stderr,
        "a live session without torch should say torch is not installed, in one line",
        proc,
    )

    # The peak table is data shipped in the wheel (gpuprof/analysis/peaks.csv), not code.
    code = "from gpuprof.analysis import peaks\nprint(peaks.match_device('NVIDIA H100 80GB HBM3').device)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    need(proc.returncode == 0 and proc.stdout.strip() == "H100 SXM", "the wheel's peak table", proc)
    print(
        "wheel smoke test passed: analyze, report (4 formats), diff, check, doctor, live session "
        f"without torch, peak table ({os.path.basename(sys.executable)} {sys.version.split()[0]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
