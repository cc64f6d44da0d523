"""The output formats behind one small protocol: each renderer names itself, declares its ordered
sections once (``sections``: one function per section, in the order the format shows them), and
renders a Report into text. ``Report.to_text``, ``to_markdown``, ``to_html`` and ``to_json`` write
through them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Protocol


class Renderer(Protocol):
    name: str  # "text", "markdown", "html", "json"
    file_end: str  # what a file written with this format ends with
    sections: Sequence[Callable[..., Any]]

    def render(self, report, **options) -> str: ...


class JsonRenderer:
    """The report as JSON (docs/schema.md): the data itself, so its one section is the whole."""

    name = "json"
    file_end = "\n"
    sections = ()

    def render(self, report, *, indent: int = 2) -> str:
        return dumps_report(dict(report.data), indent=indent)

    def pieces(self, report, *, indent: int = 2) -> list[str]:
        """``render``'s text in pieces (``dumps_report_pieces``), for a writer that writes them one
        after the other."""
        return dumps_report_pieces(dict(report.data), indent=indent)


def dumps_report(data: dict, *, indent: Optional[int] = 2) -> str:
    """A report dict as JSON text: indented for people, except ``step_views`` (the HTML's timeline
    events, nine tenths of the file), which is written compact on one line, last. Indenting it made
    the file 3x larger and was the slowest part of ``gpuprof analyze --json`` after the import."""
    return "".join(dumps_report_pieces(data, indent=indent))


def dumps_report_pieces(data: dict, *, indent: Optional[int] = 2) -> list[str]:
    """``dumps_report``'s text as the pieces it is made of (the step views' megabytes one of them),
    so that a file can be written without copying them into one string first."""
    if indent is None or "step_views" not in data:
        return [dumps_indented(data, indent)]
    rest = {k: v for k, v in data.items() if k != "step_views"}
    views = dumps_compact(data["step_views"])
    if not rest:
        return ['{"step_views": ', views, "}"]
    text = dumps_indented(rest, indent)
    return [text[:-2], ",\n", " " * indent, '"step_views": ', views, "\n}"]


def dumps_indented(obj: Any, indent: Optional[int]) -> str:
    """``json.dumps(obj, indent=indent)``, byte for byte. With an indent, CPython writes through its
    pure-Python encoder (its C encoder only writes compact text): the core's writer
    (``_core.json_dumps_indented``) does the same 8x faster. What it does not take (another type
    than json's own, a cycle, containers nested over 512 deep) goes to ``json.dumps``, which writes
    it or raises as it always did. A core built before the writer (a checkout whose native pieces
    are older than its Python) writes through ``json.dumps`` too."""
    if type(indent) is int:
        text = _native_or_json("json_dumps_indented", obj, indent)
        if text:
            return text
    import json  # only where the core's writer does not answer

    return json.dumps(obj, indent=indent)


def dumps_compact(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"))``, byte for byte, through the core's writer (2-3x
    CPython's C encoder, whose floats go through ``float.__repr__``); the same fallback."""
    text = _native_or_json("json_dumps_compact", obj)
    if text:
        return text
    import json

    return json.dumps(obj, separators=(",", ":"))


def _native_or_json(name: str, *args) -> Optional[str]:
    """The core writer's text, or None where json.dumps must answer (see dumps_indented)."""
    from .._native import _core

    write = getattr(_core, name, None)
    if write is None:
        return None
    try:
        return write(*args)
    except (TypeError, ValueError):
        return None


JSON = JsonRenderer()


# The format modules load on first use: the terminal text needs no Jinja2.
_MODULES = {"TEXT": "text", "MARKDOWN": "markdown", "HTML": "html"}


def __getattr__(name: str):
    """TEXT, MARKDOWN and HTML: each format's renderer, its module imported when first asked for."""
    if name in _MODULES:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
