"""`gpuprof check --deny-rule RULE`: a CI gate on the advice."""

import json

from test_advice_scenarios import report

from gpuprof.cli import main


def _write(tmp_path, r, advised=True):
    d = r.to_dict()
    if advised:
        d["advice"] = r.advise()
    path = tmp_path / "report.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_deny_rule_exits_1_when_the_rule_fires_and_0_when_it_does_not(tmp_path, capsys):
    # DataLoader 40% of the step (> 5%): `dataloader` fires; nothing makes `host_sync` fire.
    path = _write(tmp_path, report({"kernel": 50, "dataloader": 40}))
    assert main(["check", path, "--deny-rule", "dataloader"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  advice:dataloader fired: The input pipeline starves the training loop" in out
    assert main(["check", path, "--deny-rule", "host_sync"]) == 0
    assert "ok    advice:host_sync did not fire" in capsys.readouterr().out
    # Mixed with a metric budget, in the JUnit file too.
    junit = tmp_path / "junit.xml"
    assert (
        main(
            ["check", path, "--max", "dataloader_pct=50", "--deny-rule", "dataloader", "--junit", str(junit)]
        )
        == 1
    )
    assert 'failures="1"' in junit.read_text() and "advice:dataloader" in junit.read_text()


def test_deny_rule_advises_a_report_written_without_advice(tmp_path, capsys):
    path = _write(tmp_path, report({"kernel": 50, "dataloader": 40}), advised=False)
    assert main(["check", path, "--deny-rule", "dataloader"]) == 1


def test_unknown_rule_is_a_user_error_listing_the_known(tmp_path, capsys):
    path = _write(tmp_path, report({"kernel": 90}))
    assert main(["check", path, "--deny-rule", "dataloadr"]) == 2
    err = capsys.readouterr().err
    assert "--deny-rule dataloadr: unknown rule; known: no_gpu_work, dataloader" in err
    assert "Traceback" not in err


def test_check_without_any_budget_still_says_what_to_add(tmp_path, capsys):
    path = _write(tmp_path, report({"kernel": 90}))
    assert main(["check", path]) == 2
    assert "--deny-rule RULE" in capsys.readouterr().err
