"""The output formats behind one small protocol: each renderer names itself, declares its ordered
sections once (``sections``: one function per section, in the order the format shows them), and
renders a Report into text. ``Report.to_text``, ``to_markdown``, ``to_html`` and ``to_json`` write
through them."""

from __future__ import annotations

import os
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
    if _holds_spilled(data):
        pieces: list = []
        write_report(data, pieces.append, indent=indent)
        return pieces
    if indent is None or "step_views" not in data:
        return [dumps_indented(data, indent)]
    rest = {k: v for k, v in data.items() if k != "step_views"}
    views = dumps_compact(data["step_views"])
    if not rest:
        return ['{"step_views": ', views, "}"]
    text = dumps_indented(rest, indent)
    return [text[:-2], ",\n", " " * indent, '"step_views": ', views, "\n}"]


#: Stands for a windowed read's per-step rows in the text around them (``write_report``): with a
#: random token drawn once a process, which no string of a trace can foresee.
_TOKEN = os.urandom(12).hex()
_MARK = "\x00gpuprof-rows-" + _TOKEN + "-{}\x00"
_MARKED = r'"\\u0000gpuprof-rows-' + _TOKEN + r'-(\d+)\\u0000"'
#: Text written at once while the rows stream.
_WRITE_BYTES = 1 << 20


def _holds_spilled(data: Any) -> bool:
    """Whether a windowed read's per-step rows on disk (``analysis.spill.SpilledRows``) are in the
    report dict ``data`` (a section, or a section's key: ``critical_path.steps``), or its
    ``step_views``' per-step tops (a ``SpilledMapping``)."""
    from ..analysis.spill import SpilledMapping, SpilledRows

    if not isinstance(data, dict):
        return False
    views = data.get("step_views")
    if isinstance(views, dict) and isinstance(views.get("per_step"), SpilledMapping):
        return True
    for k, v in data.items():
        if isinstance(v, SpilledRows):
            return True
        if k != "step_views" and isinstance(v, dict) and any(isinstance(x, SpilledRows) for x in v.values()):
            return True
    return False


def _marked(value: Any, rows: list, depth: int = 0) -> Any:
    """A section with each ``SpilledRows`` in it (itself, or one of its keys: where
    ``_holds_spilled`` looks) replaced by a marker string (appended to ``rows``); a dict holding
    one copied, the rest shared."""
    from ..analysis.spill import SpilledRows

    if isinstance(value, SpilledRows):
        rows.append(value)
        return _MARK.format(len(rows) - 1)
    if depth == 0 and isinstance(value, dict) and any(isinstance(v, SpilledRows) for v in value.values()):
        return {k: _marked(v, rows, 1) for k, v in value.items()}
    return value


def write_report(data: dict, write: Callable[[str], Any], *, indent: Optional[int] = 2) -> None:
    """``dumps_report(data, indent=indent)``, byte for byte, through ``write(text)`` a piece at a
    time: a windowed read's per-step rows (``analysis.spill.SpilledRows``) are read from their file
    and written a row at a time, so that the text of all of them is never in memory at once."""

    from ..analysis.spill import SpilledMapping, json_default

    if not _holds_spilled(data):
        for piece in dumps_report_pieces(data, indent=indent):
            write(piece)
        return
    rows: list = []
    marked = {k: (v if k == "step_views" else _marked(v, rows)) for k, v in data.items()}
    views = data.get("step_views")
    per_step = views.get("per_step") if isinstance(views, dict) else None
    if type(indent) is not int:  # (compact or odd indents: the rows in memory, as json.dumps writes)
        import json

        write(json.dumps(data, indent=indent, default=json_default))
        return
    if isinstance(per_step, SpilledMapping):  # written compact, last, as dumps_report writes it
        rows.append(per_step)
        marked["step_views"] = {**views, "per_step": _MARK.format(len(rows) - 1)}
    text = dumps_report(marked, indent=indent)

    def indented(spilled, start: int) -> None:  # indented as the mark's line is
        line = lead = text.rfind("\n", 0, start) + 1
        while text[lead] == " ":
            lead += 1
        _write_rows(spilled, write, indent, lead - line)

    _write_marked(text, rows, write, indented)


def _write_marked(text: str, rows: list, write: Callable[[str], Any], write_rows: Callable) -> None:
    """``text`` through ``write`` with each mark in it (``_MARK``) replaced by what it stands for,
    ``rows[i]``: a ``SpilledMapping`` an item at a time, a ``SpilledRows`` by
    ``write_rows(rows, where the mark starts in text)``."""
    import re

    from ..analysis.spill import SpilledMapping

    at = 0
    for m in re.finditer(_MARKED, text):
        write(text[at : m.start()])
        at = m.end()
        spilled = rows[int(m.group(1))]
        if isinstance(spilled, SpilledMapping):
            _write_items(spilled, write)
        else:
            write_rows(spilled, m.start())
    write(text[at:])


