"""The importer's gzip decoding, ISA-L's igzip against zlib, in one run (docs/performance.md).

    python3 bench/inflate_speed.py [--repeat 7] [--callgrind] [--before DIR] [--out results.json]

For each input (the DDP sample, 53.7 MB of JSON in 3.0 MB of gzip, and the generated 2M-event
trace, 465 MB in 39 MB, when /tmp/gpuprof-bench holds it: bench/analyze_speed.py writes it):

* **inflate**: bench/inflate_speed.cpp, built here with each decoder the machine has, decoding the
  file held in memory with every member's CRC-32 checked, as the importer's inflating thread does;
  best wall time of N, and MB/s of text out;
* **import**: the whole ``_core.import_trace(path)`` (reading, inflating on its thread, parsing,
  building the Trace), best wall time of N, each run in a fresh process, the variants taking turns:
  the default decoder, ``GPUPROF_INFLATER=zlib``, and with ``--before DIR`` an earlier gpuprof
  (a folder holding its ``gpuprof`` package, e.g. the installed one);
* with ``--callgrind``: the instructions of the decoding (inflate_all) and, on the DDP sample, of
  one whole import (every thread; a process that only imports gpuprof subtracted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IO = REPO / "cpp" / "src" / "io"
INPUTS = {
    "ddp": REPO.parent / "shared" / "traces" / "hta_2xv100_ddp" / "rank0.json.gz",
    "synthetic_2m": Path("/tmp/gpuprof-bench/synthetic_2m.pt.trace.json.gz"),
}
HAVE_ISAL = Path("/usr/include/isa-l/igzip_lib.h").exists()


def build(out: Path) -> Path:
    exe = out / "inflate_speed"
    isal = ["-DGPUPROF_HAVE_ISAL=1"] if HAVE_ISAL else []
    cmd = ["g++", "-O2", "-g", "-std=c++17", f"-I{IO}", *isal, str(REPO / "bench" / "inflate_speed.cpp"),
           str(IO / "raw_inflate.cpp"), str(IO / "crc32.cpp"), *(["-lisal"] if HAVE_ISAL else []), "-lz",
           "-o", str(exe)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return exe


def decoders() -> list:
    return ["isa-l", "zlib"] if HAVE_ISAL else ["zlib"]


def inflate_wall(exe: Path, path: Path, decoder: str, repeat: int) -> dict:
    proc = subprocess.run(
        [str(exe), str(path), decoder, str(repeat)], capture_output=True, text=True, check=True
    )
    r = json.loads(proc.stdout)
    r["mb_per_s"] = r["out_bytes"] / r["best_s"] / 1e6
    return r


IMPORT_ONE = """
import sys, time
from gpuprof._native import _core
t = time.perf_counter(); trace, stats = _core.import_trace(sys.argv[1]); s = time.perf_counter() - t
print(s, trace.num_events)
"""


def import_variants(before: str | None) -> dict:
    here = str(REPO / "python")
    v = {
        "default": ({"PYTHONPATH": here}, None),
        "zlib": ({"PYTHONPATH": here, "GPUPROF_INFLATER": "zlib"}, None),
    }
    if before:
        v["before"] = ({"PYTHONPATH": os.path.abspath(before)}, None)
    return v


def import_wall(path: Path, variants: dict, repeat: int) -> dict:
    best: dict = {}
    events: dict = {}
    for _ in range(repeat):  # the variants take turns, each run in a fresh process
        for name, (extra, _unused) in variants.items():
            env = dict(os.environ, **extra)
            out = subprocess.run([sys.executable, "-c", IMPORT_ONE, str(path)], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()  # fmt: skip
            best[name] = min(best.get(name, 1e9), float(out[0]))
            events[name] = int(out[1])
    return {"best_s": best, "events": events}


def callgrind_ir(cmd: list, env: dict, toggle: str | None = None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        if toggle:
            vg.append(f"--toggle-collect={toggle}")
        subprocess.run(vg + cmd, env=env, capture_output=True, text=True, check=True)
        total = 0
        for f in Path(tmp).glob("cg.out*"):
            m = re.search(r"^summary:\s+(\d+)", f.read_text(errors="replace"), re.M)
            total += int(m.group(1)) if m else 0
        return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--before", help="a folder holding an earlier gpuprof package, for the import")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    results: dict = {"decoders": decoders()}
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp))
        for name, path in INPUTS.items():
            if not path.exists():
                print(f"{name}: {path} not found, skipped")
                continue
            r: dict = {"gz_bytes": path.stat().st_size}
            r["inflate"] = {d: inflate_wall(exe, path, d, args.repeat) for d in decoders()}
            r["import"] = import_wall(path, import_variants(args.before), args.repeat)
            if args.callgrind:
                r["inflate_ir"] = {
                    d: callgrind_ir([str(exe), str(path), d, "1"], dict(os.environ), "*inflate_all*")
                    for d in decoders()
                }
                if name == "ddp":
                    r["import_ir"] = {}
                    for v, (extra, _unused) in import_variants(args.before).items():
                        env = dict(os.environ, **extra)
                        base = callgrind_ir([sys.executable, "-c", "from gpuprof._native import _core"], env)
                        whole = callgrind_ir([sys.executable, "-c", IMPORT_ONE, str(path)], env)
                        r["import_ir"][v] = whole - base
            results[name] = r
            for d, x in r["inflate"].items():
                ir = f", {r['inflate_ir'][d] / 1e6:.0f} M instructions" if "inflate_ir" in r else ""
                print(f"{name} inflate {d}: {x['best_s']:.4f} s, {x['mb_per_s']:.0f} MB/s of text{ir}")
            for v, s in r["import"]["best_s"].items():
                ir = f", {r['import_ir'][v] / 1e6:.0f} M instructions" if "import_ir" in r else ""
                print(f"{name} import_trace {v}: {s:.4f} s{ir}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
