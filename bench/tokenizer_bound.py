"""Would simdjson make gpuprof's import faster? The JSON tokenizer alone, gpuprof's hand-written reader
(cpp/src/io/json_sax.h) against simdjson's On-Demand and DOM APIs, and gpuprof's whole import beside
them, on the same plain-JSON text, one thread, CPU time (robust on a shared machine), best of
--repeat, the readers taking turns (bench/tokenizer_bound.cpp says what each reader visits).

    apt-get install libsimdjson-dev g++ zlib1g-dev   # simdjson only for this benchmark
    python bench/tokenizer_bound.py [--repeat 5] [--out results.json] [FILE.json[.gz] ...]

Without FILEs: the synthetic 2-million-event trace of bench/analyze_speed.py and the two public
samples beside the repository (../shared/traces), when there; gzip files are inflated first (the
tokenizers read plain text). Needs gpuprof's native module for the whole import.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from import_threads import SAMPLES  # the two public samples (bench/ is this script's folder)

REPO = Path(__file__).resolve().parents[1]
IO = REPO / "cpp" / "src" / "io"


def build(out: Path) -> Path:
    exe = out / "tokenizer_bound"
    cmd = ["g++", "-O3", "-std=c++17", f"-I{IO}", f"-I{REPO / 'cpp' / 'src'}",
           str(REPO / "bench" / "tokenizer_bound.cpp"), str(IO / "text_stream.cpp"),
           str(IO / "raw_inflate.cpp"), str(IO / "crc32.cpp"),
           "-lsimdjson", "-lz", "-lpthread", "-o", str(exe)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return exe


def import_cpu_s(path: Path, repeat: int) -> tuple:
    """gpuprof's whole import (reading, tokenizing, building the Trace) on one thread: best CPU seconds."""
    from gpuprof import _core

    best, records = float("inf"), 0
    for _ in range(repeat):
        t = time.process_time()
        trace, stats = _core.import_trace(os.fsencode(path), import_cpus=1)
        best = min(best, time.process_time() - t)
        records = stats["records"]
        del trace
    return best, records


def measure(exe: Path, path: Path, repeat: int) -> dict:
    readers: dict = {}
    whole = []
    for _ in range(repeat):  # turns: the tokenizers' run, then the whole import
        # Two rounds a run: simdjson's parsers allocate their index on first use (page faults).
        proc = subprocess.run([str(exe), str(path), "2"], capture_output=True, text=True, check=True)
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            if "reader" in row:
                prev = readers.get(row["reader"])
                if prev is None or row["cpu_s"] < prev["cpu_s"]:
                    readers[row["reader"]] = row
            else:
                info = row
        whole.append(import_cpu_s(path, 1))
    size = path.stat().st_size
    out = {"json_mb": size / 1e6, **info}
    for name, row in readers.items():
        out[f"{name}_cpu_s"] = row["cpu_s"]
        out[f"{name}_gb_s"] = size / row["cpu_s"] / 1e9
    out["gpuprof_import_cpu_s"] = min(s for s, _n in whole)
    out["gpuprof_import_gb_s"] = size / out["gpuprof_import_cpu_s"] / 1e9
    out["records"] = whole[0][1]
    out["ondemand_over_sax"] = out["ondemand_cpu_s"] / out["sax_cpu_s"]
    out["ondemand_chunks_over_sax"] = out["ondemand-chunks_cpu_s"] / out["sax_cpu_s"]
    out["sax_share_of_import"] = out["sax_cpu_s"] / out["gpuprof_import_cpu_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            exe = build(work)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"tokenizer_bound: cannot build bench/tokenizer_bound.cpp ({e}): needs g++ and "
                  "libsimdjson-dev (apt-get install libsimdjson-dev)", file=sys.stderr)  # fmt: skip
            return 2
        files = list(args.files)
        if not files:
            from analyze_speed import synthetic_trace

            files = [synthetic_trace(work / "synthetic_2m.pt.trace.json.gz")]
            files += [p for p in SAMPLES if p.exists()]
        results = {}
        for f in files:
            plain = f
            if f.name.endswith(".gz"):
                plain = work / f.name[:-3]
                plain.write_bytes(gzip.decompress(f.read_bytes()))
            results[plain.name] = r = measure(exe, plain, args.repeat)
            print(
                f"{plain.name}: {r['json_mb']:.1f} MB, {r['records']:,} records; one core, CPU time: "
                f"gpuprof tokenizer {r['sax_gb_s']:.2f} GB/s, simdjson On-Demand {r['ondemand_gb_s']:.2f} "
                f"GB/s (in 1 MiB chunks {r['ondemand-chunks_gb_s']:.2f}, args skipped "
                f"{r['ondemand-skip-args_gb_s']:.2f}), simdjson DOM {r['dom_gb_s']:.2f} "
                f"GB/s; gpuprof's whole import {r['gpuprof_import_gb_s']:.2f} GB/s (the tokenizer "
                f"{100 * r['sax_share_of_import']:.0f}% of it); On-Demand / gpuprof tokenizer "
                f"{r['ondemand_over_sax']:.2f}x the time"
            )
            if plain is not f:
                plain.unlink()
    if args.out:
        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "load_avg": os.getloadavg(), "repeat": args.repeat}  # fmt: skip
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
