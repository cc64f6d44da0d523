"""Time series (NVML samples, memory curves): their time key, their series, seconds, devices."""

from __future__ import annotations

from typing import Any, Optional

from .tables import _TIME_KEYS


def time_key(rows: list[dict]) -> Optional[str]:
    for k in _TIME_KEYS:
        if rows and all(isinstance(r.get(k), (int, float)) for r in rows):
            return k
    return None


def series_keys(rows: list[dict], suffixes: tuple[str, ...]) -> list[str]:
    """Numeric columns (ending in one of ``suffixes``) to plot against time."""
    skip = set(_TIME_KEYS) | {"device", "id", "index", "pid"}
    keys: list[str] = []
    for row in rows:
        for k, v in row.items():
            if (
                k not in skip
                and k not in keys
                and k.endswith(suffixes)
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
            ):
                keys.append(k)
    return keys


def seconds(key: str, value: float) -> float:
    if key.endswith("_ns"):
        return value / 1e9
    if key.endswith("_us"):
        return value / 1e6
    return float(value)


def by_device(rows: list[dict]) -> list[tuple[Any, list[dict]]]:
    groups: dict[Any, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.get("device", r.get("device_id")), []).append(r)
    return list(groups.items())
