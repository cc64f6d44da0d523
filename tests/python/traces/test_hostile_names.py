"""Strings from outside (a trace's path, operator and kernel names, a GPU's name, a data set's name,
trace metadata) cannot act in any output: in the terminal report they show escaped (a newline does
not start a line, ESC does not start an ANSI sequence, `[red]` is not rich markup, a bidi override
does not reorder the line); in Markdown they cannot leave their cell or code span; in HTML they are
text, not markup; JSON carries them exactly; an error message stays one line."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

from report_samples import cpu_report_dict, with_gpu_sections

import gpuprof

HOSTILE = "evil\n# Heading\x1b[31m[red]RED[/red]\u202e<script>alert(1)</script>|`x`\r\x07"


def hostile_report() -> gpuprof.Report:
    d = with_gpu_sections(copy.deepcopy(cpu_report_dict()))
    d["source"] = {**d.get("source", {}), "path": HOSTILE}
    d["operators"][0]["name"] = HOSTILE
    for key in ("kernels", "operators"):
        for row in d.get(key, [])[:2]:
            row["name"] = HOSTILE
    for dev in d.get("devices", []):
        dev["name"] = HOSTILE
    d["dataloaders"] = [{"dataset": HOSTILE, "batch_size": 8, "num_workers": 0}]
    d["metadata"] = {**d.get("metadata", {}), "gpu_collection": "off: " + HOSTILE}
    # The memory view names operators and modules from the trace, and an error's message.
    owner = {"name": HOSTILE, "bytes": 4 << 20, "count": 2}
    d["memory_ops"] = [
        {
            "name": HOSTILE,
            "device": 0,
            "calls": 2,
            "size_increase_bytes": 4096,
            "self_size_increase_bytes": 4096,
            "alloc_count": 2,
            "self_alloc_count": 2,
            "alloc_bytes": 4096,
            "self_alloc_bytes": 4096,
        }
    ]
    d["memory_peak"] = {
        "0": {
            "t_us": 1.0,
            "step": 0,
            "bytes": 8 << 20,
            "reserved_bytes": None,
            "top_ops": [owner],
            "top_modules": [owner],
        }
    }
    d["memory_composition"] = {
        "0": {
            "parameters": 4 << 20,
            "gradients": 0,
            "optimizer_state": 0,
            "activations": 4 << 20,
            "temporary": 0,
            "unknown": 0,
        }
    }
    d["memory_growth"] = {
        "0": {
            "mb_per_step": 1.0,
            "bytes_per_step": 1e6,
            "flagged": True,
            "steps": [1, 2, 3, 4],
            "end_bytes": [1, 2, 3, 4],
            "rising_steps": 3,
            "steps_counted": 3,
            "ops": [{"name": HOSTILE, "bytes_per_step": 1e6, "count": 3}],
            "modules": [],
        }
    }
    d["out_of_memory"] = {
        "error": HOSTILE,
        "message": HOSTILE,
        "device": 0,
        "requested_bytes": 1 << 30,
        "notes": [HOSTILE],
        "composition": d["memory_composition"]["0"],
        "composition_source": HOSTILE,
        "top_ops": [owner],
        "top_modules": [owner],
    }
    return gpuprof.Report.from_dict(d)


def test_terminal_report_shows_outside_strings_escaped():
    report = hostile_report()
    for color in (False, True):
        out = report.to_text(color=color, width=200)
        assert "\x07" not in out and "\r" not in out and "\u202e" not in out
        assert "\x1b[31m[red]" not in out  # the trace's ESC never reaches the terminal
        if not color:
            assert "\x1b" not in out
        assert not any(line.startswith("# Heading") for line in out.splitlines())
        assert "\\x1b[31m[red]RED[/red]" in out  # shown, escaped, markup left as text
        assert "evil\\n# Heading" in out
    assert "DataLoader (evil\\n# Heading" in report.to_text(color=False, width=200)


def test_markdown_report_keeps_names_in_their_cells():
    md = hostile_report().to_markdown()
    assert "\x1b" not in md and "\u202e" not in md and "\r" not in md
    for line in md.splitlines():
        assert not line.startswith("# Heading"), line
        outside = re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)  # inside a code span nothing is markup
        assert "<script>" not in outside and "[red]" not in outside.replace("\\[red\\]", ""), line
        if line.startswith("|") and "evil" in line:
            # every | inside a cell is escaped: the row has as many cells as its header
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            assert all("evil" not in c or "Heading" in c for c in cells)


def test_html_report_has_names_as_text():
    html = hostile_report().to_html()
    assert "<script>alert(1)" not in html
    assert "[red]RED[/red]" in html or "[red]RED[\\/red]" in html or "RED" in html


def test_json_report_carries_names_exactly(tmp_path):
    path = tmp_path / "r.json"
    hostile_report().to_json(path)
    back = json.loads(path.read_text())
    assert back["source"]["path"] == HOSTILE
    assert gpuprof.Report.load(path).to_dict()["operators"][0]["name"] == HOSTILE


def test_cli_error_about_a_hostile_file_name_is_one_line(tmp_path):
    bad = tmp_path / "evil\n# Heading\x1b[31m.json"
    bad.write_bytes(b'{"traceEvents": [1, 2')
    for verb in ("analyze", "report"):
        proc = subprocess.run(
            [sys.executable, "-m", "gpuprof", verb, str(bad)], capture_output=True, timeout=300
        )
        assert proc.returncode == 2, proc
        err = proc.stderr.decode()
        assert "Traceback" not in err and "\x1b" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert "evil\\n# Heading\\x1b[31m.json" in err


def test_text_report_of_a_cpu_run_is_unchanged_by_escaping():
    # Ordinary names (non-ASCII included) are shown as they are.
    d = copy.deepcopy(cpu_report_dict())
    d["source"] = {**d.get("source", {}), "path": "/runs/résumé/rank0.json"}
    out = gpuprof.Report.from_dict(d).to_text(color=False)
    assert "/runs/résumé/rank0.json" in out


def test_rank_hosts_from_traces_show_inert_in_the_terminal():
    """The cross-rank table's host names come from the traces' metadata."""
    d = copy.deepcopy(cpu_report_dict())
    avg = d["average"]
    d["ranks"] = [
        {
            "rank": r,
            "hostname": HOSTILE,
            "device": HOSTILE,
            "steps": 3,
            "average": avg,
            "busy_us": 10.0,
            "collective_wait_us": 0.0,
            "comm_comp_overlap_pct": None,
        }
        for r in (0, 1)
    ]
    d["cross_rank"] = {"world_size": 2, "matched_steps": 3, "imbalance_pct": 0.0}
    out = gpuprof.Report.from_dict(d).to_text(color=True, width=200)
    assert "Ranks" in out and "\x1b[31m[red]" not in out and "\r" not in out and "\u202e" not in out
    assert "evil\\n# Heading" in out
