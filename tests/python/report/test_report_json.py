"""The JSON form: round trips, and docs/schema.md documents every key a report has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_samples import cpu_report, gpu_report

import gpuprof
from gpuprof.analysis import SCHEMA_VERSION
from gpuprof.cli import main

SCHEMA_DOC = Path(__file__).resolve().parents[3] / "docs" / "schema.md"


def test_to_json_and_load_round_trip(tmp_path):
    r = gpu_report()
    path = tmp_path / "r.json"
    r.to_json(path)
    assert gpuprof.Report.load(path).to_dict() == r.to_dict()


def test_cli_report_format_json_round_trips(tmp_path, capsys):
    src = tmp_path / "report.json"
    cpu_report().to_json(src)
    assert main(["report", str(src), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(src.read_text())
    # The same through -o, the format taken from the suffix.
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "again.json")]) == 0
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(src.read_text())


def test_schema_doc_documents_every_key():
    doc = SCHEMA_DOC.read_text()
    assert "schema_version" in doc and re.search(rf"`schema_version`.*\b{SCHEMA_VERSION}\b", doc)
    d = gpu_report().to_dict()
    keys = set(d) | set(d["steps"][0]) | set(d["average"]) | set(d["counts"]) | set(d["step_rules"])
    keys |= set(d["dataloaders"][0]) | set(d["host"]) | set(d["devices"][0]) | set(d["advice"][0])
    missing = sorted(k for k in keys if f"`{k}`" not in doc)
    assert not missing, f"docs/schema.md does not document {missing}"


def test_reports_validate_against_the_json_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    jsonschema.validate(cpu_report().to_dict(), SCHEMA)  # a real CPU loop
    jsonschema.validate(gpu_report().to_dict(), SCHEMA)  # with every GPU section
    broken = cpu_report().to_dict()
    broken["steps"][0]["total_us"] = "12 ms"
    with pytest.raises(jsonschema.ValidationError, match="'12 ms' is not of type 'number'"):
        jsonschema.validate(broken, SCHEMA)


def property_names(schema: dict) -> set[str]:
    """Every key the schema names, at any depth (for checking the prose docs against it)."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            names.update(node.get("properties", {}).keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return names - {"rows"}


def test_json_schema_and_schema_doc_name_the_same_keys():
    from gpuprof.report.json_schema import SCHEMA

    doc = SCHEMA_DOC.read_text()
    missing = sorted(k for k in property_names(SCHEMA) if f"`{k}`" not in doc)
    assert not missing, f"docs/schema.md does not document {missing}"
