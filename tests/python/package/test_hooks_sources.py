"""The operator hooks' sources the imported gpuprof compiles on first use (its ``_hooks_src``) are
this checkout's: the two C++ files CMakeLists.txt installs there and every public header under
cpp/include/gpuprof/<stage>/, byte for byte, none missing and none left over. A package installed
before a header moved (or a worktree's copy of an older install) would compile the hooks against
headers the core no longer has, and the tests would run a build nobody ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.collect.hooks import SOURCE_DIR

ROOT = Path(__file__).resolve().parents[3]
# What CMakeLists.txt installs into gpuprof/_hooks_src: file there -> its source in the checkout.
TOP_LEVEL = {
    "torch_module.cpp": "cpp/bindings/torch_module.cpp",
    "torch_hooks.cpp": "cpp/src/collect/torch_hooks.cpp",
    "torch_hooks.h": "cpp/src/collect/torch_hooks.h",
}
REINSTALL = "pip install --no-build-isolation --force-reinstall --no-deps . (bash .ci/setup does)"


def expected() -> dict[str, Path]:
    out = {name: ROOT / src for name, src in TOP_LEVEL.items()}
    headers = ROOT / "cpp" / "include" / "gpuprof"
    for h in sorted(headers.rglob("*")):
        if h.is_file():
            out[(Path("include") / "gpuprof" / h.relative_to(headers)).as_posix()] = h
    return out


def compare(folder: Path) -> tuple[list[str], list[str], list[str]]:
    """(missing, left over, different) of `folder` against the checkout's hooks sources."""
    want = expected()
    have = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    differ = [n for n in sorted(set(want) & have) if (folder / n).read_bytes() != want[n].read_bytes()]
    return sorted(set(want) - have), sorted(have - set(want)), differ


def test_the_hooks_sources_are_this_checkouts():
    if not SOURCE_DIR.is_dir():
        pytest.skip(f"{SOURCE_DIR} is not there (a package built without the hooks' sources)")
    missing, extra, differ = compare(SOURCE_DIR)
    assert (missing, extra, differ) == ([], [], []), (
        f"{SOURCE_DIR} is not this checkout's: missing {missing}, left over {extra}, different "
        f"{differ}. Reinstall gpuprof from the checkout: {REINSTALL}"
    )


def test_the_check_sees_a_stale_copy(tmp_path):
    # A copy of the expected files, then one header moved into the flat layout of an older
    # install and another changed: the comparison names both.
    want = expected()
    for name, src in want.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(src.read_bytes())
    moved = next(n for n in want if n.startswith("include/gpuprof/core/"))
    flat = tmp_path / "include" / "gpuprof" / Path(moved).name
    (tmp_path / moved).rename(flat)
    (tmp_path / "torch_hooks.h").write_text("// older\n")
    assert compare(tmp_path) == ([moved], [flat.relative_to(tmp_path).as_posix()], ["torch_hooks.h"])
