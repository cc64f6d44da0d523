"""Terminal rendering: ``print(report)``. Colour only when writing to a terminal."""

from __future__ import annotations

import io
import sys
from typing import Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .model import CATEGORIES

_COLORS = {"kernel": "green", "memcpy": "cyan", "memset": "blue", "communication": "magenta",
           "runtime": "yellow", "dataloader": "red", "cpu_exec": "bright_blue", "other": "white"}


def _bar(avg: dict, width: int) -> Text:
    bar = Text()
    for key, _ in CATEGORIES:
        n = int(round(avg.get(f"{key}_pct", 0.0) / 100.0 * width))
        if n:
            bar.append("█" * n, style=_COLORS[key])
    return bar


def render_text(report, *, color: Optional[bool] = None, width: int = 100) -> str:
    if color is None:
        color = sys.stdout.isatty()
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, color_system="auto" if color else None,
                      highlight=False, soft_wrap=False)
    avg = report.average
    src = report._data.get("source", {})
    title = "gpuprof step breakdown"
    if src.get("path"):
        title += f": {src['path']}"
    console.print(Text(title, style="bold"))
    console.print(f"{len(report.steps)} steps, mean step time {avg['total_us'] / 1000.0:.3f} ms")
    gpu_note = report._data.get("metadata", {}).get("gpu_collection", "")   # GPU collection
    if gpu_note.startswith("off:"):
        console.print(Text(f"GPU collection {gpu_note}", style="yellow"))
    if report.steps:
        console.print(_bar(avg, max(10, width - 20)))
        legend = Text()
        for key, name in CATEGORIES:
            if avg.get(f"{key}_pct", 0) > 0:
                legend.append("■ ", style=_COLORS[key]).append(f"{name} {avg[f'{key}_pct']:.1f}%  ")
        console.print(legend)

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("step", justify="right")
    table.add_column("total us", justify="right")
    shown = [(k, n) for k, n in CATEGORIES if any(s[f"{k}_us"] > 0 for s in report.steps) or k == "other"]
    for _, name in shown:
        table.add_column(f"{name} us", justify="right")
    for s in report.steps:
        table.add_row(str(s["step"]), f"{s['total_us']:,.0f}", *(f"{s[f'{k}_us']:,.0f}" for k, _ in shown))
    if report.steps:
        table.add_row("mean", f"{avg['total_us']:,.0f}", *(f"{avg[f'{k}_us']:,.0f}" for k, _ in shown),
                      style="bold")
        table.add_row("%", "100", *(f"{avg[f'{k}_pct']:.1f}" for k, _ in shown), style="dim")
    console.print(table)

    for dl in report.dataloaders:
        console.print(
            f"DataLoader ({dl.get('dataset') or '?'}, {dl.get('dataset_length') or '?'} samples): "
            f"batch_size={dl.get('batch_size')}, num_workers={dl.get('num_workers')}, "
            f"pin_memory={dl.get('pin_memory')}, prefetch_factor={dl.get('prefetch_factor')}, "
            f"persistent_workers={dl.get('persistent_workers')}")
    host = report.host
    if host.get("cpus_available"):
        console.print(f"CPUs available to the process: {host['cpus_available']} (of {host.get('cpu_count')})")
    c = report.counts
    line = f"events: {c['events']:,}"
    if c.get("dropped"):
        line += f", dropped: {c['dropped']:,} (raise max_events to keep them)"
    if c.get("skipped"):
        line += f", skipped: {c['skipped']:,}"
    console.print(line, style="dim")
    return out.getvalue().rstrip("\n")
