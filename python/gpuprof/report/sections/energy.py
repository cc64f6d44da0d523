"""Energy per step (docs/metrics.md, "Energy"), as lines."""

from __future__ import annotations

from ...analysis import section
from .tables import printable

_ENERGY_METHODS = {
    "counter": "NVML energy counter",
    "power": "power samples integrated",
    "counter and power": "NVML energy counter; power samples where its readings did not cover a step",
}


def energy_lines(data: dict) -> list[str]:
    """The energy per step in sentences, shown beside the GPU summary: the mean step's energy on the
    sampled GPUs, its mean power and energy per sample, then each GPU's (how it was measured, and why
    steps were not). [] when the report has no energy table: nothing is said on a CPU-only report."""
    rows = section(data, "energy")
    if not rows:
        return []
    avg = data.get("average") or {}
    joules = avg.get("energy_j")
    if isinstance(joules, (int, float)):
        line = f"Energy: {joules:.4g} J per step"
        if isinstance(avg.get("mean_power_w"), (int, float)):
            line += f", mean power {avg['mean_power_w']:.1f} W"
        if isinstance(avg.get("energy_per_sample_j"), (int, float)):
            line += f", {avg['energy_per_sample_j']:.4g} J per sample"
        lines = [line + " (the whole GPU, other processes' work included)"]
    else:
        lines = ["Energy: not measured"]
    for r in rows:
        where = f"GPU {r.get('device')}: "
        if isinstance(r.get("energy_per_step_j"), (int, float)):
            line = f"{where}{r['energy_per_step_j']:.4g} J per step"
            if isinstance(r.get("mean_power_w"), (int, float)):
                line += f", {r['mean_power_w']:.1f} W"
            line += f" ({_ENERGY_METHODS.get(r.get('method'), r.get('method'))}, {r.get('steps')} steps)"
        else:
            line = f"{where}not measured"
        if r.get("note"):
            line += f"; {r['note']}"
        lines.append(printable(line))
    return lines
