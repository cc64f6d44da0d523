"""Writes every report format of every stored trace into one folder, so that two builds can be
compared byte for byte (a change meant to keep reports as they are: `diff -r before after`).

    python3 .ci/report-snapshot.py OUT [TRACES]

TRACES defaults to ../shared/traces beside the checkout. For each trace file: the terminal text
(120 columns, no colour), Markdown, JSON and HTML, the Chrome trace written beside them (inflated,
so that gzip's header time does not differ), and the same through `gpuprof analyze` on the
command line; for each folder of two or more traces, the folder's reports.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path


def _normalise(folder: Path) -> None:
    """Chrome traces inflated; OUT's own path written as <OUT> (reports name where they wrote)."""
    for gz in folder.glob("*.trace.json.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    mark = str(folder).encode()
    for p in folder.iterdir():
        data = p.read_bytes()
        if mark in data:
            p.write_bytes(data.replace(mark, b"<OUT>"))


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    root = Path(__file__).resolve().parent.parent
    traces = Path(sys.argv[2]) if len(sys.argv) > 2 else root.parent / "shared" / "traces"
    if not traces.is_dir():
        print(f"report-snapshot: {traces}: no such folder", file=sys.stderr)
        return 2
    import gpuprof

    out.mkdir(parents=True, exist_ok=True)
    files = sorted(
        p for p in traces.rglob("*") if p.name.endswith((".pt.trace.json.gz", ".json.gz")) and p.is_file()
    )
    os.chdir(out)  # every path a report holds is relative to OUT, the same in both runs
    for f in files:
        rel = f.relative_to(traces)
        stem = str(rel).replace("/", "__").removesuffix(".json.gz")
        report = gpuprof.analyze(f)
        (out / f"{stem}.txt").write_text(report.to_text(color=False, width=120), encoding="utf-8")
        report.to_markdown(f"{stem}.md", trace=False)
        report.to_json(f"{stem}.json")
        report.to_html(f"{stem}.html", trace=False)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuprof",
                "analyze",
                str(f),
                "--json",
                f"{stem}.cli.json",
                "--html",
                f"{stem}.cli.html",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "120"},
        )
        (out / f"{stem}.cli.txt").write_text(
            f"exit {cli.returncode}\n{cli.stdout}{cli.stderr}", encoding="utf-8"
        )
    for folder in sorted({f.parent for f in files}):
        if sum(1 for f in files if f.parent == folder) < 2:
            continue
        stem = str(folder.relative_to(traces)).replace("/", "__")
        cli = subprocess.run(
            [sys.executable, "-m", "gpuprof", "analyze", str(folder), "--json", f"{stem}.folder.json"],
            capture_output=True,
            text=True,
        )
        (out / f"{stem}.folder.txt").write_text(
            f"exit {cli.returncode}\n{cli.stdout}{cli.stderr}", encoding="utf-8"
        )
    _normalise(out)
    print(f"report-snapshot: {len(files)} traces -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
