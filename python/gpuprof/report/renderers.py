"""The output formats behind one small protocol: each renderer names itself, declares its ordered
sections once (``sections``: one function per section, in the order the format shows them), and
renders a Report into text. ``Report.to_text``, ``to_markdown``, ``to_html`` and ``to_json`` write
through them."""

from __future__ import annotations

import json
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


def dumps_report(data: dict, *, indent: Optional[int] = 2) -> str:
    """A report dict as JSON text: indented for people, except ``step_views`` (the HTML's timeline
    events, nine tenths of the file), which is written compact on one line, last. Indenting it made
    the file 3x larger and was the slowest part of ``gpuprof analyze --json`` after the import."""
    if indent is None or "step_views" not in data:
        return json.dumps(data, indent=indent)
    rest = {k: v for k, v in data.items() if k != "step_views"}
    views = json.dumps(data["step_views"], separators=(",", ":"))
    if not rest:
        return '{"step_views": ' + views + "}"
    text = json.dumps(rest, indent=indent)
    return text[:-2] + ",\n" + " " * indent + '"step_views": ' + views + "\n}"


JSON = JsonRenderer()


# The format modules load on first use: the terminal text needs no Jinja2.
_MODULES = {"TEXT": "text", "MARKDOWN": "markdown", "HTML": "html"}


def __getattr__(name: str):
    """TEXT, MARKDOWN and HTML: each format's renderer, its module imported when first asked for."""
    if name in _MODULES:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
