"""A table is declared once, in analysis/fields.py: a toy table declared there (and nowhere else),
its rows put in a report dict, reaches the JSON Schema, the plausibility checks and the terminal,
Markdown and HTML reports without a change to any of them."""

from __future__ import annotations

import pytest
from report_samples import cpu_report_dict

import gpuprof
from gpuprof.analysis import fields, section
from gpuprof.analysis.fields import Field, Table
from gpuprof.report.build import build_report
from gpuprof.report.json_schema import schema

TOY = Table(
    "toy_queues",
    "Toy queues",
    (
        Field("name", "string", "the queue's name"),
        Field("calls", "integer", "items put on it"),
        Field("total_us", "number", "time spent waiting on it"),
        Field("full_pct", "number", "share of the span it was full"),
    ),
    shown=True,
    terminal=True,
)

# A name from outside with markup in it; the second row's share is out of 0-100 (clamped to 100).
ROWS = [
    {"name": "queue<b>ingress</b>", "calls": 7, "total_us": 1234.5, "full_pct": 40.0},
    {"name": "queue_egress", "calls": 3, "total_us": 99.0, "full_pct": 130.0},
]


@pytest.fixture
def toy(monkeypatch):
    """TOY declared beside the real tables, for this test only."""
    monkeypatch.setattr(fields, "TABLES", fields.TABLES + (TOY,))


def _report():
    data = cpu_report_dict()
    data["toy_queues"] = [dict(r) for r in ROWS]
    return build_report(analysed=data)


def test_the_json_schema_has_the_toy_rows(toy):
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    node = schema()["properties"]["toy_queues"]
    row = node["oneOf"][0]["items"]["properties"]
    assert row == {
        "name": {"type": "string"},
        "calls": {"type": "integer"},
        "total_us": {"type": "number"},
        "full_pct": {"type": "number"},
    }
    data = _report().to_dict()
    jsonschema.validate(data, schema())
    data["toy_queues"][0]["calls"] = "seven"
    with pytest.raises(jsonschema.ValidationError, match="'seven' is not of type 'integer'"):
        jsonschema.validate(data, schema())


def test_a_toy_percentage_is_clamped_and_said(toy):
    assert fields.percent_fields()["toy_queues"] == ("full_pct",)
    r = _report()
    assert [row["full_pct"] for row in r.data["toy_queues"]] == [40.0, 100.0]
    moved = [w for w in r.data["warnings"] if w["kind"] == "percent_out_of_range"]
    assert len(moved) == 1 and moved[0]["count"] == 1 and "full_pct (1)" in moved[0]["message"]


def test_the_terminal_report_draws_the_toy_table(toy):
    text = _report().to_text(color=False, width=160)
    assert "Toy queues (top 2 of 2)" in text
    assert "queue<b>ingress</b>" in text and "queue_egress" in text
    # Its header row, from the declared keys, in the declared order.
    header = next(line for line in text.splitlines() if "name" in line and "calls" in line and "full" in line)
    assert header.index("calls") < header.index("full")


def test_the_markdown_report_draws_the_toy_table(toy):
    md = _report().to_markdown()
    assert "### Toy queues (top 2 of 2)" in md
    # The outside name escaped, the ordering by time (the larger total first).
    first = md.index("queue&lt;b&gt;ingress&lt;/b&gt;")
    assert first < md.index("queue\\_egress")
    assert "<b>ingress" not in md


def test_the_html_report_draws_the_toy_table(toy):
    html = _report().to_html()
    assert 'id="table-toy_queues"' in html
    section = html[html.index('id="table-toy_queues"') :]
    section = section[: section.index("</table>")]
    assert "queue&lt;b&gt;ingress&lt;/b&gt;" in section and "queue_egress" in section
    assert "<b>ingress" not in html
    assert "Toy queues" in html


def test_without_the_declaration_no_format_draws_it():
    """The same rows in a report whose tables do not declare them are drawn nowhere: what
    draws the toy above is its declaration."""
    r = _report()
    assert "toy_queues" not in schema()["properties"]
    assert "Toy queues" not in r.to_text(color=False, width=160)
    assert "Toy queues" not in r.to_markdown()
    assert "table-toy_queues" not in r.to_html()


def test_every_declared_table_is_a_report_accessor():
    """``report.<key>`` for each declared table: its rows, or [] when the report has none."""
    r = gpuprof.Report(cpu_report_dict())
    for t in fields.TABLES:
        assert getattr(r, t.key) == section(r.data, t.key), t.key
        assert getattr(type(r), t.key).__doc__, t.key
    assert r.kernels == [] and r.operators and r.operators[0]["calls"] > 0
