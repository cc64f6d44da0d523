"""Plain terminal output for ``print(report)``: styled lines, word wrapping and column tables.

The standard library only, imported in about a millisecond: importing rich took 0.025 s and its
layout 0.01 s more, a sixth of ``gpuprof analyze`` on a 50 MB trace. Widths are counted in terminal
cells (East Asian wide characters take two, combining marks none), so names in any script line up.
Text is never interpreted: callers pass strings from outside through ``sections.printable`` first
(control characters shown as escapes), and there is no markup to inject.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Optional, Union

# ANSI SGR codes of the styles the renderers use (the 16 colours every terminal has).
_SGR = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "white": "37",
    "bright_blue": "94",
}

Segment = Union[str, "tuple[str, Optional[str]]"]


def _char_cells(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def cell_len(s: str) -> int:
    """Terminal cells `s` takes."""
    if s.isascii():
        return len(s)
    return sum(_char_cells(c) for c in s)


def _fit(s: str, start: int, cells: int) -> int:
    """The largest end such that s[start:end] takes at most `cells` cells."""
    if s.isascii():
        return min(len(s), start + max(cells, 0))
    used = 0
    end = start
    while end < len(s):
        w = _char_cells(s[end])
        if used + w > cells:
            break
        used += w
        end += 1
    return end


def clip(s: str, width: int) -> str:
    """`s` cut to `width` cells, its end shown as an ellipsis when cut."""
    if cell_len(s) <= width:
        return s
    if width <= 0:
        return ""
    return s[: _fit(s, 0, width - 1)] + "…"


def pad(s: str, width: int, justify: str = "left") -> str:
    """`s` (at most `width` cells) padded with spaces to `width` cells."""
    gap = width - cell_len(s)
    if gap <= 0:
        return s
    return " " * gap + s if justify == "right" else s + " " * gap


def _word_lines(text: str, width: int) -> list[str]:
    """`text` wrapped at spaces into lines of at most `width` cells (a longer word has its own)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _two_line_width(text: str) -> int:
    """The narrowest width at which `text` wraps into at most two lines."""
    w = max([cell_len(word) for word in text.split(" ")] + [1])
    while len(_word_lines(text, w)) > 2:
        w += 1
    return w


class Table:
    """Columns separated by two spaces, a header row and an optional title above; no rules."""

    def __init__(
        self, title: Optional[str] = None, *, header_style: Optional[str] = "bold", show_header: bool = True
    ):
        self.title = title
        self.header_style = header_style
        self.show_header = show_header
        self.columns: list[dict] = []
        self.rows: list[tuple[list[str], Optional[str]]] = []

    def add_column(
        self,
        header: str = "",
        *,
        justify: str = "left",
        max_width: Optional[int] = None,
        min_width: Optional[int] = None,
    ) -> None:
        self.columns.append(
            {"header": header, "justify": justify, "max_width": max_width, "min_width": min_width}
        )

    def add_row(self, *cells: str, style: Optional[str] = None) -> None:
        self.rows.append(([str(c) for c in cells], style))

    def widths(self, total: int) -> list[int]:
        """Each column's width: its widest cell, within its bounds; when the table is wider than
        `total`, the widest left-justified (text) columns give up cells, down to 8 each."""
        ws = []
        for i, col in enumerate(self.columns):
            w = max(
                [cell_len(col["header"]) if self.show_header else 0]
                + [cell_len(cells[i]) for cells, _ in self.rows if i < len(cells)]
            )
            if col["max_width"] is not None:
                w = min(w, col["max_width"])
            if col["min_width"] is not None:
                w = max(w, col["min_width"])
            ws.append(w)
        over = sum(ws) + 2 * (len(ws) - 1) - total
        while over > 0:
            text_cols = [i for i, c in enumerate(self.columns) if c["justify"] == "left" and ws[i] > 8]
            if not text_cols:
                break
            i = max(text_cols, key=lambda j: ws[j])
            cut = min(over, ws[i] - 8)
            ws[i] -= cut
            over -= cut
        if over > 0 and self.show_header:
            # Then headers wider than their numbers wrap onto more lines ("DataLoader us" over two),
            # never below their longest word or widest cell.
            floor = [
                max(
                    [_two_line_width(col["header"])]
                    + [cell_len(cells[i]) for cells, _ in self.rows if i < len(cells)]
                )
                for i, col in enumerate(self.columns)
            ]
            while over > 0:
                i = max(range(len(ws)), key=lambda j: ws[j] - floor[j])
                if ws[i] <= floor[i]:
                    break
                cut = min(over, ws[i] - floor[i])
                ws[i] -= cut
                over -= cut
        return ws

    def header_lines(self, ws: list[int]) -> list[list[str]]:
        """The header row as lines of cells: each header wrapped at spaces to its width, the
        shorter ones at the bottom, next to the cells they name."""
        wrapped = [_word_lines(col["header"], w) for col, w in zip(self.columns, ws)]
        height = max(len(lines) for lines in wrapped)
        return [[([""] * (height - len(lines)) + lines)[k] for lines in wrapped] for k in range(height)]


