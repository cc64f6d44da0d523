"""Each rule's explanation, from the copy of docs/advice.md installed with the package (docs/ is
not installed; tests/python/report/test_report_html_timeline.py keeps the copy equal to docs/advice.md)."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Optional


@lru_cache(maxsize=1)
def _sections() -> dict[str, str]:
    try:
        text = resources.files("gpuprof.advice").joinpath("advice.md").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return {}
    out: dict[str, str] = {}
    for m in re.finditer(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S):
        out[m.group(1)] = m.group(2).strip()
    return out


def explanation(rule_id: str) -> Optional[str]:
    """The Markdown explanation of ``rule_id`` (trigger, why, fix, bound); None when unknown."""
    return _sections().get(str(rule_id))
