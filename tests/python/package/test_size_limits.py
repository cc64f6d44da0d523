"""Size limits on the project's own source: no file over 800 lines, no function over 150.

Every tracked .py file under python/ and C++ file under cpp/ is read. Python functions are measured
with ast (decorators to the last line); C++ functions by their braces, from the line of the body's
opening brace to its closing one, comments and literals left out. Files still over a limit are
exempt only as declarative tables, named below with why; each entry must still be over."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 150
CPP_SUFFIXES = (".h", ".hpp", ".cpp", ".cc")

# Declarative tables, exempt from the function limit: long because they list entries, one line
# each, with no logic to split. (file, the function's name) -> why.
TABLE_FUNCTIONS = {
    ("cpp/src/analysis/flops.cpp", "rules"): "the FLOP rule table: one line per operator family",
}
# Declarative field tables, exempt from the file limit: one entry a field (name, unit, doc), every
# table of the report in one place (issue: "declarative field tables excepted"). file -> why.
TABLE_FILES = {
    "python/gpuprof/analysis/fields.py": "the Python field table: one line per field of every report table",
}


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "python", "cpp"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [p for p in out if p.endswith(".py") or p.endswith(CPP_SUFFIXES)]


def python_functions(text: str) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((node.name, node.end_lineno - first + 1))
    return out


_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_NOT_FUNCTION = re.compile(
    r"^\s*(namespace|struct|class|union|enum|extern|template\s*<[^>]*>\s*(struct|class))\b"
)
_FUNCTION_HEAD = re.compile(r"\)\s*(const|noexcept|override|final|mutable|->\s*[\w:<>,\s*&]+|\s)*$")
_CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\(")


def cpp_functions(text: str) -> list[tuple[str, int]]:
    """(head, lines) of each function body at namespace or class level."""
    code = _CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    out = []
    stack: list[tuple[str, int, str]] = []  # (kind, line, head)
    head_start = 0
    line = 1
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
        elif ch in ";":
            if not any(k == "fn" for k, _, _ in stack):
                head_start = i + 1
        elif ch == "{":
            head = code[head_start:i]
            in_fn = any(k == "fn" for k, _, _ in stack)
            is_fn = (
                not in_fn
                and _FUNCTION_HEAD.search(head) is not None
                and not _NOT_FUNCTION.search(head)
                and not _CONTROL.search(head.strip().split("\n")[-1] if head.strip() else "")
                and "=" not in head.split("(")[0]
            )
            stack.append(("fn" if is_fn else "block", line, " ".join(head.split())[-80:]))
            if not in_fn:
                head_start = i + 1
        elif ch == "}" and stack:
            kind, start, head = stack.pop()
            if kind == "fn":
                out.append((head, line - start + 1))
            if not any(k == "fn" for k, _, _ in stack):
                head_start = i + 1
    return out


def _short(head: str) -> str:
    """A function's bare name from its head: `int f(int x) const` -> `f`."""
    before = head.split("(")[0].split()
    return before[-1].split("::")[-1].lstrip("*&") if before else head


def _functions_of(rel: str) -> list[tuple[str, int]]:
    text = (ROOT / rel).read_text(encoding="utf-8")
    return python_functions(text) if rel.endswith(".py") else cpp_functions(text)


def measure() -> dict[str, list[str]]:
    """Each file over a limit -> what is over."""
    over: dict[str, list[str]] = {}
    for rel in tracked():
        text = (ROOT / rel).read_text(encoding="utf-8")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        found = [f"{lines} lines"] if lines > MAX_FILE_LINES and rel not in TABLE_FILES else []
        functions = python_functions(text) if rel.endswith(".py") else cpp_functions(text)
        found += [
            f"{name}: {n} lines"
            for name, n in functions
            if n > MAX_FUNCTION_LINES and (rel, _short(name)) not in TABLE_FUNCTIONS
        ]
        if found:
            over[rel] = found
    return over


@pytest.fixture(scope="module")
def over() -> dict[str, list[str]]:
    return measure()


def test_no_file_or_function_over_the_limits(over):
    assert over == {}, "split these by what their parts are:\n" + "\n".join(
        f"{f}: {w}" for f, w in over.items()
    )


def test_the_exemptions_are_still_needed(over):
    lengths = {f: (ROOT / f).read_text(encoding="utf-8").count("\n") for f in TABLE_FILES}
    assert sorted(f for f, n in lengths.items() if n <= MAX_FILE_LINES) == []
    functions = {(f, _short(h)) for f in {f for f, _ in TABLE_FUNCTIONS} for h, _ in _functions_of(f)}
    assert sorted(k for k in TABLE_FUNCTIONS if k not in functions) == []


def test_the_cpp_measure_on_a_hand_built_file():
    # A namespace, a struct with an inline method, a free function of 3 lines whose body holds a
    # lambda, an if and a brace in a string and a comment: two functions, their lengths by braces.
    text = (
        "namespace gpuprof {\n"  # 1
        "struct A {\n"  # 2
        "  int f() const { return 1; }\n"  # 3
        "};\n"  # 4
        "int g(int x) {\n"  # 5
        '  auto h = [&] { return "}"; };  // }\n'  # 6
        "  if (x) { return 2; }\n"  # 7
        "}\n"  # 8
        "}  // namespace gpuprof\n"
    )
    assert [n for _, n in cpp_functions(text)] == [1, 4]
    assert [_short(h) for h, _ in cpp_functions(text)] == ["f", "g"]
    assert python_functions("@dec\ndef f():\n    return 1\n") == [("f", 3)]
