"""A killed job keeps its completed steps: each recorded step goes to the run's step journal
(steps.partial.jsonl) as it completes, and `gpuprof report`/`gpuprof analyze` of the folder rebuild
the report from it and say the job ended without closing. Real training loops in subprocesses,
ended by os._exit and SIGKILL, which run no Python cleanup at all."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import gpuprof
from gpuprof.traces.journal import JOURNAL_FILE, StepJournal, read_journal

# Optimizer steps end the steps `gpuprof run` finds; the script ends itself right after the
# optimizer step of loop iteration `after` (0-based), so steps start..after are complete.
RUN_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch

    how, after = sys.argv[1], int(sys.argv[2])
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(30):
        loss = model(torch.randn(8, 16)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == after:
            if how == "exit":
                os._exit(3)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
    print("script done")
""")

# The API: gpuprof.profile(journal=DIR) in the script itself, prof.step() at each step's end.
API_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    import gpuprof

    folder, how, after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=20), journal=folder) as prof:
        for i in range(25):
            loss = model(torch.randn(8, 16)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if i == after:
                if how == "exit":
                    os._exit(3)
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
    print(len(prof.reports()[0].steps), "steps")
""")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )


def _python(script, *args):
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)], capture_output=True, text=True, timeout=300
    )


def _report_json(folder) -> dict:
    p = _cli("report", "--format", "json", folder)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_os_exit_under_gpuprof_run_keeps_the_completed_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    out = tmp_path / "out"
    p = _cli("run", "--steps", "2:20", "--out", out, script, "exit", 7)
    assert p.returncode == 3, p.stderr  # the script's own exit status
    assert not (out / "report.json").exists()  # the span never closed
    assert (out / JOURNAL_FILE).is_file()
    report = _report_json(out)
    # Steps 2..7 completed before os._exit: six steps, each with a positive duration.
    assert [s["step"] for s in report["steps"]] == [2, 3, 4, 5, 6, 7]
    assert report["source"]["ended_without_closing"] is True
    assert "ended without closing after step 7" in report["source"]["note"]
    text = _cli("report", out)
    assert text.returncode == 0 and "ended without closing after step 7" in text.stdout
    # analyze of the folder reads the same journal.
    (analysed,) = gpuprof.analyze(out)
    assert [s["step"] for s in analysed.steps] == [2, 3, 4, 5, 6, 7]
    assert "ended without closing" in analysed.source["note"]


def test_sigkill_of_a_script_with_its_own_session_keeps_the_completed_steps(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT)
    out = tmp_path / "out"
    p = _python(script, out, "kill", 6)
    assert p.returncode == -signal.SIGKILL, p.stderr
    # schedule(wait=1, warmup=1): steps 2.. record; prof.step() after loop iteration 6 closed step 6.
    report = _report_json(out)
    assert [s["step"] for s in report["steps"]] == [2, 3, 4, 5, 6]
    assert all(s["total_us"] > 0 for s in report["steps"])
    assert "ended without closing after step 6" in report["source"]["note"]


def test_a_clean_close_leaves_no_journal(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    out = tmp_path / "out"
    p = _cli("run", "--steps", "2:6", "--out", out, script, "none", -1)
    assert p.returncode == 0, p.stderr
    assert (out / "report.json").is_file()
    assert not (out / JOURNAL_FILE).exists()
    assert "ended_without_closing" not in _report_json(out)["source"]
    api = tmp_path / "api.py"
    api.write_text(API_SCRIPT)
    folder = tmp_path / "api-out"
    p = _python(api, folder, "none", -1)
    assert p.returncode == 0 and "20 steps" in p.stdout, p.stderr
    assert not (folder / JOURNAL_FILE).exists()


def test_a_killed_rerun_into_the_same_folder_is_the_report_read(tmp_path):
    # A clean run writes report.json; a later run into the same --out is killed: `gpuprof report`
    # of the folder reads the later run's journal, not the earlier run's report.
    script = tmp_path / "train.py"
    script.write_text(RUN_SCRIPT)
    out = tmp_path / "out"
    assert _cli("run", "--steps", "2:5", "--out", out, script, "none", -1).returncode == 0
    assert _cli("run", "--steps", "2:20", "--out", out, script, "kill", 9).returncode == -signal.SIGKILL
    report = _report_json(out)
    assert [s["step"] for s in report["steps"]] == list(range(2, 10))
    assert "ended without closing after step 9" in report["source"]["note"]


def test_a_journal_cut_mid_line_still_reads(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT)
    out = tmp_path / "out"
    assert _python(script, out, "exit", 7).returncode == 3
    journal = out / JOURNAL_FILE
    text = journal.read_bytes()
    # Cut the last step's line (step 7) in the middle, as a kill during the write leaves it.
    last = text.rstrip(b"\n").rfind(b"\n")
    journal.write_bytes(text[: last + 1 + (len(text) - last) // 2])
    events, bad = read_journal(journal)
    assert [e["name"] for e in events] == [f"ProfilerStep#{n}" for n in range(2, 7)] and bad == 1
    report = _report_json(out)
    assert [s["step"] for s in report["steps"]] == [2, 3, 4, 5, 6]
    assert "ended without closing after step 6" in report["source"]["note"]
    assert "1 unreadable line(s) left out" in report["source"]["note"]


def test_a_failed_journal_write_is_one_warning_and_the_run_goes_on(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    p = _python(script, blocker / "out", "none", -1)
    assert p.returncode == 0 and "20 steps" in p.stdout, p.stderr
    assert p.stderr.count("cannot write the step journal") == 1, p.stderr


def test_the_journal_is_bounded(tmp_path, caplog):
    journal = StepJournal(tmp_path, max_bytes=600)
    for n in range(100):
        journal.step(n, n * 1000, n * 1000 + 500)
    size = (tmp_path / JOURNAL_FILE).stat().st_size
    assert size <= 600
    events, bad = read_journal(tmp_path / JOURNAL_FILE)
    # The steps up to the bound, in order, none cut.
    assert [e["name"] for e in events] == [f"ProfilerStep#{n}" for n in range(len(events))] and bad == 0
    assert 0 < len(events) < 100
    assert sum("reached its bound" in r.getMessage() for r in caplog.records) == 1
    journal.discard()
    assert not (tmp_path / JOURNAL_FILE).exists()


def test_a_rank_of_a_job_says_its_rank(tmp_path, monkeypatch):
    # Under a launcher (RANK/WORLD_SIZE set) the journal's header says the rank, and the report
    # rebuilt from it is that rank's, as a torch.profiler trace's distributedInfo would say.
    from gpuprof.report.inputs import analyze_journal, summarize_file

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    journal = StepJournal(tmp_path)
    for n in range(3, 6):
        journal.step(n, n * 1_000_000, n * 1_000_000 + 400_000)
    report = analyze_journal(tmp_path / JOURNAL_FILE)
    assert [s["step"] for s in report.steps] == [3, 4, 5]
    assert [s["total_us"] for s in report.steps] == [400, 400, 400]
    assert report.to_dict()["metadata"]["distributedInfo"] == {"rank": 1, "world_size": 2}
    # A folder of ranks (gpuprof analyze DIR) places it as rank 1 of 2.
    summary, _data = summarize_file(str(tmp_path / JOURNAL_FILE), keep_report="all")
    assert (summary["rank"], summary["world_size"]) == (1, 2)


# A loop with a DataLoader, so each step has operators, an input wait and an optimizer step.
def _loader_loop(prof, steps):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(8 * steps, 16))
    for (x,) in torch.utils.data.DataLoader(data, batch_size=8):
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        prof.step()


def _direct_children(trace_path) -> dict:
    """Per host-op name, how many host ops its calls directly contain (nesting on each thread)."""
    from collections import Counter, defaultdict

    with open(trace_path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    by_thread = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread[(e["pid"], e["tid"])].append(e)
    children: Counter = Counter()
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ops: list = []
        for e in ops:
            while open_ops and open_ops[-1]["ts"] + open_ops[-1]["dur"] <= e["ts"]:
                open_ops.pop()
            if open_ops:
                children[open_ops[-1]["name"]] += 1
            open_ops.append(e)
    return children


def test_the_journal_rebuilds_the_live_reports_operators_and_step_rows(tmp_path):
    # The same session's live report and the report rebuilt from its journal (copied before the
    # clean close removes it) cover the same steps 2..5 (schedule wait=1, warmup=1; the block ends
    # after loop iteration 5): the same operator names and calls, the same host times and step
    # rows, up to the clock conversion (each drain maps ticks to ns by its own line) and rounding.
    from gpuprof.report.inputs import analyze_journal

    folder = tmp_path / "run"
    saved = tmp_path / "saved"
    saved.mkdir()
    with gpuprof.profile(schedule=gpuprof.schedule(wait=1, warmup=1, active=10), journal=folder) as prof:
        _loader_loop(prof, 6)
        (saved / JOURNAL_FILE).write_bytes((folder / JOURNAL_FILE).read_bytes())
    live = prof.report()
    rebuilt = analyze_journal(saved / JOURNAL_FILE)
    assert [s["step"] for s in live.steps] == [2, 3, 4, 5]
    assert [s["step"] for s in rebuilt.steps] == [2, 3, 4, 5]
    assert "their operators and step breakdown" in rebuilt.source["note"]

    def close(a, b, durations=0):
        # Each report converts a timestamp to whole ns by its own clock line: a duration may differ
        # by 1 ns between them, a sum of durations by 1 ns for each.
        return abs(a - b) <= 0.01 + 0.001 * durations + 1e-4 * abs(b)

    for mine, theirs in zip(rebuilt.steps, live.steps):
        for key in ("total_us", "dataloader_us", "cpu_exec_us", "other_us", "flops"):
            assert close(mine[key], theirs[key]), (mine, theirs)
        assert mine["dataloader_us"] > 0 and mine["cpu_exec_us"] > 0
    live_ops = {r["name"]: r for r in live.operators}
    rebuilt_ops = {r["name"]: r for r in rebuilt.operators}
    assert set(rebuilt_ops) == set(live_ops)
    # A call's self time is its duration less those of its direct children: their count per name,
    # from the session's own trace.
    children = _direct_children(prof.export_chrome_trace(tmp_path / "live.json"))
    for name, theirs in live_ops.items():
        mine = rebuilt_ops[name]
        assert mine["calls"] == theirs["calls"], name
        assert mine["flops"] == theirs["flops"], name
        assert close(mine["host_total_us"], theirs["host_total_us"], mine["calls"]), (name, mine, theirs)
        slack = mine["calls"] + children[name]
        assert close(mine["host_self_us"], theirs["host_self_us"], slack), (name, mine, theirs)
    # The FLOPs per step, counted by the same rules (two addmm forward, their mm backward).
    assert rebuilt.data["flops"]["per_step_flops"] == live.data["flops"]["per_step_flops"] > 0
    # Two Linear layers a step: aten::linear and aten::addmm twice in each of the 4 steps.
    assert rebuilt_ops["aten::linear"]["calls"] == 8 and rebuilt_ops["aten::addmm"]["calls"] == 8
    assert [r["name"] for r in rebuilt.operators] == sorted(
        rebuilt_ops, key=lambda n: (-rebuilt_ops[n]["host_total_us"], n)
    )
    # The host's memory per step: the resident set size sampled at the steps' boundaries.
    assert [m["step"] for m in rebuilt.memory if m["device"] == -1] == [2, 3, 4, 5]
    assert all(m["peak_rss_bytes"] > 0 for m in rebuilt.memory)


OPS_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch

    how, after = sys.argv[1], int(sys.argv[2])
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(8 * 30, 16))
    for i, (x,) in enumerate(torch.utils.data.DataLoader(data, batch_size=8)):
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == after:
            if how == "exit":
                os._exit(3)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_killed_jobs_report_has_the_operators_of_its_completed_steps(tmp_path):
    # gpuprof run, killed by os._exit after step 7 and by SIGKILL after step 5: the rebuilt report
    # holds steps 2..N and the loop's operators, N-1 steps x 2 calls of aten::linear and aten::addmm
    # (two Linear layers), 1 x aten::relu, and each step's input wait.
    script = tmp_path / "train.py"
    script.write_text(OPS_SCRIPT)
    for how, after, code in (("exit", 7, 3), ("kill", 5, -signal.SIGKILL)):
        out = tmp_path / how
        p = _cli("run", "--steps", "2:20", "--out", out, script, how, after)
        assert p.returncode == code, p.stderr
        report = _report_json(out)
        steps = list(range(2, after + 1))
        assert [s["step"] for s in report["steps"]] == steps
        assert f"ended without closing after step {after}" in report["source"]["note"]
        ops = {r["name"]: r for r in report["operators"]}
        assert ops["aten::linear"]["calls"] == 2 * len(steps)
        assert ops["aten::addmm"]["calls"] == 2 * len(steps)
        assert ops["aten::relu"]["calls"] == len(steps)
        assert all(
            0 < r["host_self_us"] <= r["host_total_us"] for r in (ops["aten::linear"], ops["aten::addmm"])
        )
        assert all(s["dataloader_us"] > 0 and s["cpu_exec_us"] > 0 for s in report["steps"])
        text = _cli("report", out)
        assert text.returncode == 0 and "aten::addmm" in text.stdout, text.stderr
        # gpuprof analyze of the folder reads the same journal, operators included.
        (analysed,) = gpuprof.analyze(out)
        assert {r["name"]: r["calls"] for r in analysed.operators} == {n: r["calls"] for n, r in ops.items()}


def _summary(step: int, addmm_self_ns: int, addmm_total_ns: int, odd_name: bytes) -> bytes:
    # A step's summary as the native summarizer writes it (cpp/src/analysis/step_journal.cpp).
    flop_counts = {
        "step": step,
        "flops": 100,
        "matmul_flops": 100,
        "other_flops": 0,
        "matmul_forward_flops": 100,
        "forward_flops": 100,
        "backward_flops": 0,
        "recompute_flops": 0,
        "other_calls": 0,
        "uncounted_calls": 0,
        "uncounted_matmul_calls": 0,
        "backward_ran": 0,
        "matmul_flops_by_dtype": {"fp32": 100},
    }
    start = step * 10_000_000
    row = {"step": step, "start_ns": start, "end_ns": start + 2_000_000}
    row.update({f"{k}_ns": 0 for k in ("kernel", "memcpy", "memset", "communication", "runtime", "other")})
    row.update(dataloader_ns=500_000, cpu_exec_ns=1_500_000, flop_counts=flop_counts)
    row["memory"] = [[-1, -1, -1, 0, 1_000_000 * step]]
    text = json.dumps(
        {
            "steps": [row],
            "operators": [
                ["aten::addmm", 2, addmm_self_ns, addmm_total_ns, 0, 0, 0, 0, 100],
                ["ODD", 1, 10, 20, 0, 0, 0, 0, 0],
            ],
            "counted_calls": 2,
            "uncounted_calls": 0,
            "events": 10,
            "dropped": 0,
        }
    ).encode()
    return text.replace(b'"ODD"', b'"' + odd_name + b'"')


def test_the_rebuilt_report_adds_up_the_steps_summaries(tmp_path):
    # Two hand-built steps: aten::addmm 2 calls each (self 400 + 600 us, total 500 + 700 us, 100
    # FLOPs each), and an operator whose name holds a quote, a newline and a byte that is not UTF-8
    # (kept as bytes by the native writer): read back with the byte replaced, never a lost step.
    from gpuprof.report.inputs import analyze_journal

    journal = StepJournal(tmp_path)
    odd = b'my \\"op\\"\\n\xff'
    journal.step(3, 30_000_000, 32_000_000, _summary(3, 400_000, 500_000, odd))
    journal.step(4, 40_000_000, 42_000_000, _summary(4, 600_000, 700_000, odd))
    report = analyze_journal(tmp_path / JOURNAL_FILE)
    assert [s["step"] for s in report.steps] == [3, 4]
    assert [(s["total_us"], s["dataloader_us"], s["cpu_exec_us"]) for s in report.steps] == [
        (2000.0, 500.0, 1500.0)
    ] * 2
    assert report.average["dataloader_pct"] == 25.0
    addmm, odd_row = report.operators
    assert (addmm["name"], addmm["calls"], addmm["host_self_us"], addmm["host_total_us"], addmm["flops"]) == (
        "aten::addmm",
        4,
        1000.0,
        1200.0,
        200,
    )
    assert (odd_row["name"], odd_row["calls"], odd_row["host_total_us"]) == ('my "op"\n\ufffd', 2, 0.04)
    assert report.data["flops"]["per_step_flops"] == 100
    assert [m["peak_rss_bytes"] for m in report.memory] == [3_000_000, 4_000_000]
    assert "their operators and step breakdown" in report.source["note"]
    # Every format escapes the name (the Markdown report writes it once, escaped).
    assert 'my "op"\n' not in report.to_markdown()


def test_an_unreadable_summary_leaves_the_step_times(tmp_path):
    journal = StepJournal(tmp_path)
    journal.step(3, 30_000_000, 32_000_000, b'{"steps": [{"step": "three"}], "operators": []}')
    p = _cli("report", "--format", "json", tmp_path)
    assert p.returncode == 0 and p.stderr.count("summaries cannot be read") == 1, p.stderr
    report = json.loads(p.stdout)
    assert [(s["step"], s["total_us"]) for s in report["steps"]] == [(3, 2000.0)]
    assert "step times only" in report["source"]["note"]
    assert report["operators"] == []
