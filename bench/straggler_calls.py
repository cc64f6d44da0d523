"""How often the straggler call is right on a busy host: real gloo DDP jobs (tests/python/_ddp_job.py)
with two busy loops competing for the CPUs, half with a real sleep in one rank (its forward or its
data loading), half clean.

    python bench/straggler_calls.py [--runs 20] [--world 2] [--delay-ms 40] [--busy 2] [--json OUT]

A slow job is called right when rank 0's report names exactly the slowed rank; a clean job when it
names none. docs/distributed.md gives the figures of the last run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).resolve().parents[1] / "tests" / "python" / "_ddp_job.py"
BUSY = "import time\nend = time.time() + 3600\nwhile time.time() < end:\n    pass\n"


def one_job(world: int, slow: int | None, delay_ms: float, where: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        args = [sys.executable, str(JOB), out, "--world", str(world), "--steps", "6"]
        if slow is not None:
            args += ["--slow-rank", str(slow), "--delay-ms", str(delay_ms), "--where", where]
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        path = Path(out) / "rank0.json"
        if not path.is_file():
            return {"ok": False, "error": done.stderr[-500:]}
        r0 = json.loads(path.read_text())
    named = [s["rank"] for s in r0.get("stragglers") or []]
    return {"ok": True, "named": named, "right": named == ([slow] if slow is not None else [])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="jobs of each kind (slow, clean)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--delay-ms", type=float, default=40.0)
    p.add_argument("--busy", type=int, default=2, help="busy loops competing for the CPUs")
    p.add_argument("--json", metavar="OUT")
    args = p.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    t0 = time.time()
    try:
        slow_runs = [
            one_job(args.world, args.world - 1, args.delay_ms, "forward" if i % 2 else "dataset")
            for i in range(args.runs)
        ]
        clean_runs = [one_job(args.world, None, 0.0, "forward") for _ in range(args.runs)]
    finally:
        for b in busy:
            b.kill()
    result = {
        "runs_each": args.runs,
        "world": args.world,
        "delay_ms": args.delay_ms,
        "busy_loops": args.busy,
        "slow_named_right": sum(r.get("right", False) for r in slow_runs),
        "clean_named_none": sum(r.get("right", False) for r in clean_runs),
        "failed_jobs": sum(not r["ok"] for r in slow_runs + clean_runs),
        "wall_s": round(time.time() - t0, 1),
        "slow": slow_runs,
        "clean": clean_runs,
    }
    print(
        f"slowed rank named in {result['slow_named_right']} of {args.runs} slow jobs; "
        f"no straggler named in {result['clean_named_none']} of {args.runs} clean jobs "
        f"({args.world} ranks, {args.delay_ms:g} ms delay, {args.busy} busy loops, {result['wall_s']} s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
