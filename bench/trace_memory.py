"""Peak memory of `gpuprof analyze FILE` against the trace's size (docs/performance.md, "Memory against
trace size"): synthetic plain-JSON traces of 1, 2 and 4 GB (one rank of bench/synthetic_ranks.py's
DDP job, its step repeated with shifted times and ids: host operators, launches, kernels, copies,
all-reduces), and the stored traces (inflated), each through `gpuprof analyze FILE` (text) and
`gpuprof analyze FILE --json OUT`, in its own process: wall time, peak RSS (the child's ru_maxrss
from wait4), events kept, bytes per event and peak RSS / JSON size.

    python bench/trace_memory.py [--sizes-gb 1 2 4] [--stored] [--json OUT] [--keep DIR] [--max-memory SIZE]

With --max-memory (512M), traces with more events than the budget holds are read in windows of
steps (analysis/windowed.py): each row says in how many.

The synthetic traces are written into a temporary folder (or --keep DIR, reused) and removed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic_ranks import GAP_US, _step_len_us, rank_trace  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STORED = REPO.parent / "shared" / "traces"
SHIFTED = ("ts", "External id", "correlation")


def _step_template(layers: int = 8, buckets: int = 4) -> tuple[list[str], list[tuple[str, float]], float]:
    """One step's events as text pieces around the numbers that move from step to step: (pieces,
    (key, first step's value) of each number in text order, the step period in us)."""
    doc = rank_trace(0, 1, steps=1, layers=layers, buckets=buckets, factors=[1.0], slowest=[1.0])
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    values: list = []
    for e in events:
        for where in (e, e.get("args", {})):
            for key in SHIFTED:
                if key in where:
                    values.append((key, where[key]))
                    where[key] = f"@{len(values) - 1}@"
        if e["name"] == "ProfilerStep#1":
            values.append(("step", 0))
            e["name"] = f"ProfilerStep#~{len(values) - 1}~"
    text = "".join(json.dumps(e, separators=(",", ":")) + ",\n" for e in events)
    parts = re.split(r'"@(\d+)@"|~(\d+)~', text)
    pieces, slots = [parts[0]], []
    for i in range(1, len(parts), 3):
        slots.append(values[int(parts[i] or parts[i + 1])])
        pieces.append(parts[i + 2])
    return pieces, slots, _step_len_us(1.0, layers, buckets) + GAP_US


def write_trace(path: Path, size_bytes: int, layers: int = 8) -> tuple[int, int]:
    """A JSON trace of about `size_bytes` of JSON text, gzip'd (level 1) where `path` ends in .gz;
    returns its step count and the JSON's size in bytes."""
    pieces, slots, period = _step_template(layers, 4 if layers <= 8 else 16)
    opener = (
        (lambda: gzip.open(path, "wt", compresslevel=1))
        if path.suffix == ".gz"
        else (lambda: open(path, "w"))
    )
    with opener() as f:
        f.write('{"schemaVersion":1,"traceEvents":[\n')
        written, step = 0, 0
        while written < size_bytes:
            out = [pieces[0]]
            for (key, value), piece in zip(slots, pieces[1:]):
                if key == "ts":
                    out.append(f"{value + step * period:.3f}")
                elif key == "step":
                    out.append(str(step + 1))
                else:
                    out.append(str(value + step * 100_000))
                out.append(piece)
            text = "".join(out)
            f.write(text)
            written += len(text)
            step += 1
        tail = '{"ph":"M","name":"process_name","pid":10000,"args":{"name":"rank 0"}}\n'
        tail += '],"displayTimeUnit":"ms"}\n'
        f.write(tail)
    return step, written + len(tail) + len('{"schemaVersion":1,"traceEvents":[\n')


def _json_bytes(path: Path) -> int:
    """The JSON's size: the file's, or what a gzip'd one inflates to (counted, not read from its
    trailer, which holds it modulo 4 GiB)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n


def run_one(
    path: Path,
    label: str,
    tmp: Path,
    timeout: float,
    max_memory: str = "",
    text_only: bool = False,
    json_bytes: int = 0,
) -> dict:
    size = json_bytes or _json_bytes(path)
    row = {"trace": label, "json_mb": round(size / 1e6, 1)}
    if path.suffix == ".gz":
        row["gzip_mb"] = round(path.stat().st_size / 1e6, 1)
    budget = ["--max-memory", max_memory] if max_memory else []
    if max_memory:
        row["max_memory"] = max_memory
    modes = [("text", budget), ("json", [*budget, "--json", str(tmp / "out.json")])]
    for mode, extra in modes[:1] if text_only else modes:
        # A fresh interpreter per command, so that ru_maxrss is this command's alone.
        wrapper = (
            "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
            "sys.exit(r.returncode)"
        )
        cmd = [sys.executable, "-m", "gpuprof", "analyze", str(path), *extra]
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, timeout=timeout
        )
        if p.returncode != 0:
            raise RuntimeError(f"{label} {mode}: {p.stderr[-2000:]}")
        rss_kib = int(p.stderr.strip().splitlines()[-1])
        events = next(
            (int(x.split(":")[1].replace(",", "")) for x in p.stdout.splitlines() if x.startswith("events:")),
            None,
        )
        rss = rss_kib * 1024
        row[mode] = {
            "wall_s": round(time.monotonic() - t0, 2),
            "peak_rss_mib": round(rss / 2**20, 1),
            "events": events,
            "rss_bytes_per_event": round(rss / events, 1) if events else None,
            "rss_per_json_byte": round(rss / size, 3),
        }
        if mode == "text":  # read in windows (analysis/windowed.py): how many, as the warning says
            said = re.search(r"analysed in ([\d,]+) windows", " ".join(p.stdout.split()))
            row["windows"] = int(said.group(1).replace(",", "")) if said else 1
        print(label, mode, row[mode], flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-gb", type=float, nargs="*", default=[1, 2, 4])
    ap.add_argument("--stored", action="store_true", help="also the stored traces, inflated")
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", default="")
    ap.add_argument("--max-memory", default="", help="gpuprof analyze --max-memory SIZE (windowed past it)")
    ap.add_argument(
        "--layers",
        type=int,
        default=8,
        help="layers of the synthetic step: 8 (89 events), 800 (5,681 events)",
    )
    ap.add_argument("--text-only", action="store_true", help="only `gpuprof analyze FILE`, not --json")
    ap.add_argument(
        "--gzip",
        action="store_true",
        help="write the synthetic traces gzip'd (a 20 GB trace and its windows' spill files need 40 GB of "
        "disk as plain JSON)",
    )
    args = ap.parse_args()
    results = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "max_memory": args.max_memory or None,
        "layers": args.layers,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="gpuprof-trace-memory-") as t:
        tmp = Path(t)
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        if args.stored:
            for gz in sorted(STORED.glob("*/*.json.gz")):
                plain = tmp / f"{gz.parent.name}.json"
                plain.write_bytes(gzip.decompress(gz.read_bytes()))
                results["rows"].append(run_one(plain, f"{gz.parent.name}/{gz.name}", tmp, args.timeout))
                plain.unlink()
        for gb in args.sizes_gb:
            path = where / (
                (
                    f"synthetic_{gb:g}gb.json"
                    if args.layers == 8
                    else f"synthetic_{gb:g}gb_{args.layers}l.json"
                )
                + (".gz" if args.gzip else "")
            )
            json_bytes = 0
            if not path.exists():
                t0 = time.monotonic()
                steps, json_bytes = write_trace(path, int(gb * 1e9), args.layers)
                print(f"wrote {path} ({steps} steps) in {time.monotonic() - t0:.0f} s", flush=True)
            label = f"synthetic {gb:g} GB" + (f", {args.layers} layers a step" if args.layers != 8 else "")
            label += ", gzip'd" if args.gzip else ""
            results["rows"].append(
                run_one(path, label, tmp, args.timeout, args.max_memory, args.text_only, json_bytes)
            )
            if not args.keep:
                path.unlink()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
