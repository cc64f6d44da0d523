"""The Python package's shape (docs/design.md, "The rooms"), read from the source tree:

- the stages are packages (collect, traces, analysis, advice, report, session, agents, cli,
  integrations) and the top level holds only the entry points and the modules every stage may use
  (_host, _errors, _native),
  so a file's path says which stage it belongs to;
- every import goes with the flow: collect, traces -> analysis -> advice -> report -> session ->
  agents, integrations -> cli (a stage imports only stages before it, its own package, _host,
  _errors and _native; collect and traces do not import each other, nor agents and integrations);
- no import circle anywhere inside gpuprof, counting the imports inside functions too (they hide a
  circle from Python at import time, not from the reader);
- a Report's data is read through its public accessors: ``_data`` appears in report/model.py only.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "python" / "gpuprof"
STAGES = ["collect", "traces", "analysis", "advice", "report", "session", "agents", "cli", "integrations"]
# Where each stage stands in the flow: a module imports only from stages of a lower rank.
RANK = {
    "collect": 0,
    "traces": 0,
    "analysis": 1,
    "advice": 2,
    "report": 3,
    "session": 4,
    "agents": 5,
    "integrations": 5,
    "cli": 6,
}
SHARED = {"_host", "_errors", "_native", "_core", "_build_info"}  # usable by every stage
TOP_LEVEL = {"__init__", "__main__", "_host", "_errors", "_native", "demo", "roofline"}
# Modules the build makes (the native extensions, and _build_info from _build_info.py.in).
BUILT = ["_core", "_kernels", "_build_info"]


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for name in BUILT:
        out[f"gpuprof.{name}"] = package / f"{name}.py"
    return out


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every gpuprof module ``name`` imports, wherever the import statement stands."""
    here = _package_of(name, path)
    found = set()

    def target(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gpuprof":
                    found.add(target(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "gpuprof":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else target(base))
    found.discard(None)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_stages_are_packages_and_the_top_level_holds_entry_points_only():
    for stage in STAGES:
        assert (PACKAGE / stage / "__init__.py").is_file(), f"gpuprof/{stage}/ is not a package"
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in TOP_LEVEL | set(BUILT))
    assert loose == [], f"modules outside the stage packages: {loose}"


def test_no_import_circle_inside_the_package():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items() if path.is_file()}
    assert graph["gpuprof.report.build"] >= {"gpuprof.advice", "gpuprof.analysis"}  # the walk sees imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function():
    assert _cycles({"gpuprof.a": {"gpuprof.b"}, "gpuprof.b": {"gpuprof.a"}}) == [["gpuprof.a", "gpuprof.b"]]
    assert _cycles({"gpuprof.a": {"gpuprof.b"}, "gpuprof.b": set()}) == []


def test_report_data_is_private_to_the_report_model():
    model = PACKAGE / "report" / "model.py"
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path == model:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "_data":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


def test_no_history_fences_in_the_code():
    """History belongs in CHANGELOG.md: no "issue N" / "distributed issue" markers in the package,
    its tests and benchmarks (this file names the pattern, so it is left out)."""
    import re

    fence = re.compile(r"\bissue \d+\b|\b(distributed|advice|reports|reliability) issue\b", re.IGNORECASE)
    root = PACKAGE.parents[1]
    files = [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "bench").glob("*.py")]
    hits = []
    for path in files:
        if path == Path(__file__).resolve():
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if fence.search(line):
                hits.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
    assert hits == []


def _against_the_flow(package: Path = PACKAGE) -> list[str]:
    """Every import (function-local ones included) from a stage to a stage not before it in the
    flow, or from a stage (or _host) to a top-level entry point, as "importer -> imported"."""
    modules = _modules(package)
    out = []
    for name, path in sorted(modules.items()):
        if not path.is_file():
            continue
        parts = name.split(".")
        stage = parts[1] if len(parts) > 1 else ""
        if stage not in RANK and stage not in ("_host", "_errors"):
            continue  # the package itself and the entry points (demo, roofline, __main__)
        for imported in sorted(_imports(name, path, modules)):
            target = imported.split(".")[1] if "." in imported else ""
            if target == stage:
                continue
            if stage in ("_host", "_errors"):
                ok = False  # every stage reads it: it reads none of them
            elif target in SHARED:
                ok = True
            else:
                ok = target in RANK and RANK[target] < RANK[stage]
            if not ok:
                out.append(f"{name} -> {imported}")
    return out


def test_every_import_goes_with_the_flow():
    assert _against_the_flow() == []


def test_the_flow_check_finds_an_import_against_it_inside_a_function(tmp_path):
    """The check reads the imports of a hand-made package: a report import hidden in a collect
    function, a trace writer asking collect for the rank, an adapter importing the CLI, and _host
    importing a stage are found; imports with the flow (analysis from collect, session from
    report, anything from _host) are not."""
    pkg = tmp_path / "gpuprof"
    files = {
        "__init__.py": "",
        "_host.py": "from .collect import ranks\n",
        "collect/__init__.py": "",
        "collect/ranks.py": "def job():\n    return 0\n",
        "collect/live.py": "def end():\n    from ..report.build import build_report\n    return 0\n",
        "traces/__init__.py": "",
        "traces/export.py": "from gpuprof.collect.ranks import job\nfrom .._host import x\n",
        "analysis/__init__.py": "from ..collect import ranks\n",
        "report/__init__.py": "",
        "report/build.py": "from ..analysis import x\n",
        "session/__init__.py": "from ..report.build import build_report\nfrom ..collect.live import end\n",
        "cli/__init__.py": "class E(Exception):\n    pass\n",
        "integrations/__init__.py": "def f():\n    from ..cli import E\n    from ..session import p\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    assert _against_the_flow(pkg) == [
        "gpuprof._host -> gpuprof.collect.ranks",
        "gpuprof.collect.live -> gpuprof.report.build",
        "gpuprof.integrations -> gpuprof.cli",
        "gpuprof.traces.export -> gpuprof.collect.ranks",
    ]
