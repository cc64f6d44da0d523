"""Advice: ranked recommendations, each with its evidence, a bound on the gain, and the fix.

    from gpuprof.advice import advise
    advise(report.to_dict())   # -> [{"rule", "title", "evidence", "saving_bound_pct", ...}, ...]

Rules read only the report (never raw events and never torch), so a report loaded from JSON or an
imported trace gets the same advice as a live session. docs/advice.md documents every rule.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Optional

from ._facts import Facts
from .rules import RULES

RULE_IDS: list[str] = [rule_id for rule_id, _ in RULES]


def advise(data: dict, *, rules: Optional[Iterable[str]] = None) -> list[dict]:
    """Every recommendation that fires on the report dict ``data``, largest saving bound first.

    ``rules`` limits the run to those rule ids (an unknown id is a ValueError that lists the known).
    Equal bounds keep the registry's order. A rule that meets data it cannot read is skipped with a
    warning instead of failing the whole report.
    """
    wanted = RULE_IDS if rules is None else list(rules)
    unknown = sorted(set(wanted) - set(RULE_IDS))
    if unknown:
        raise ValueError(f"unknown advice rule(s) {', '.join(unknown)}; known: {', '.join(RULE_IDS)}")
    facts = Facts(data)
    fired: list[dict] = []
    for rule_id, rule in RULES:
        if rule_id not in wanted:
            continue
        try:
            rec = rule(facts)
        except (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError) as e:
            warnings.warn(
                f"gpuprof advice rule {rule_id!r} skipped: the report has data it cannot read "
                f"({type(e).__name__}: {e})",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        if rec is not None:
            fired.append(rec)
    # sorted() is stable: equal bounds keep the registry's order.
    return sorted(fired, key=lambda r: -r["saving_bound_pct"])


__all__ = ["advise", "RULE_IDS", "Facts"]
