"""`gpuprof diff` and `gpuprof check` show strings from outside (kernel and operator names from a
trace, a GPU's id, paths) inert: terminal escapes cannot clear the screen, set the window title,
print a hyperlink, ring the bell or reorder the line; the JUnit XML stays well-formed."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET

import pytest
from report_samples import cpu_report_dict, with_gpu_sections

from gpuprof.cli import main
from gpuprof.report.markdown import md_escape
from gpuprof.report.sections import printable

# Each would act on a terminal: clear the screen, set the window title (OSC 0, BEL-terminated), an
# OSC 8 hyperlink (ST-terminated), the bell, a right-to-left override, and a lone surrogate (which no
# encoding can write: a report's JSON may hold one).
PAYLOADS = {
    "clear": "\x1b[2J\x1b[H",
    "title": "\x1b]0;pwned\x07",
    "link": "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\",
    "bell": "\x07",
    "rtl": "\u202egpj.exe",
    "surrogate": "\ud800",
}
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _report_file(path, *, scale: float, payload: str, device_id=0) -> str:
    d = with_gpu_sections(copy.deepcopy(cpu_report_dict()))
    for key in ("kernels", "operators"):
        for row in d[key][:2]:
            row["name"] = f"{payload}{row['name']}"
        for row in d[key]:
            for k in ("total_us", "host_total_us"):
                if isinstance(row.get(k), (int, float)):
                    row[k] *= scale
    d["devices"][0]["id"] = device_id
    path.write_text(json.dumps(d))  # JSON escapes: the file itself is plain ASCII
    return str(path)


@pytest.mark.parametrize("fmt", ["text", "md"])
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_diff_shows_names_and_paths_inert(tmp_path, capsys, fmt, name):
    payload = PAYLOADS[name]
    folder = tmp_path / ("runs" + payload.replace("\ud800", "").replace("/", ""))
    folder.mkdir()
    base = _report_file(folder / "base.json", scale=1.0, payload=payload)
    new = _report_file(folder / "new.json", scale=2.0, payload=payload)
    assert main(["diff", base, new, "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert not ACTIVE.search(out), repr(ACTIVE.search(out))
    # Shown as their escapes (\x1b, \u202e), with Markdown's own escaping on top in Markdown.
    shown = md_escape(payload) if fmt == "md" else printable(payload)
    assert shown in out and ("\\x" in shown or "\\u" in shown), (shown, out)


def test_check_junit_is_valid_xml_and_its_output_inert(tmp_path, capsys):
    hostile = "0\x1b[2J\x07\x00\x1b]0;pwned\x07\u202e\ud800"
    folder = tmp_path / "ci\x1b[31m"
    folder.mkdir()
    report = _report_file(folder / "report\x07.json", scale=1.0, payload="", device_id=hostile)
    junit = tmp_path / "junit.xml"
    rc = main(
        ["check", report, "--max", "utilization_pct=1", "--min", "utilization_pct=0", "--junit", str(junit)]
    )
    assert rc == 1
    out = capsys.readouterr().out
    assert not ACTIVE.search(out), out
    assert "FAIL  utilization_pct (GPU 0\\x1b[2J\\x07\\x00" in out
    tree = ET.parse(junit)  # well-formed XML 1.0
    suite = tree.getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1"
    texts = [c.get("name") for c in suite] + [f.get("message") for f in suite.iter("failure")]
    texts += [f.text for f in suite.iter("failure")]
    assert all(not ACTIVE.search(t) for t in texts), texts
    assert "GPU 0\\x1b[2J\\x07\\x00\\x1b]0;pwned\\x07\\u202e\\ud800" in texts[0]
    assert "ci\\x1b[31m/report\\x07.json" in [f.text for f in suite.iter("failure")][0]
