"""The operator hooks' cache (python/gpuprof/collect/_hooks_cache.py) met as a shared cluster cache
meets it: entries cut short, modules whose initialisation raises or crashes, entries another user
planted, folders others can write, symbolic links planted where gpuprof writes, a process that holds
the build lock and does not let go. In each, a real training loop in a fresh interpreter finishes
every step with exit status 0 and one warning (its operators are not recorded when no usable hooks
can be had), and nothing planted is loaded or written through. `gpuprof doctor` says what a run
would find.

The package's prebuilt hooks are set aside in each run (NO_PREBUILT), so that the cache is what the
run uses; no test here compiles (CXX names no compiler, or one that fails at once). The planted
modules are tiny shared objects built here with the C compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuprof.collect import _hooks_cache, hooks  # noqa: E402

FOREIGN_UID = 65534  # nobody

NO_PREBUILT = "import gpuprof.collect.hooks as h; h.PREBUILT_DIR = h.PREBUILT_DIR / 'none'"

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
    names = {{o["name"] for o in r.to_dict()["operators"]}}
    print("STEPS", len(r.steps), "HAS_ADDMM", "aten::addmm" in names)
""")

# Planted modules: C, no headers (the symbols come from the interpreter that loads them).
RAISES = """
void PyErr_SetString(void *, const char *);
extern void *PyExc_RuntimeError;
void *PyInit__torchhooks(void) { PyErr_SetString(PyExc_RuntimeError, "planted: init raises"); return 0; }
"""
SEGFAULTS = """
void *PyInit__torchhooks(void) { volatile int *p = 0; *p = 1; return 0; }
"""
# Writes a file from its constructor, as a planted module's payload would run inside the run.
PAYLOAD = """
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void payload(void) {
  int fd = open("%s", O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) { write(fd, "ran\\n", 4); close(fd); }
}
void *PyInit__torchhooks(void) { return 0; }
"""


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("making files another user owns needs root (CI runs as root)")


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the planted modules with")
    return cc


