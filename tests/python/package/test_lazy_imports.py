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
    """Nor the profiler's schedule: `gpuprof.schedule` and `gpuprof.ProfilerAction` load it on
    first use (the `gpuprof` command imports the package first)."""
    out = _run(
        "import sys, gpuprof.cli; print(sorted(m for m in ('gpuprof.session', 'gpuprof.traces.export', "
        "'gpuprof.collect.ranges', 'gpuprof.collect.schedule', 'torch') if m in sys.modules))"
    )
    assert out == "[]"


def test_public_names_resolve_on_first_use_to_their_modules():
    out = _run(
        "import gpuprof, gpuprof.session as p, gpuprof.traces.export as e\n"
        "import gpuprof.collect.ranges as r\n"
        "assert gpuprof.profile is p.profile and gpuprof.current is p.current\n"
        "assert gpuprof.ProfilerError is p.ProfilerError and gpuprof.range is r.range\n"
        "assert gpuprof.save is e.save and gpuprof.export_chrome_trace is e.export_chrome_trace\n"
        "import gpuprof.collect.schedule as s\n"
        "assert gpuprof.schedule is s.schedule and gpuprof.ProfilerAction is s.ProfilerAction\n"
        "from gpuprof import ProfilerAction, schedule\n"
        "assert schedule(wait=1, warmup=0, active=1)(0) is ProfilerAction.NONE\n"
        "assert callable(gpuprof.analyze)\n"
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


# Standard modules `gpuprof analyze FILE` has no use for; each was loaded by a module on its path
# and together they were some 20 ms of its start-up (docs/performance.md, "Start-up").
_NOT_FOR_ANALYZE = (
    "dataclasses",  # and inspect, dis, ast, tokenize: peaks.py's rows
    "inspect",
    "importlib.resources",  # peaks.csv is read beside the module
    "platform",
    "logging",  # the step journal's warnings
    "socket",
    "secrets",  # atomic writes' temporary names (and hmac, hashlib, random)
    "hmac",
    "tempfile",
    "shutil",  # argparse's help width and the text report's (and bz2, lzma)
    "lzma",
    "threading",  # the progress line, off when stderr is not a terminal
)

# gpuprof's own modules that a file's `gpuprof analyze --json` without a terminal does not use: the
# progress line (stderr is not a terminal), the profiler's schedule, the folder reader, Inductor's
# output code and the FLOPs of generated kernels (the trace has no Triton launches).
_GPUPROF_NOT_FOR_ANALYZE = (
    "gpuprof.cli.progress",
    "gpuprof.collect.schedule",
    "gpuprof.traces.folders",
    "gpuprof.traces.inductor_code",
    "gpuprof.analysis.compiled_flops",
)


def test_analyze_of_a_file_leaves_the_modules_it_does_not_need_unloaded(shared_traces, tmp_path):
    """`gpuprof analyze FILE --json OUT` on the DDP sample (torch.compile, NCCL, a V100: the peak
    table, the compiled-graph and distributed rules all run) loads none of ``_NOT_FOR_ANALYZE``
    (those the interpreter loaded before gpuprof, e.g. a site hook's, do not count) nor any of
    ``_GPUPROF_NOT_FOR_ANALYZE``, writes its report, and leaves the cycle collector's thresholds as
    it found them."""
    trace = shared_traces / "hta_2xv100_ddp" / "rank0.json.gz"
    out_json = tmp_path / "r.json"
    out = _run(
        "import gc, sys\nbefore = set(sys.modules)\nthresholds = gc.get_threshold()\n"
        "from gpuprof.cli import main\n"
        f"rc = main(['analyze', {str(trace)!r}, '--json', {str(out_json)!r}])\n"
        f"loaded = sorted(m for m in {_NOT_FOR_ANALYZE + _GPUPROF_NOT_FOR_ANALYZE!r} "
        "if m in sys.modules and m not in before)\n"
        "print(rc, loaded, gc.get_threshold() == thresholds)"
    )
    assert out.splitlines()[-1] == "0 [] True"
    assert out_json.stat().st_size > 0


def test_json_loads_only_for_a_trace_whose_metadata_holds_json_text(shared_traces, tmp_path):
    """The ResNet-50 sample has no ``distributedInfo`` (the one metadata value the importer keeps
    as JSON text), and the report's JSON is written by the core: `gpuprof analyze FILE --json OUT`
    leaves the `json` module unloaded and still writes a report that `json` reads back."""
    trace = shared_traces / "tb_resnet50_v100_nw0" / "worker0.1623143089861.pt.trace.json.gz"
    out_json = tmp_path / "r.json"
    out = _run(
        "import sys\nbefore = set(sys.modules)\n"
        "from gpuprof.cli import main\n"
        f"rc = main(['analyze', {str(trace)!r}, '--json', {str(out_json)!r}])\n"
        "print(rc, 'json' in sys.modules and 'json' not in before)"
    )
    assert out.splitlines()[-1] == "0 False"
    import json

    report = json.loads(out_json.read_text())
    assert report["counts"]["steps"] == len(report["steps"]) > 0 and report["step_views"]["timelines"]


def test_help_still_fits_the_width_columns_gives():
    """The help's width comes from $COLUMNS (else the terminal, else 80 columns), as argparse's own
    lookup gives it, though shutil is no longer imported for it: argparse wraps at the width less 2."""
    import os

    widths = {}
    for columns in ("60", "200"):
        env = dict(os.environ, COLUMNS=columns)
        proc = subprocess.run(
            [sys.executable, "-m", "gpuprof", "analyze", "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr
        widths[columns] = max(len(line) for line in proc.stdout.splitlines())
    assert widths["60"] <= 58 < widths["200"] <= 198
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(  # no terminal (a pipe) and no $COLUMNS: argparse's 80 columns
        [sys.executable, "-m", "gpuprof", "analyze", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert max(len(line) for line in proc.stdout.splitlines()) <= 78
