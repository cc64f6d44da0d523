"""Sustained throughput of the real CUPTI collector: 1,000,000 kernel records a second for 10
seconds, made by the simulated device's own thread inside one gpuprof span, every record accounted
for (tests/simdevice/throughput.py says how).

    python bench/simdevice_throughput.py [--rate 1000000] [--seconds 10] [--json OUT.json]

Two runs, each in a fresh interpreter: with gpuprof.profile's default event budget (4,000,000 a
span: the records past it are counted as dropped, and memory stays bounded by the budget) and with a
budget above the records made (all of them in the report: the memory a span of that size takes).
Writes bench/results/simdevice_throughput-DATE.json unless --json says otherwise. Needs a C compiler
and the CUDA 13 headers (the stand-ins are built on first use)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(rate: int, seconds: float, max_events: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        subprocess.run(
            [sys.executable, str(ROOT / "tests" / "simdevice" / "throughput.py"), str(rate), str(seconds),
             str(max_events), str(out)],
            env=dict(os.environ, GPUPROF_CLOCK="monotonic"),
            check=True,
        )  # fmt: skip
        r = json.loads(out.read_text())
    r["accounted"] = r["made"] == r["in_report"] + r["report_dropped"]
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    made = int(a.rate * a.seconds)
    runs = [one(a.rate, a.seconds, 4_000_000), one(a.rate, a.seconds, made + 100_000)]
    for r in runs:
        print(
            f"budget {r['max_events']:>10,}: made {r['made']:,} in {r['producer']['elapsed_s']:.2f} s "
            f"(max lag {r['producer']['max_lag_ms']:.1f} ms), in report {r['in_report']:,}, dropped "
            f"{r['report_dropped']:,} (CUPTI {r['cupti_dropped_records']:,}), accounted {r['accounted']}, "
            f"decode {r['decode_ns_per_record']:.0f} ns/record, RSS {r['rss_before_mib']:.0f} -> peak "
            f"{r['vm_hwm_mib']:.0f} MiB"
        )
    out = a.json or ROOT / "bench" / "results" / f"simdevice_throughput-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(
        json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "runs": runs}, indent=1) + "\n"
    )
    print(f"wrote {out}")
    return 0 if all(r["accounted"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
