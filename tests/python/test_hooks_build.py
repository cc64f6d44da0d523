"""The operator hooks for whatever torch is installed (python/gpuprof/collect/hooks.py), tried as a user
meets them, in fresh interpreters: a prebuilt module is used only beside the torch build it was
compiled for; another torch build (an upgrade, or the CUDA build of the same release) gets hooks
compiled on first use, once, then reused from the cache; no compiler means one line that says what
to install, and the training run goes on; no torch at all never stops trace analysis."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

# A short training loop whose report must hold operators when the hooks are there.
LOOP = textwrap.dedent("""
    import sys, torch, gpuprof
    {prelude}
    m = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with gpuprof.profile(schedule=gpuprof.schedule(wait=0, warmup=1, active=2)) as prof:
        for _ in range(3):
            m(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    r = prof.report()
    names = {o["name"] for o in r.to_dict()["operators"]}
    note = r.to_dict()["metadata"].get("host_ops", "")
    print("STEPS", len(r.steps), "HAS_ADDMM", "aten::addmm" in names, "NOTE", note)
""")

# The prebuilt module claims another torch build: what a torch upgrade after installing looks like.
OTHER_TORCH = (
    "import gpuprof._build_info as b; b.PREBUILT_TORCH_GIT_VERSION = '0' * 40; "
    "b.PREBUILT_TORCH_VERSION = '2.0.0'"
)


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
    from gpuprof import _build_info
    from gpuprof.collect import hooks as _hooks

    if _hooks.torch_build(torch)["git_version"] != _build_info.PREBUILT_TORCH_GIT_VERSION:
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
    out = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("needs compile |")
    out = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path), "CXX": "no-such-compiler"})
    assert out.stdout.startswith("cannot compile | no C++ compiler was found")


def test_another_torch_build_compiles_once_for_ranks_starting_at_once_then_is_cached(tmp_path):
    # Three ranks start together on an empty cache in which a builder killed earlier (SIGKILL,
    # scancel) left torch's lock file: all three record operators, exactly one compiles, and none
    # waits on the dead builder's lock (torch's builder alone would wait forever).
    from gpuprof.collect import hooks as _hooks

    entry = tmp_path / "hooks" / _hooks.cache_key(_hooks.torch_build(torch))
    entry.mkdir(parents=True)
    (entry / "lock").touch()
    env = {**os.environ, "GPUPROF_CACHE_DIR": str(tmp_path)}
    code = LOOP.replace("{prelude}", OTHER_TORCH)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    results = [(p.communicate(timeout=900), p.returncode) for p in ranks]
    for (out, err), rc in results:
        assert rc == 0, err
        assert "STEPS 2 HAS_ADDMM True" in out, out + err
        assert "Traceback" not in err
    compiled = [err for (_, err), _ in results if "compiling its operator hooks" in err]
    assert len(compiled) == 1, [err for (_, err), _ in results]
    lines = [line for line in compiled[0].splitlines() if line.startswith("gpuprof:")]
    assert len(lines) == 2, compiled[0]  # what it does, then how long it took
    assert f"compiling its operator hooks for torch {torch.__version__}" in lines[0]
    assert "hooks compiled in" in lines[1]
    assert (entry / "READY").is_file() and not (entry / "lock").exists()

    again = _run(code, {"GPUPROF_CACHE_DIR": str(tmp_path)})  # a later run: from the cache
    assert again.returncode == 0, again.stderr
    assert "HAS_ADDMM True" in again.stdout
    assert "gpuprof:" not in again.stderr, again.stderr