def _write_items(items, write: Callable[[str], Any]) -> None:
    """A mapping as ``json.dumps(separators=(",", ":"))`` writes it, an item at a time."""
    pieces, size = ["{"], 1
    for i, (key, value) in enumerate(items.items()):
        piece = ("," if i else "") + dumps_compact(key) + ":" + dumps_compact(value)
        pieces.append(piece)
        size += len(piece)
        if size >= _WRITE_BYTES:
            write("".join(pieces))
            pieces, size = [], 0
    pieces.append("}")
    write("".join(pieces))


def write_compact(value: Any, write: Callable[[str], Any]) -> None:
    """``dumps_compact(value)``, byte for byte, through ``write(text)`` a piece at a time: each
    ``analysis.spill.SpilledRows`` (or ``SpilledMapping``) in ``value`` (see ``_marked_anywhere``)
    is read from its file and written a row at a time, never the text of all of them at once."""

    rows: list = []
    text = dumps_compact(_marked_anywhere(value, rows))
    if not rows:
        write(text)
        return
    _write_marked(text, rows, write, lambda spilled, _start: _write_compact_rows(spilled, write))


def _marked_anywhere(value: Any, rows: list, depth: int = 0) -> Any:
    """``value`` with every ``SpilledRows``/``SpilledMapping`` in it (itself, or a dict's value
    down to two dicts deep: where a report and the HTML's views hold them) replaced by a marker
    string (appended to ``rows``); a dict holding one copied, the rest shared."""
    from ..analysis.spill import SpilledMapping, SpilledRows

    if isinstance(value, (SpilledRows, SpilledMapping)):
        rows.append(value)
        return _MARK.format(len(rows) - 1)
    if isinstance(value, dict) and depth < 2:
        out = {k: _marked_anywhere(v, rows, depth + 1) for k, v in value.items()}
        return out if any(out[k] is not v for k, v in value.items()) else value
    return value


def _write_compact_rows(rows, write: Callable[[str], Any]) -> None:
    """A list of ``rows`` as ``json.dumps(separators=(",", ":"))`` writes it, a row at a time."""
    pieces, size = ["["], 1
    for i, row in enumerate(rows):
        piece = ("," if i else "") + dumps_compact(row)
        pieces.append(piece)
        size += len(piece)
        if size >= _WRITE_BYTES:
            write("".join(pieces))
            pieces, size = [], 0
    pieces.append("]")
    write("".join(pieces))


def write_report_file(path, data: dict, *, indent: Optional[int] = 2, end: str = "\n") -> None:
    """``dumps_report(data) + end`` written to ``path`` (UTF-8, whole or not at all) through
    ``write_report``: a windowed read's per-step rows streamed from their file."""
    from ..traces.atomic import replace_atomically

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            write_report(data, f.write, indent=indent)
            f.write(end)

    replace_atomically(path, write)


def _write_rows(rows, write: Callable[[str], Any], indent: int, lead: int) -> None:
    """A list of ``rows`` as ``json.dumps`` indents it where its line is indented by ``lead``."""
    if not len(rows):
        write("[]")
        return
    inner = "\n" + " " * (lead + indent)
    pieces, size = ["["], 1
    for i, row in enumerate(rows):
        piece = ("," if i else "") + inner + dumps_indented(row, indent).replace("\n", inner)
        pieces.append(piece)
        size += len(piece)
        if size >= _WRITE_BYTES:
            write("".join(pieces))
            pieces, size = [], 0
    pieces.append("\n" + " " * lead + "]")
    write("".join(pieces))


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
    return _json_dumps(obj, indent=indent)  # only where the core's writer does not answer


def dumps_compact(obj: Any) -> str:
    """``json.dumps(obj, separators=(",", ":"))``, byte for byte, through the core's writer (2-3x
    CPython's C encoder, whose floats go through ``float.__repr__``); the same fallback."""
    text = _native_or_json("json_dumps_compact", obj)
    if text:
        return text
    return _json_dumps(obj, separators=(",", ":"))


def _json_dumps(obj: Any, **options) -> str:
    """``json.dumps``, a windowed read's per-step rows on disk written as the lists they are."""
    import json

    from ..analysis.spill import json_default

    return json.dumps(obj, default=json_default, **options)


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