class Console:
    """Collects lines of text; ``color`` adds ANSI styles, ``width`` is where lines wrap."""

    def __init__(self, width: int = 120, color: bool = False):
        self.width = max(20, width)
        self.color = color
        self._lines: list[str] = []

    def paint(self, text: str, style: Optional[str]) -> str:
        if not self.color or not style or not text:
            return text
        return f"\x1b[{';'.join(_SGR[s] for s in style.split())}m{text}\x1b[0m"

    def print(self, *segments: Segment, style: Optional[str] = None, indent: int = 0) -> None:
        """One line from `segments` (plain strings, or (text, style) pairs; `style` applies to the
        plain ones), wrapped at spaces to the width; continuation lines are indented by `indent`."""
        parts = [(s, style) if isinstance(s, str) else (s[0], s[1] or style) for s in segments]
        plain = "".join(t for t, _ in parts)
        for start, end in self._wrap(plain, indent):
            while end > start and plain[end - 1] == " ":  # no trailing blanks, styled or not
                end -= 1
            out = []
            pos = 0
            for text, st in parts:
                lo, hi = max(start, pos), min(end, pos + len(text))
                if lo < hi:
                    out.append(self.paint(plain[lo:hi], st))
                pos += len(text)
            line = "".join(out)
            self._lines.append(" " * indent + line if start > 0 and line else line)

    def _wrap(self, plain: str, indent: int) -> list[tuple[int, int]]:
        spans = []
        start = 0
        avail = self.width
        while cell_len(plain[start:]) > avail:
            limit = _fit(plain, start, avail)
            cut = plain.rfind(" ", start, limit + 1)
            if cut <= start:  # one word longer than the line: broken where the line ends
                cut, nxt = max(limit, start + 1), max(limit, start + 1)
            else:
                nxt = cut + 1
                while nxt < len(plain) and plain[nxt] == " ":
                    nxt += 1
            spans.append((start, cut))
            start = nxt
            avail = max(self.width - indent, 10)
        spans.append((start, len(plain)))
        return spans

    def table(self, t: Table) -> None:
        if not t.columns:
            return
        ws = t.widths(self.width)

        def row(cells: Sequence[str], style: Optional[str]) -> str:
            text = "  ".join(
                pad(clip(cells[i] if i < len(cells) else "", w), w, c["justify"])
                for i, (c, w) in enumerate(zip(t.columns, ws))
            ).rstrip()
            return self.paint(text, style)

        if t.title:
            self.print((t.title, "bold"))
        if t.show_header:
            for cells in t.header_lines(ws):
                self._lines.append(row(cells, t.header_style))
        for cells, style in t.rows:
            self._lines.append(row(cells, style))

    def text(self) -> str:
        return "\n".join(self._lines)
