"""``gpuprof report DIR|JSON --format text|md|html|json [-o OUT]``: render a saved report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import UserError

FORMATS = ["text", "md", "html", "json"]
_BY_SUFFIX = {
    ".html": "html",
    ".htm": "html",
    ".md": "md",
    ".markdown": "md",
    ".json": "json",
    ".txt": "text",
}


def load_report(path: str):
    """A saved report from a JSON file or a ``gpuprof run --out`` folder; UserError otherwise."""
    from ..report.model import Report
    from ..traces.journal import JOURNAL_FILE

    p = Path(path)
    if p.is_dir():
        if (p / JOURNAL_FILE).is_file() and _newer((p / JOURNAL_FILE), p / "report.json"):
            # A job killed before its span closed: the steps it completed, from its journal (a
            # clean close removes it, so one newer than report.json is a later run's).
            from ..report.inputs import analyze_journal

            try:
                return analyze_journal(p / JOURNAL_FILE)
            except (OSError, ValueError) as e:
                raise UserError(f"cannot read the step journal {p / JOURNAL_FILE}: {e}") from None
        if not (p / "report.json").is_file():
            raise UserError(
                f"{path} is a folder without report.json in it; give the report's JSON "
                "file or the folder `gpuprof run --out` wrote"
            )
        p = p / "report.json"
    elif not p.exists():
        raise UserError(f"{path}: no such file or folder")
    from ..traces.read import InputTooLarge, read_json

    try:
        data = read_json(p)
    except InputTooLarge as e:
        raise UserError(str(e)) from None
    except UnicodeDecodeError:
        raise UserError(
            f"{p} is not a JSON text file (a compressed profiler trace? read those with `gpuprof analyze`)"
        ) from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except OSError as e:
        raise UserError(f"cannot read {p}: {e.strerror}") from None
    if not isinstance(data, dict) or "steps" not in data or "schema_version" not in data:
        hint = (
            " (it looks like a profiler trace: run `gpuprof analyze` on it)"
            if isinstance(data, dict) and "traceEvents" in data
            else ""
        )
        raise UserError(f"{p} is JSON but not a gpuprof report: it has no schema_version and steps{hint}")
    try:
        return Report.from_dict(data)
    except ValueError as e:
        raise UserError(f"{p}: {e}") from None


def render(report, fmt: str, *, color: bool | None = None) -> str:
    if fmt == "text":
        return report.to_text(color=color) + "\n"
    if fmt == "md":
        return report.to_markdown()
    if fmt == "html":
        return report.to_html()
    if fmt == "json":
        return report.to_json() + "\n"
    raise UserError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def write_output(text: str, out: str | None) -> None:
    if out is None or out == "-":
        sys.stdout.write(text)
        return
    from ..traces.atomic import write_text

    try:
        write_text(out, text)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="render a saved report as text, Markdown, HTML or JSON",
        description="Render a saved gpuprof report (report.json, or the folder "
        "`gpuprof run` wrote) as text, Markdown, one-file HTML or JSON.",
    )
    p.add_argument("path", metavar="DIR|JSON", help="report.json, or a folder holding one")
    p.add_argument(
        "--format",
        "-f",
        choices=FORMATS,
        default=None,
        help="output format (default: from -o's suffix, else text)",
    )
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="write here instead of stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    report = load_report(args.path)
    fmt = args.format
    if fmt is None:
        fmt = _BY_SUFFIX.get(Path(args.output).suffix.lower(), "text") if args.output else "text"
    color = None if args.output in (None, "-") else False
    write_output(render(report, fmt, color=color), args.output)
    if args.output not in (None, "-"):
        print(f"gpuprof report: wrote {args.output}", file=sys.stderr)
    return 0


def _newer(a: Path, b: Path) -> bool:
    """``a`` was written after ``b``, or ``b`` is not there."""
    try:
        return not b.is_file() or a.stat().st_mtime >= b.stat().st_mtime
    except OSError:
        return False
