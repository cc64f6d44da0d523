"""`gpuprof analyze DIR` over the ranks of one job where one rank's file cannot be read: the file is
named (stderr and the report), skipped, and the report of the other ranks is made (exit 0)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import gpuprof

WORLD = 4
BAD_RANK = 2


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory):
    """WORLD rank traces of a CPU training loop (the same loop's trace, each file with its rank in
    distributedInfo, as torch.profiler writes it in a job), rank BAD_RANK's cut in the middle."""
    folder = tmp_path_factory.mktemp("ranks")
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile() as prof:
        for _ in range(4):
            loss = model(torch.randn(8, 16)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    plain = folder / "plain.json"
    prof.export_chrome_trace(plain)
    trace = json.loads(plain.read_text())
    plain.unlink()
    for rank in range(WORLD):
        trace["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": WORLD}
        text = json.dumps(trace)
        if rank == BAD_RANK:
            text = text[: len(text) // 2]  # a job killed while writing it
        (folder / f"host_{rank}.pt.trace.json").write_text(text)
    return folder


def _analyze(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_one_truncated_rank_file_is_named_and_the_others_reported(rank_folder, tmp_path, workers):
    out = tmp_path / "report.json"
    p = _analyze(rank_folder, "--json", out, "--workers", workers)
    assert p.returncode == 0, p.stderr
    bad = f"host_{BAD_RANK}.pt.trace.json"
    skipped = [ln for ln in p.stderr.splitlines() if ln.startswith("gpuprof analyze: skipped")]
    assert len(skipped) == 1 and bad in skipped[0], p.stderr
    report = json.loads(out.read_text())
    cr = report["cross_rank"]
    assert [r["rank"] for r in report["ranks"]] == [r for r in range(WORLD) if r != BAD_RANK]
    assert cr["world_size"] == WORLD and cr["missing_ranks"] == [BAD_RANK]
    assert [s["path"].endswith(bad) for s in cr["skipped_files"]] == [True]
    assert cr["skipped_files"][0]["error"] and bad in cr["note"]
    # The terminal report says which ranks are missing and why (wrapped to the terminal's width).
    words = " ".join(p.stdout.split())
    assert f"missing ranks: {BAD_RANK} (1 rank file could not be read and was skipped: " in words
    assert f"{bad} (invalid JSON at byte" in words


def test_the_schema_knows_the_skipped_files(rank_folder, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    out = tmp_path / "report.json"
    assert _analyze(rank_folder, "--json", out, "--workers", 1).returncode == 0
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    bad = json.loads(json.dumps(report))
    bad["cross_rank"]["skipped_files"] = [{"path": 1}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_a_folder_where_no_file_can_be_read_is_one_line_exit_2(tmp_path):
    for rank in range(2):
        (tmp_path / f"host_{rank}.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "na')
    p = _analyze(tmp_path)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no file of" in lines[0] and "(and 1 more)" in lines[0], p.stderr
