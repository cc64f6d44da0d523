"""The C++ stages include only downwards: core -> io, collect -> analysis -> bindings (docs/design.md).

A file's stage is its folder (cpp/include/gpuprof/<stage>/, cpp/src/<stage>/, cpp/bindings/); an
include's stage is the folder of the file it names, as the compiler finds it (beside the including
file first, then under cpp/include). io and collect are siblings: neither includes the other."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CPP = ROOT / "cpp"
STAGES = ("core", "io", "collect", "analysis")
# What each stage may include besides itself.
MAY_INCLUDE = {
    "core": set(),
    "io": {"core"},
    "collect": {"core"},
    "analysis": {"core", "io", "collect"},
    "bindings": {"core", "io", "collect", "analysis"},
}
# (including file, included file) pairs that break the flow, each with its reason; to be emptied.
KNOWN: dict[tuple[str, str], str] = {}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def stage_of(path: Path) -> str | None:
    rel = path.relative_to(CPP).parts
    if rel[0] == "bindings":
        return "bindings"
    if rel[0] == "src" and rel[1] in STAGES:
        return rel[1]
    if rel[:2] == ("include", "gpuprof") and rel[2] in STAGES:
        return rel[2]
    return None


def resolve(including: Path, name: str) -> Path | None:
    for base in (including.parent, CPP / "include"):
        candidate = (base / name).resolve()
        if candidate.is_file():
            return candidate
    return None  # a system or third-party header


def sources() -> list[Path]:
    return sorted(p for p in CPP.rglob("*") if p.suffix in (".h", ".hpp", ".cpp", ".cc"))


def violations() -> list[tuple[str, str, str, str]]:
    out = []
    for path in sources():
        own = stage_of(path)
        for name in _INCLUDE.findall(path.read_text(encoding="utf-8")):
            target = resolve(path, name)
            if target is None or not target.is_relative_to(CPP):
                continue
            theirs = stage_of(target)
            if own is None or theirs is None or theirs == own or theirs in MAY_INCLUDE[own]:
                continue
            out.append((str(path.relative_to(ROOT)), str(target.relative_to(ROOT)), own, theirs))
    return out


def test_every_source_has_a_stage():
    # A file outside the stage folders would escape the check.
    assert [str(p.relative_to(ROOT)) for p in sources() if stage_of(p) is None] == []


def test_includes_follow_the_stage_flow():
    found = violations()
    new = [v for v in found if (v[0], v[1]) not in KNOWN]
    assert new == [], "\n".join(
        f"{a} ({s}) includes {b} ({t}): {s} may not include {t}" for a, b, s, t in new
    )
    # The allow-list holds only what is still there: a fixed one leaves it.
    assert sorted(KNOWN) == sorted((a, b) for a, b, _, _ in found)


def test_the_check_sees_a_breach(tmp_path, monkeypatch):
    # An io source that includes an analysis header is caught (the check is not vacuous).
    fake = tmp_path / "cpp"
    (fake / "src" / "io").mkdir(parents=True)
    (fake / "include" / "gpuprof" / "analysis").mkdir(parents=True)
    (fake / "include" / "gpuprof" / "analysis" / "tables.h").write_text("#pragma once\n")
    (fake / "src" / "io" / "reader.cpp").write_text(
        '#include "gpuprof/analysis/tables.h"\n#include <vector>\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "CPP", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations() == [
        ("cpp/src/io/reader.cpp", "cpp/include/gpuprof/analysis/tables.h", "io", "analysis")
    ]