def _shared_object(tmp_path: Path, name: str, source: str) -> Path:
    c = tmp_path / f"{name}.c"
    c.write_text(source)
    out = tmp_path / f"{name}.so"
    subprocess.run([_cc(), "-shared", "-fPIC", "-o", str(out), str(c)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def good_module(tmp_path_factory) -> Path:
    """A module that loads: the package's own prebuilt hooks for this torch, else one compiled now."""
    path = hooks.prebuilt_module(hooks.torch_build(torch))
    if path is not None:
        return path
    folder = tmp_path_factory.mktemp("compiled") / "hooks"
    folder.mkdir(mode=0o700)
    key = hooks.cache_key(hooks.torch_build(torch))
    return hooks._build_and_publish(folder, key, hooks.torch_build(torch))


def _entry_dir(root: Path) -> Path:
    folder = root / "hooks"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder / hooks.cache_key(hooks.torch_build(torch))


def _plant(root: Path, module: Path, manifest: str = "valid") -> Path:
    """An entry holding ``module`` as ``_torchhooks.so`` (the file name earlier gpuprof versions
    loaded), with a manifest naming it: "valid" (its size and SHA-256, as publishing writes it),
    "old" (the text an earlier gpuprof wrote) or "none"."""
    entry = _entry_dir(root)
    entry.mkdir(mode=0o755)
    shutil.copyfile(module, entry / "_torchhooks.so")
    os.chmod(entry / "_torchhooks.so", 0o755)
    if manifest == "valid":
        with open(entry / "_torchhooks.so", "rb") as f:
            digest, size = _hooks_cache._sha256(f)
        (entry / "READY").write_text(json.dumps({"module": "_torchhooks.so", "size": size, "sha256": digest}))
    elif manifest == "old":
        (entry / "READY").write_text(f"{torch.__version__} {torch.version.git_version}\n")
    return entry


def _run(root: Path, code: str = "", env: dict | None = None, timeout: int = 300):
    full_env = {
        **os.environ,
        "GPUPROF_CACHE_DIR": str(root),
        "XDG_CACHE_HOME": str(root / "xdg"),  # the default private cache, inside the test's folder
        "CXX": "gpuprof-test-no-such-compiler",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", code or LOOP.format(prelude=NO_PREBUILT)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def _warnings(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("gpuprof:")]


def _ran_through(proc) -> None:
    """The training loop finished every step, exit status 0, no traceback."""
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "STEPS 2" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def _quarantined(root: Path) -> list[Path]:
    return sorted((root / "hooks").glob("*.quarantined-*"))


def test_a_good_entry_is_loaded_from_the_cache(tmp_path, good_module):
    # The baseline the faults below depart from: a published entry is used, with nothing said.
    _plant(tmp_path, good_module)
    proc = _run(tmp_path)
    _ran_through(proc)
    assert "HAS_ADDMM True" in proc.stdout
    assert _warnings(proc) == []


@pytest.mark.parametrize("manifest", ["old", "valid"])
def test_a_module_cut_short_is_moved_aside_and_never_loaded(tmp_path, good_module, manifest):
    # What a link killed half-way leaves. Loading it killed the run with SIGBUS (exit 135).
    entry = _plant(tmp_path, good_module, manifest)
    with open(entry / "_torchhooks.so", "r+b") as f:
        f.truncate(good_module.stat().st_size // 2)
    proc = _run(tmp_path)
    _ran_through(proc)
    assert "HAS_ADDMM False" in proc.stdout
    (line,) = _warnings(proc)
    assert "operators are not recorded" in line and "moved aside" in line
    assert ("cut short" in line) if manifest == "valid" else ("is not a gpuprof manifest" in line)
    assert "no C++ compiler was found" in line  # and why no new one was compiled
    assert not entry.exists() and len(_quarantined(tmp_path)) == 1


@pytest.mark.parametrize("source", ["raises", "segfaults"])
def test_a_published_module_that_fails_to_load_is_moved_aside(tmp_path, source):
    # Its manifest matches; its initialisation raises (a traceback ended the run) or crashes (exit
    # 139). It is loaded in a child process first, which fails; the run goes on without operators
    # and the entry is moved aside.
    entry = _plant(tmp_path, _shared_object(tmp_path, source, RAISES if source == "raises" else SEGFAULTS))
    proc = _run(tmp_path)
    _ran_through(proc)
    (line,) = _warnings(proc)
    assert "does not load in a fresh process" in line and "moved aside" in line
    assert ("RuntimeError: planted: init raises" if source == "raises" else "SIGSEGV") in line
    assert not entry.exists() and len(_quarantined(tmp_path)) == 1


def test_a_module_that_loaded_in_a_child_but_raises_here_is_moved_aside(tmp_path):
    # A child loaded it beside this torch before (its stamp says so), so it is loaded in the run's
    # own process, where its initialisation raises: caught, one warning, the entry moved aside.
    entry = _plant(tmp_path, _shared_object(tmp_path, "raises", RAISES))
    _hooks_cache.add_stamp(entry, hooks.torch_identity())
    proc = _run(tmp_path)
    _ran_through(proc)
    (line,) = _warnings(proc)
    assert "did not load (RuntimeError: planted: init raises)" in line and "moved aside" in line
    assert not entry.exists() and len(_quarantined(tmp_path)) == 1


def test_an_unpublished_module_that_crashes_is_never_loaded(tmp_path):
    # A module whose initialisation crashes (SIGSEGV: exit 139 before), in an entry with no
    # manifest of gpuprof's: only published entries are loaded, so it is moved aside untouched.
    _plant(tmp_path, _shared_object(tmp_path, "segfaults", SEGFAULTS), manifest="old")
    proc = _run(tmp_path)
    _ran_through(proc)
    (line,) = _warnings(proc)
    assert "is not a gpuprof manifest" in line and "moved aside" in line


@pytest.mark.parametrize("manifest", ["old", "valid"])
def test_an_entry_another_user_planted_is_not_loaded(tmp_path, manifest):
    # A shared cache: another user (uid 65534) planted a module whose constructor runs code, under the
    # key gpuprof's own functions compute. It ran inside the (root) run; now it is refused.
    _as_root()
    marker = tmp_path / "payload-ran"
    entry = _plant(tmp_path, _shared_object(tmp_path, "payload", PAYLOAD % marker), manifest)
    for path in [entry, *entry.iterdir()]:
        os.chown(path, FOREIGN_UID, FOREIGN_UID)
    proc = _run(tmp_path)
    _ran_through(proc)
    assert not marker.exists(), "the planted module's constructor ran"
    (line,) = _warnings(proc)
    assert f"belongs to uid {FOREIGN_UID}, not to you" in line and "moved aside" in line


def test_a_cache_folder_others_can_write_is_not_used(tmp_path, good_module):
    # A group-writable hooks folder: anyone in the group could have replaced what it holds, so
    # nothing in it is loaded, and the private folder used instead is named.
    _plant(tmp_path, good_module)
    os.chmod(tmp_path / "hooks", 0o775)
    proc = _run(tmp_path)
    _ran_through(proc)
    assert "HAS_ADDMM False" in proc.stdout
    (line,) = _warnings(proc)
    assert f"{tmp_path / 'hooks'} is writable by group (mode 775)" in line
    assert f"using {tmp_path / f'hooks-u{os.geteuid()}'}, which only you can write" in line


def test_a_cache_in_a_folder_others_can_write_is_not_used(tmp_path, good_module):
    # The hooks folder is private, but others may write the folder above the cache (no sticky bit):
    # they could rename the cache away and put one of theirs in its place. Neither ROOT/hooks nor
    # hooks-uUID beside it is used (nor made); the private default cache is, and the line says why.
    project = tmp_path / "project"
    root = project / "cache"
    _plant(root, good_module)
    os.chmod(project, 0o777)
    private = tmp_path / "home-cache"
    proc = _run(root, env={"XDG_CACHE_HOME": str(private)})
    _ran_through(proc)
    assert "HAS_ADDMM False" in proc.stdout
    (line,) = _warnings(proc)
    assert f"{project} is writable by group and others (mode 777), and it holds {root / 'hooks'}" in line
    assert f"(chmod go-w {project})" in line
    assert f"using {private / 'gpuprof' / 'hooks'}, which only you can write" in line
    assert not (root / f"hooks-u{os.geteuid()}").exists()


def test_a_cache_in_a_sticky_folder_of_ones_own_is_used(tmp_path, good_module):
    # Others may write a sticky folder (as /tmp), but only an entry's owner may rename it there:
    # the cache under it is used, with nothing to say.
    shared = tmp_path / "scratch"
    shared.mkdir()
    root = shared / "cache"
    _plant(root, good_module)
    os.chmod(shared, 0o1777)
    proc = _run(root)
    _ran_through(proc)
    assert "HAS_ADDMM True" in proc.stdout
    assert _warnings(proc) == []


def test_folders_the_cache_makes_are_private_whatever_the_umask(tmp_path):
    # A umask of 002 (common where each user has a group of their own) would leave the folders
    # above the hooks folder group-writable, and the next check would refuse them.
    root = tmp_path / "new" / "cache"
    code = "import os; os.umask(0o002)\n" + LOOP.format(prelude=NO_PREBUILT)
    proc = _run(root, code=code)
    _ran_through(proc)
    assert all("not using" not in line for line in _warnings(proc)), proc.stderr
    for folder in (tmp_path / "new", root, root / "hooks"):
        assert oct(os.stat(folder).st_mode & 0o777) == oct(0o700), folder


def test_an_entry_folder_others_can_write_is_moved_aside(tmp_path, good_module):
    entry = _plant(tmp_path, good_module)
    os.chmod(entry, 0o777)
    proc = _run(tmp_path)
    _ran_through(proc)
    assert "HAS_ADDMM False" in proc.stdout
    (line,) = _warnings(proc)
    assert "is writable by group and others (mode 777)" in line and "moved aside" in line


def test_symbolic_links_planted_where_gpuprof_writes_are_not_followed(tmp_path):
    # Links to files in a folder only root may write, planted at every name gpuprof writes in the
    # cache (the manifest, the lock, the build log, in the entry and beside it). A compile is tried
    # (CXX=false fails at once), so the lock is taken and a build log written; no target appears.
    victims = tmp_path / "root-only"
    victims.mkdir(mode=0o700)
    entry = _entry_dir(tmp_path)
    entry.mkdir()
    planted = {
        entry / "READY": victims / "ready",
        entry / "gpuprof.lock": victims / "lock",
        entry / "build-error.log": victims / "log",
        entry.with_name(entry.name + ".lock"): victims / "lock2",
        entry.with_name(entry.name + ".failed"): victims / "failed",
    }
    for link, target in planted.items():
        link.symlink_to(target)
    proc = _run(tmp_path, env={"CXX": "false"}, timeout=600)
    _ran_through(proc)
    assert list(victims.iterdir()) == [], "a planted link was written through"
    before, after = _warnings(proc)  # the compile's line, then its outcome
    assert "READY is a symbolic link" in before and "moved aside" in before
    assert "compiling its operator hooks" in before
    assert "compiling gpuprof's operator hooks" in after and "failed" in after
    log = Path(after.split("the compiler's output is in ")[1].split(")")[0])
    assert log.is_file() and not log.is_symlink() and log.stat().st_size > 0


HOLDER = """
import fcntl, os, sys, time
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def test_a_live_lock_holder_is_waited_for_a_bounded_time_and_named(tmp_path):
    # Another process holds the entry's build lock and does not let go (a hung rank). That blocked
    # every new run forever; now the run waits GPUPROF_HOOKS_LOCK_TIMEOUT_S, says which pid holds it,
    # and goes on without operators.
    # It holds the lock beside the entry, and the one earlier versions took inside it. A compiler is
    # there: the run would compile, had it the lock.
    entry = _entry_dir(tmp_path)
    entry.mkdir()
    lock = entry.with_name(entry.name + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), str(entry / "gpuprof.lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        proc = _run(tmp_path, env={"GPUPROF_HOOKS_LOCK_TIMEOUT_S": "2", "CXX": "c++"}, timeout=120)
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    _ran_through(proc)
    assert "HAS_ADDMM False" in proc.stdout
    lines = _warnings(proc)
    assert len(lines) == 2, lines  # that it waits (and for whom), then what became of it
    assert f"waiting (at most 2 s) for pid {holder.pid}" in lines[0]
    assert f"pid {holder.pid} has held the hooks cache lock {lock}" in lines[1]
    assert f"kill {holder.pid}" in lines[1] and "operators are not recorded" in lines[1]
    assert waited < 100


# ---- gpuprof doctor --------------------------------------------------------------------------------
DOCTOR = (
    "{prelude}\nfrom gpuprof.collect import hooks as h; s = h.status(); print(s['state'], '|', s['detail'])"
)


def _doctor(root: Path, env: dict | None = None, prebuilt: bool = False) -> tuple[str, str]:
    proc = _run(root, DOCTOR.format(prelude="" if prebuilt else NO_PREBUILT), env)
    assert proc.returncode == 0, proc.stderr
    state, _, detail = proc.stdout.strip().partition(" | ")
    return state, detail


def test_doctor_checks_what_a_run_would(tmp_path, good_module):
    if hooks.prebuilt_module(hooks.torch_build(torch)) is not None:
        state, detail = _doctor(tmp_path / "p", prebuilt=True)
        assert state == "prebuilt" and "loads in a fresh process" in detail, detail

    state, detail = _doctor(tmp_path / "empty", env={"CXX": "c++"})
    assert state == "needs compile", detail
    assert "before its first recorded step" in detail

    _plant(tmp_path / "good", good_module)
    state, detail = _doctor(tmp_path / "good")
    assert state == "cached" and "loads in a fresh process" in detail, detail

    # An entry that matches its manifest but whose module crashes when loaded: a run loads it in a
    # child first, as doctor does, and moves it aside.
    entry = _plant(tmp_path / "crash", _shared_object(tmp_path, "segfaults", SEGFAULTS))
    state, detail = _doctor(tmp_path / "crash", env={"CXX": "c++"})
    assert state == "rebuild" and "SIGSEGV" in detail and "move the cached hooks aside" in detail, detail
    # ... unless its stamp says a child loaded it beside this torch before: a run would load it.
    _hooks_cache.add_stamp(entry, hooks.torch_identity())
    state, detail = _doctor(tmp_path / "crash", env={"CXX": "c++"})
    assert state == "broken" and "SIGSEGV" in detail and f"rm -r {entry}" in detail, detail

    # One without a manifest: a run moves it aside and compiles anew.
    _plant(tmp_path / "old", _shared_object(tmp_path, "segfaults", SEGFAULTS), manifest="old")
    state, detail = _doctor(tmp_path / "old", env={"CXX": "c++"})
    assert state == "rebuild" and "move the cached hooks aside" in detail, detail

    # A cache that cannot be written: "ok ... needs compile" before.
    unwritable = {"GPUPROF_CACHE_DIR": "/proc/gpuprof-test-cache", "XDG_CACHE_HOME": "/proc/gpuprof-test-xdg"}
    state, detail = _doctor(tmp_path, env={**unwritable, "CXX": "c++"})
    assert state == "cannot compile", detail
    assert "/proc/gpuprof-test-cache/hooks cannot be created" in detail and "GPUPROF_CACHE_DIR=" in detail


def test_doctor_refuses_a_planted_entry_as_a_run_does(tmp_path, good_module):
    # "ok ... cached" before, for an entry another user planted.
    _as_root()
    entry = _plant(tmp_path, good_module)
    for path in [entry, *entry.iterdir()]:
        os.chown(path, FOREIGN_UID, FOREIGN_UID)
    state, detail = _doctor(tmp_path)
    assert state == "cannot compile", detail  # a run moves it aside, and cannot compile (no CXX)
    assert f"belongs to uid {FOREIGN_UID}" in detail and "move the cached hooks aside" in detail


def test_a_linked_cache_folder_is_judged_by_its_owner_and_its_target_not_the_links_mode(
    tmp_path, monkeypatch
):
    # A link's own mode is always 777 (lstat) and gives no one anything: a link of one's own to a
    # private folder of one's own is used; refusing it "for mode 777" named the wrong cause.
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "hooks").symlink_to(real)
    monkeypatch.setenv("GPUPROF_CACHE_DIR", str(root))
    assert _hooks_cache.hooks_dir(create=False) == (root / "hooks", [])
    real.chmod(0o777)  # the folder it leads to is judged as any folder
    folder, passed = _hooks_cache.hooks_dir(create=False)
    assert folder == root / f"hooks-u{os.geteuid()}"
    assert passed == [f"{root / 'hooks'} is writable by group and others (mode 777)"]
    real.chmod(0o700)
    if os.geteuid() == 0:  # root can give a link away: one of another user's is passed over
        os.lchown(root / "hooks", FOREIGN_UID, FOREIGN_UID)
        _folder, passed = _hooks_cache.hooks_dir(create=False)
        assert passed == [
            f"{root / 'hooks'} is a symbolic link that belongs to uid {FOREIGN_UID}, not to you or root"
        ]


def test_a_linked_cache_entry_is_refused_as_a_link(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    folder = tmp_path / "hooks"
    folder.mkdir(mode=0o700)
    (folder / "key").symlink_to(target)
    item = _hooks_cache.entry(folder, "key")
    assert (item.state, item.why) == (
        "bad",
        f"{folder / 'key'} is a symbolic link (an entry of the cache is never followed through one)",
    )
