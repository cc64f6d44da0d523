"""The operator hooks for whatever torch is installed (python/gpuprof/collect/hooks.py), tried as a user
meets them, in fresh interpreters: a prebuilt module is used only beside the torch build it was
compiled for; another torch build (an upgrade, or the CUDA build of the same release) gets hooks
compiled on first use, once, then reused from the cache; no compiler means one line that says what
to install, and the training run goes on; no torch at all never stops trace analysis. The cache's
faults (entries cut short, planted, crashing; links; a held lock) are
tests/python/collect/test_hooks_cache.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

# A short training loop whose report must hold operators when the hooks are there. With the argument
# "always", no schedule: every step is recorded, the first one included.
LOOP = textwrap.dedent("""
    import sys, torch, gpuprof
    {prelude}
    m = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    always = sys.argv[1:] == ["always"]
    with gpuprof.profile(schedule=None if always else gpuprof.schedule(wait=0, warmup=1, active=2)) as prof:
        for _ in range(2 if always else 3):
            m(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    r = prof.report()
    names = {o["name"] for o in r.to_dict()["operators"]}
    note = r.to_dict()["metadata"].get("host_ops", "")
    print("STEPS", len(r.steps), "HAS_ADDMM", "aten::addmm" in names, "NOTE", note)
    print("LONGEST_STEP_S", max(s["total_us"] for s in r.to_dict()["steps"]) / 1e6)
""")

# The package has no hooks prebuilt for this torch: what a torch upgrade after installing looks like.
OTHER_TORCH = "import gpuprof.collect.hooks as h; h.PREBUILT_DIR = h.PREBUILT_DIR / 'none'"


def _run(code: str, env_extra: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_cache_key_ignores_local_labels_and_follows_what_breaks_the_abi():
    from gpuprof.collect import hooks as _hooks

    cpu = {"version": "2.13.0+cpu", "git_version": "cf30153c4c13" + "0" * 28, "cxx11_abi": "1"}
    cuda = {**cpu, "version": "2.13.0+cu130"}
    assert _hooks.cache_key(cpu) == _hooks.cache_key(cuda)  # same release, same binary interface
    assert _hooks.cache_key(cpu) != _hooks.cache_key({**cpu, "git_version": "5c4886908584" + "0" * 28})
    assert _hooks.cache_key(cpu) != _hooks.cache_key({**cpu, "cxx11_abi": "0"})
    assert sys.implementation.cache_tag in _hooks.cache_key(cpu)


def test_no_compiler_is_one_line_and_the_run_goes_on(tmp_path):
    env = {"GPUPROF_CACHE_DIR": str(tmp_path), "CXX": "gpuprof-test-no-such-compiler"}
    proc = _run(LOOP.replace("{prelude}", OTHER_TORCH), env)
    assert proc.returncode == 0, proc.stderr  # the training loop finished
    assert "STEPS 2 HAS_ADDMM False" in proc.stdout  # steps timed, operators not recorded
    notes = [line for line in proc.stderr.splitlines() if "operators are not recorded" in line]
    assert len(notes) == 1, proc.stderr
    assert "no C++ compiler was found" in notes[0] and "module load gcc" in notes[0]
    assert "Traceback" not in proc.stderr
    assert "NOTE off: gpuprof needs its operator hooks compiled" in proc.stdout


def test_the_prebuilt_hooks_serve_their_own_torch_without_compiling(tmp_path):
    from gpuprof.collect import hooks as _hooks

    if _hooks.prebuilt_module(_hooks.torch_build(torch)) is None:
        pytest.skip("this gpuprof was built without prebuilt hooks for the installed torch")
    proc = _run(
        LOOP.replace("{prelude}", ""), {"GPUPROF_CACHE_DIR": str(tmp_path), "CXX": "no-such-compiler"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "HAS_ADDMM True" in proc.stdout and "compiling" not in proc.stderr
    assert not (tmp_path / "hooks").exists()


def test_doctor_says_which_hooks_a_session_would_use(tmp_path):
    code = (
        OTHER_TORCH
        + "\nfrom gpuprof.collect import hooks as _hooks; s = _hooks.status()"
        + "\nprint(s['state'], '|', s['detail'])"
    )
    out = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path), "CXX": "c++"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("needs compile |")
    out = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path), "CXX": "no-such-compiler"})
    assert out.stdout.startswith("cannot compile | no C++ compiler was found")


def test_ranks_meeting_a_cached_module_that_fails_to_load_compile_once_and_load_the_new_one(tmp_path):
    # Three ranks start together on a cache whose entry holds a module that matches its manifest but
    # whose initialisation raises (each rank loads it, in its own process). Exactly one moves it
    # aside and compiles; each rank then loads the new module in that same process (from a path of
    # its own: the loader would hand back the failed object for the old one) and records operators.
    # The compile (or the wait for it) is in no recorded step: one rank records every step from
    # the first (no schedule: the compile comes before it), the others compile while their warmup
    # step runs and wait before their first recorded one.
    import test_hooks_cache as planting

    from gpuprof.collect import _hooks_cache
    from gpuprof.collect import hooks as _hooks

    entry = planting._plant(tmp_path, planting._shared_object(tmp_path, "raises", planting.RAISES))
    _hooks_cache.add_stamp(entry, _hooks.torch_identity())  # loaded in a child before: loaded here
    env = {**os.environ, "GPUPROF_CACHE_DIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    code = LOOP.replace("{prelude}", OTHER_TORCH)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args in (["always"], [], [])
    ]
    results = [(p.communicate(timeout=900), p.returncode) for p in ranks]
    for (out, err), rc in results:
        assert rc == 0, err
        assert "STEPS 2 HAS_ADDMM True" in out, out + err
        assert "Traceback" not in err
    compiled = [err for (_, err), _ in results if "compiling its operator hooks" in err]
    assert len(compiled) == 1, [err for (_, err), _ in results]
    lines = [line for line in compiled[0].splitlines() if line.startswith("gpuprof:")]
    assert len(lines) == 2, compiled[0]  # what it does (and why), then how long it took
    assert "did not load (RuntimeError: planted: init raises)" in lines[0] and "moved aside" in lines[0]
    assert f"compiling its operator hooks for torch {torch.__version__}" in lines[0]
    assert "hooks compiled in" in lines[1]
    compile_s = float(lines[1].split("hooks compiled in ")[1].split(" s")[0])
    for (out, _), _ in results:
        longest_s = float(out.split("LONGEST_STEP_S ")[1].split()[0])
        assert longest_s < max(0.5, compile_s / 3), (longest_s, compile_s)
    published = _hooks_cache.entry(tmp_path / "hooks", _hooks.cache_key(_hooks.torch_build(torch)))
    assert published.state == "ok" and published.module.name != "_torchhooks.so", published.why
    assert published.path == entry and len(list((tmp_path / "hooks").glob("*.quarantined-*"))) == 1

    again = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path)})  # a later run: from the cache
    assert again.returncode == 0, again.stderr
    assert "HAS_ADDMM True" in again.stdout
    assert "gpuprof:" not in again.stderr, again.stderr
    # The next compile's message gives this one's measured time.
    assert _hooks.compile_estimate(tmp_path / "hooks").startswith("the last compile in this cache took")
