"""A mistyped option is answered with the verb's own usage, not the top-level one."""

import subprocess
import sys


def _gpuprof(*args):
    code = "import sys; from gpuprof.cli import entry; entry(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_an_unknown_option_of_a_verb_shows_that_verbs_usage(tmp_path):
    proc = _gpuprof("analyze", str(tmp_path / "t.json"), "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: gpuprof analyze ")
    assert "gpuprof analyze: error: unrecognized arguments: --bogus" in proc.stderr


def test_a_scripts_own_options_still_reach_it_under_run(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys; print('ARGS', sys.argv[1:])")
    proc = _gpuprof("run", "-q", "--out", str(tmp_path / "out"), str(script), "--bogus", "1")
    assert "ARGS ['--bogus', '1']" in proc.stdout, proc.stderr
