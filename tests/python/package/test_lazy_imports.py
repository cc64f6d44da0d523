"""`import gpuprof` loads the live profiler and the exporter only when they are used (a faster
`gpuprof analyze`), yet every public name works as before."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_gpuprof_leaves_the_profiler_and_exporter_unloaded():
    out = _run(
        "import sys, gpuprof; print(sorted(m for m in ('gpuprof.session', 'gpuprof.traces.export', "
        "'gpuprof.collect.ranges', 'torch') if m in sys.modules))"
    )
    assert out == "[]"


def test_public_names_resolve_on_first_use_to_their_modules():
    out = _run(
        "import gpuprof, gpuprof.session as p, gpuprof.traces.export as e\n"
        "import gpuprof.collect.ranges as r\n"
        "assert gpuprof.profile is p.profile and gpuprof.current is p.current\n"
        "assert gpuprof.ProfilerError is p.ProfilerError and gpuprof.range is r.range\n"
        "assert gpuprof.save is e.save and gpuprof.export_chrome_trace is e.export_chrome_trace\n"
        "assert callable(gpuprof.analyze) and callable(gpuprof.schedule)\n"
        "assert set(gpuprof.__all__) <= set(dir(gpuprof))\n"
        "from gpuprof import profile, range, save\n"
        "print('ok')"
    )
    assert out == "ok"


def test_an_unknown_attribute_is_still_an_attribute_error():
    out = _run("import gpuprof\ntry:\n    gpuprof.no_such_name\nexcept AttributeError as e:\n    print(e)")
    assert out == "module 'gpuprof' has no attribute 'no_such_name'"


def test_a_verb_loads_only_its_own_module_and_help_lists_every_verb(tmp_path):
    """`gpuprof report X` imports gpuprof.cli.report only (not run, scaling, doctor, ...: their
    imports are start-up time a trace analysis does not need), nor importlib.metadata; `gpuprof
    --help` still lists every verb."""
    from gpuprof.cli import VERBS

    missing = tmp_path / "missing.json"
    out = _run(
        "import sys\nfrom gpuprof.cli import main\n"
        f"rc = main(['report', {str(missing)!r}])\n"
        "print(rc, sorted(m for m in sys.modules if m.startswith('gpuprof.cli.')), "
        "'importlib.metadata' in sys.modules)"
    )
    assert out == "2 ['gpuprof.cli.report'] False"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0
    for verb in VERBS:
        assert verb in proc.stdout
