"""Lists the Python test files that read ../shared (the real traces beside the checkout), one a line,
for .ci/test's rerun from a checkout with nothing beside it.

A file reads ../shared when its code (not its docstrings or comments) does one of:
- imports ``_traces`` (the traces helper), itself or through another helper module of tests/python;
- asks for the ``shared_traces`` fixture (conftest.py), as an argument or through usefixtures;
- builds the path itself: a string ``"shared"`` (a path component) or one that starts with
  ``../shared``.

Usage: python3 .ci/shared-tests.py [TESTS_DIR]   (default tests/python, its stage folders included;
paths printed as given)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HELPER = "_traces"
FIXTURE = "shared_traces"


def _docstrings(tree: ast.AST) -> set:
    """The ids of the string constants that are docstrings (a module's, a class's, a function's)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _imported(tree: ast.AST) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _reads_directly(tree: ast.AST) -> bool:
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(a.arg == FIXTURE for a in node.args.args + node.args.kwonlyargs):
                return True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value == "shared" or node.value.startswith("../shared"):
                return True
            if node.value == FIXTURE:  # pytest.mark.usefixtures("shared_traces")
                return True
    return False


def shared_tests(folder: Path) -> list:
    trees = {}
    for path in sorted(folder.rglob("*.py")):
        try:
            trees[path] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, SyntaxError, UnicodeDecodeError) as e:
            sys.exit(f"shared-tests: cannot read {path}: {e}")
    helpers = {
        p.stem: t for p, t in trees.items() if not p.name.startswith("test_") and p.name != "conftest.py"
    }
    reading = {HELPER}  # the helper modules through which a test reads ../shared
    changed = True
    while changed:
        changed = False
        for name, tree in helpers.items():
            if name not in reading and (_imported(tree) & reading or _reads_directly(tree)):
                reading.add(name)
                changed = True
    return [
        p
        for p, t in trees.items()
        if p.name.startswith("test_") and (_imported(t) & reading or _reads_directly(t))
    ]


def main(argv: list) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path("tests/python")
    if not folder.is_dir():
        sys.exit(
            f"shared-tests: {folder} is not a folder (run from the checkout's root, or name the tests folder)"
        )
    for path in shared_tests(folder):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
