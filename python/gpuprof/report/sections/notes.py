"""The notes around the numbers: the trace beside the report, warnings, the span's own cost, the
step markers, the "about" rows; the advice's explanations as HTML; the drawn steps."""

from __future__ import annotations

from typing import Any, Optional

from .tables import fmt, header

# ---- the trace beside the report, and the "about" rows ------------------------------------------------
PERFETTO_URL = "https://ui.perfetto.dev"


def trace_note(data: dict) -> Optional[str]:
    """Where the Chrome trace of this report is and how to open it; None when none was written."""
    path = data.get("source", {}).get("trace_path")
    if not path:
        return None
    return (
        f'Trace: {path} (open it in {PERFETTO_URL} with "Open trace file", or in '
        'chrome://tracing with "Load")'
    )


def warning_lines(data: dict) -> list[str]:
    """The report's warnings (implausible input: docs/metrics.md), one message each, as they stand
    in ``warnings``; for a report from before warnings existed, what its step rules counted."""
    rows = data.get("warnings")
    if isinstance(rows, list):
        return [str(w["message"]) for w in rows if isinstance(w, dict) and w.get("message")]
    note = step_marker_note(data)
    return [note] if note else []


def span_end_note(data: dict) -> Optional[str]:
    """gpuprof's own time at a live span's end (building, then writing its report), which falls
    between two training steps and counts in neither; None when not recorded."""
    src = data.get("source") or {}
    build, write = src.get("report_build_s"), src.get("report_write_s")
    if not isinstance(build, (int, float)):
        return None
    parts = [f"{build:.3f} s building this report"]
    if isinstance(write, (int, float)):
        parts.append(f"{write:.3f} s writing it (on_trace_ready)")
    return "gpuprof at the span's end: " + ", ".join(parts) + " (between two steps, counted in neither)"


def step_marker_note(data: dict) -> Optional[str]:
    """What the step rules did with step markers that would have cut zero-length or overlapping
    steps (repeated or nested ``ProfilerStep#N``); None when there were none."""
    rules = data.get("step_rules") or {}
    parts = []
    if rules.get("duplicate_step_markers"):
        n = rules["duplicate_step_markers"]
        parts.append(f"{n} ProfilerStep markers repeated a step number: each number's became one step")
    if rules.get("nested_step_markers"):
        n = rules["nested_step_markers"]
        parts.append(
            f"{n} ProfilerStep marker{'s' if n > 1 else ''} inside another step (a nested profiler?) "
            f"{'were' if n > 1 else 'was'} dropped"
        )
    return "; ".join(parts) or None


def about_value(key: str, value: Any) -> str:
    """A source/metadata value for a person: a Unix time as a UTC date, the rest as text."""
    if key.endswith("_unix") and isinstance(value, (int, float)) and not isinstance(value, bool):
        import datetime

        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return fmt(key, value) if not isinstance(value, str) else value


def about_label(key: str) -> str:
    return header(key[: -len("_unix")] if key.endswith("_unix") else key)


# ---- advice explanations, as HTML (the report is one file: docs/ is not installed) ----------------
def md_to_html(text: str) -> str:
    """A small Markdown subset (paragraphs, bullet lists, tables as rows, **bold**, *em*, `code`)
    to HTML. Every character of the input is escaped first; only the tags made here are markup."""
    import html as _html
    import re as _re

    def inline(s: str) -> str:
        s = _html.escape(s, quote=True)
        s = _re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
        s = _re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", s)
        s = _re.sub(r"(?<![*\w])\*([^*\s][^*]*)\*(?![*\w])", r"<i>\1</i>", s)
        s = _re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r"\1", s)  # links: their text (targets are docs/)
        return s

    out: list[str] = []
    para: list[str] = []
    items: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()
        if rows:
            out.append(
                "<table>"
                + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows)
                + "</table>"
            )
            rows.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith("|"):
            if para or items:
                flush()
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if not all(_re.fullmatch(r":?-{2,}:?", c) for c in cells):
                rows.append(cells)
        elif _re.match(r"^[-*] ", stripped):
            if para or rows:
                flush()
            items.append(stripped[2:])
        elif items and line.startswith("  "):
            items[-1] += " " + stripped
        else:
            if items or rows:
                flush()
            para.append(stripped)
    flush()
    return "".join(out)


def advice_explanation_html(rule_id: Any) -> str:
    """The rule's explanation from the packaged docs/advice.md, as HTML; "" when there is none."""
    from ...advice.explain import explanation

    text = explanation(str(rule_id)) if rule_id else None
    return md_to_html(text) if text else ""


def step_views(data: dict) -> dict:
    """The drawn steps' events, per-step tops and outliers (analysis.step_views); {} when absent."""
    v = data.get("step_views")
    return v if isinstance(v, dict) else {}
