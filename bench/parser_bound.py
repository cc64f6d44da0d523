"""How much faster could the import get with a faster JSON parser? gpuprof's import of a trace's
plain JSON text against simdjson parsing the same bytes, side by side in one run.

simdjson (through pysimdjson) builds its structural index with SIMD and then its tape: the
parse-only floor of a simdjson-class reader on this machine. gpuprof's import does more: it also
builds the events, interns names and converts times. Both read the text from memory the OS already
caches (gpuprof from the file, simdjson from the bytes, so its time excludes reading them: the
read is timed on its own). Also timed: zlib inflating the gzip file in 1 MiB pieces, the other
half of a gzip import. Best of --repeat, in this process.

    python -m pip install pysimdjson      # not a gpuprof dependency: only this benchmark uses it
    python bench/parser_bound.py [--repeat 7] [--out results.json] [FILE.json.gz ...]

Without FILEs: the two public samples beside the repository (../shared/traces), when there.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import tempfile
import time
import zlib
from pathlib import Path

from import_threads import SAMPLES  # the two public samples (bench/ is this script's folder)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def inflate(data: bytes) -> None:
    d = zlib.decompressobj(31)
    view = memoryview(data)
    for i in range(0, len(data), 1 << 16):
        out = d.decompress(view[i : i + (1 << 16)], 1 << 20)
        while d.unconsumed_tail:
            out = d.decompress(d.unconsumed_tail, 1 << 20)
        del out


def measure(gz_path: Path, repeat: int, workdir: Path) -> dict:
    import simdjson

    from gpuprof._native import _core

    compressed = gz_path.read_bytes()
    text = gzip.decompress(compressed)
    plain = workdir / (gz_path.name[:-3] if gz_path.name.endswith(".gz") else gz_path.name + ".json")
    plain.write_bytes(text)
    parser = simdjson.Parser()

    def gpuprof_import(cpus: int):
        # import_cpus: the CPUs the import counts on (0: those this process may run on).
        return lambda: _core.import_trace(os.fsencode(plain), import_cpus=cpus)

    try:
        out = {
            "json_mb": len(text) / 1e6,
            "gz_mb": len(compressed) / 1e6,
            "gpuprof_import_one_thread_s": best(gpuprof_import(1), repeat),
            "gpuprof_import_default_s": best(gpuprof_import(0), repeat),
            "simdjson_parse_s": best(lambda: parser.parse(text), repeat),
            "read_text_s": best(plain.read_bytes, repeat),
            "zlib_inflate_s": best(lambda: inflate(compressed), repeat),
        }
    finally:
        plain.unlink()
    out["gpuprof_one_thread_over_simdjson"] = out["gpuprof_import_one_thread_s"] / out["simdjson_parse_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    try:
        import simdjson  # noqa: F401
    except ImportError:
        print("parser_bound: needs pysimdjson: python -m pip install pysimdjson", file=sys.stderr)
        return 2
    files = args.files or [p for p in SAMPLES if p.exists()]
    if not files:
        print("parser_bound: no files given and no samples in ../shared/traces", file=sys.stderr)
        return 2
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            results[f.name] = r = measure(f, args.repeat, Path(tmp))
            print(
                f"{f.name}: {r['json_mb']:.1f} MB of JSON; "
                f"gpuprof import {r['gpuprof_import_one_thread_s']:.4f} s "
                f"on one thread, {r['gpuprof_import_default_s']:.4f} s by default; simdjson parse "
                f"{r['simdjson_parse_s']:.4f} s (+ reading the text {r['read_text_s']:.4f} s); zlib inflate "
                f"{r['zlib_inflate_s']:.4f} s; "
                f"gpuprof / simdjson {r['gpuprof_one_thread_over_simdjson']:.2f}x"
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
                    "repeat": args.repeat,
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
