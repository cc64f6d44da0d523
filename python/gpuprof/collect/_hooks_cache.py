"""The operator hooks' cache (collect/hooks.py compiles into it): which folder may be trusted, what an
entry is, one build per entry, and publishing a build whole.

Trust: the cache folder and each entry (folder and files) must belong to this user or root and be
writable by no one else, else they are not loaded (a shared, world-writable GPUPROF_CACHE_DIR gets a
private folder of this user's beside it). Files are opened and created without following links
(O_NOFOLLOW, and O_EXCL for new ones), so a planted symbolic link is never written through.

An entry ``hooks/KEY/`` is published whole: built in a private temporary folder beside it, checked by
a load in a child process, described by its manifest ``READY`` (the module's file name, size and
SHA-256), then renamed into place. Every build's module has a file name of its own, because the
loader hands back the object already mapped from a path it has loaded before. An entry that does not
match its manifest, or does not load, is moved aside (``KEY.quarantined-...``) and built again.

One build per entry however many processes (ranks) start at once: an flock on ``KEY.lock`` beside
the entry, which the kernel releases when its holder dies. A live holder is waited for at most
``$GPUPROF_HOOKS_LOCK_TIMEOUT_S`` (600 s); the message names its pid.

A module is loaded into a run only after a child process has loaded it beside the same torch
installation (a stamp ``.loads-with-ID`` in the entry says so; publishing writes the first), so a
module that crashes whoever loads it (SIGSEGV, SIGBUS) ends a child, never the run.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

MANIFEST = "READY"  # in a published entry: which module file it holds, its size and SHA-256
DEFAULT_LOCK_TIMEOUT_S = 600.0


class HooksUnavailable(ImportError):
    """The hooks cannot be had for this torch: the message is one line, with the command that fixes
    it."""


def say(line: str) -> None:
    print(f"gpuprof: {line}", file=sys.stderr, flush=True)


def default_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gpuprof"


def cache_root() -> Path:
    explicit = os.environ.get("GPUPROF_CACHE_DIR")
    return Path(explicit).expanduser() if explicit else default_root()


# ---- who may have written a file ------------------------------------------------------------------
def _unsafe(path: Path, st: os.stat_result) -> str:
    """Why a file or folder of the cache could have been written by someone else ("" if it cannot)."""
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"{path} belongs to uid {st.st_uid}, not to you (uid {me}) or root"
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writable:
        return f"{path} is writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _unsafe_parent(folder: Path) -> str:
    """Why someone else could move ``folder`` aside and put a folder of theirs in its place: a
    folder above it (along its path as written, and along the path its links lead to) that another
    user owns, or that the group or others may write without the sticky bit ("" if none can). In a
    sticky folder such as /tmp only an entry's owner may rename it."""
    absolute = Path(os.path.abspath(folder))
    seen: set = set()
    for chain in (absolute.parents, absolute.resolve().parents):
        for parent in chain:
            if parent in seen:
                continue
            seen.add(parent)
            try:
                st = os.stat(parent)
            except FileNotFoundError:  # not made yet: made by this run, as its user
                continue
            except OSError as e:
                return f"{parent}, above {folder}, cannot be read ({e.strerror})"
            why = _unsafe(parent, st)
            if why and st.st_uid in (os.geteuid(), 0) and st.st_mode & stat.S_ISVTX:
                why = ""  # writable by others, but sticky: they cannot rename what is yours
            if why:
                fix = f" (chmod go-w {parent})" if st.st_uid == os.geteuid() else ""
                return f"{why}, and it holds {folder}: whoever can write it could put another there{fix}"
    return ""


def private_hint() -> str:
    """The command that gives this user a cache folder of their own."""
    default = default_root()
    private = default if cache_root() != default else default.with_name("gpuprof-private")
    return f"export GPUPROF_CACHE_DIR={private}"


def _make_private(folder: Path) -> None:
    """Makes ``folder`` and the folders above it that do not exist yet, each mode 700 (a folder a
    umask left group-writable would be refused as soon as it was made)."""
    missing = []
    p = Path(os.path.abspath(folder))
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:
            if p == missing[0]:
                raise


def hooks_dir(create: bool) -> tuple[Optional[Path], list[str]]:
    """The cache folder for the hooks, and a line for each folder passed over (why).

    ``ROOT/hooks`` first; where someone else owns it or can write it, or a folder above it (a
    shared, world-writable GPUPROF_CACHE_DIR; a group-writable project folder), ``ROOT/hooks-uUID``,
    then the default ``~/.cache/gpuprof/hooks``: the first that is safe (or, with ``create``, can
    be made: a new folder is made private, mode 700)."""
    root = cache_root()
    candidates = [root / "hooks", root / f"hooks-u{os.geteuid()}"]
    if root != default_root():
        candidates.append(default_root() / "hooks")
    passed: list[str] = []
    for folder in candidates:
        # The folders above, before making anything there (those made here are this user's, 700).
        why = _unsafe_parent(folder)
        if why:
            passed.append(why)
            continue
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            if not create:
                return folder, passed
            try:
                _make_private(folder)
            except FileExistsError:
                pass
            except OSError as e:
                passed.append(f"{folder} cannot be created ({e.strerror})")
                continue
            try:
                st = os.lstat(folder)
            except OSError as e:
                passed.append(f"{folder} cannot be read ({e.strerror})")
                continue
        except OSError as e:
            passed.append(f"{folder} cannot be read ({e.strerror})")
            continue
        why = ""
        if stat.S_ISLNK(st.st_mode):  # a link of one's own to a folder of one's own is fine
            # A link's own mode is always 777 and gives no one anything: its owner is what counts
            # (only the owner of a link, or of the folder holding it, can point it elsewhere).
            if st.st_uid not in (os.geteuid(), 0):
                why = f"{folder} is a symbolic link that belongs to uid {st.st_uid}, not to you or root"
            else:
                try:
                    st = os.stat(folder)
                except OSError as e:
                    why = f"{folder} is a symbolic link that leads nowhere ({e.strerror})"
        if not why and not stat.S_ISDIR(st.st_mode):
            why = f"{folder} is not a folder"
        why = why or _unsafe(folder, st)
        if why:
            passed.append(why)
            continue
        return folder, passed
    return None, passed


# ---- cache entries --------------------------------------------------------------------------------
class Entry:
    """What is in the cache for one key: ``state`` is "ok" (``module`` may be loaded), "absent", or
    "bad" (``why``: refused, incomplete or damaged; a run moves it aside and builds again)."""

    def __init__(self, path: Path, state: str, why: str = "", module: Optional[Path] = None, manifest=None):
        self.path, self.state, self.why, self.module, self.manifest = path, state, why, module, manifest or {}


def _open_checked(path: Path):
    """A file of the cache opened for reading, never through a link, if it is a regular file that
    only its owner (this user or root) can write: (file, "") or (None, why not)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, f"{path} is a symbolic link"
        if e.errno == errno.ENOENT:
            return None, f"{path} is missing"
        return None, f"{path} cannot be read ({e.strerror})"
    st = os.fstat(fd)
    why = "" if stat.S_ISREG(st.st_mode) else f"{path} is not a regular file"
    why = why or _unsafe(path, st)
    if why:
        os.close(fd)
        return None, why
    return os.fdopen(fd, "rb"), ""


def _sha256(f) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def entry(folder: Path, key: str) -> Entry:
    path = folder / key
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Entry(path, "absent")
    except OSError as e:
        return Entry(path, "bad", f"{path} cannot be read ({e.strerror})")
    if stat.S_ISLNK(st.st_mode):  # never followed: what it leads to could change under the run
        return Entry(
            path, "bad", f"{path} is a symbolic link (an entry of the cache is never followed through one)"
        )
    if not stat.S_ISDIR(st.st_mode):
        return Entry(path, "bad", f"{path} is not a folder")
    why = _unsafe(path, st)
    if why:
        return Entry(path, "bad", why)
    f, why = _open_checked(path / MANIFEST)
    if f is None:
        if why.endswith("is missing"):
            why = f"{path} has no {MANIFEST} manifest (a build that did not finish, or an older gpuprof's)"
        return Entry(path, "bad", why)
    with f:
        content = f.read(1 << 16)
    try:
        manifest = json.loads(content)
        name, size, digest = manifest["module"], int(manifest["size"]), str(manifest["sha256"])
    except (ValueError, KeyError, TypeError):
        return Entry(path, "bad", f"{path / MANIFEST} is not a gpuprof manifest (an older gpuprof's?)")
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        return Entry(path, "bad", f"{path / MANIFEST} names no module file of its own folder")
    module = path / name
    f, why = _open_checked(module)
    if f is None:
        return Entry(path, "bad", why)
    with f:
        actual, actual_size = _sha256(f)
    if actual_size != size:
        return Entry(path, "bad", f"{module} is {actual_size} bytes where {size} were built (cut short?)")
    if actual != digest:
        return Entry(path, "bad", f"{module} is not the file that was built (its SHA-256 differs)")
    return Entry(path, "ok", module=module, manifest=manifest)


def _stamp(path: Path, identity: str) -> Path:
    return path / f".loads-with-{identity}"


def has_stamp(path: Path, identity: str) -> bool:
    """Whether the module of the entry at ``path`` has been loaded in a child process beside the
    torch installation ``identity`` names (by the build that published it, or by an earlier run)."""
    try:
        st = os.lstat(_stamp(path, identity))
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and not _unsafe(path, st)


def add_stamp(path: Path, identity: str) -> None:
    """Note that the entry's module loads beside this torch installation (where the entry can be
    written: a read-only cache's modules are checked in a child each time)."""
    with contextlib.suppress(OSError):
        os.close(os.open(_stamp(path, identity), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))


def quarantine(item: Entry) -> str:
    """Move an entry that may not be used aside (within its folder: renaming a folder of another
    owner into another folder would need its write permission), keeping the latest three."""
    folder, key = item.path.parent, item.path.name
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = folder / f"{key}.quarantined-{stamp}-{os.getpid()}"
    try:
        os.rename(item.path, aside)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return f"it could not be moved aside ({e.strerror}): remove it by hand (rm -r {item.path})"
    old = sorted(folder.glob(f"{key}.quarantined-*"))[:-3]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)  # never follows links
    return f"moved aside to {aside}"


def last_compile_s(folder: Path) -> Optional[float]:
    """How long the latest compile published in this cache folder took (any torch)."""
    latest = None
    for manifest in folder.glob(f"*/{MANIFEST}"):
        f, _ = _open_checked(manifest)
        if f is None:
            continue
        try:
            with f:
                data = json.loads(f.read(1 << 16))
            seconds, built = float(data["compile_s"]), float(data["built_unix"])
        except (ValueError, KeyError, TypeError, OSError):
            continue
        if latest is None or built > latest[0]:
            latest = (built, seconds)
    return latest[1] if latest else None


# ---- the lock -------------------------------------------------------------------------------------
def lock_timeout_s() -> float:
    try:
        return max(0.0, float(os.environ.get("GPUPROF_HOOKS_LOCK_TIMEOUT_S", DEFAULT_LOCK_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S


def _lock_holder(fd: int) -> str:
    """The process that holds the flock on fd's file: from the kernel's table (/proc/locks), else
    what the holder wrote into the file."""
    st = os.fstat(fd)
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE":
                    if fields[5].rsplit(":", 1)[-1] == str(st.st_ino) and fields[4] not in ("0", "-1"):
                        return f"pid {fields[4]}"
    except OSError:
        pass
    try:
        written = os.pread(fd, 200, 0).decode(errors="replace").split()
        if written and written[0].isdigit():
            return f"pid {written[0]}" + (f" on {written[1]}" if len(written) > 1 else "")
    except OSError:
        pass
    return "a process that did not say which"


def _open_lock(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        os.unlink(path)  # a link planted in our own folder: removed, never followed
        fd = os.open(path, flags | os.O_EXCL, 0o600)
    st = os.fstat(fd)
    why = "" if stat.S_ISREG(st.st_mode) else f"{path} is not a regular file"
    why = why or _unsafe(path, st)
    if why:
        os.close(fd)
        raise HooksUnavailable(f"gpuprof will not use the lock {why}; remove it: rm {path}")
    return fd


@contextlib.contextmanager
def entry_lock(folder: Path, key: str, build: dict):
    """One build per entry, however many processes (ranks) start at once. Yields whether the lock is
    held (not where the file system has no flock, or the folder is read-only: nothing is built there)."""
    import fcntl

    path = folder / f"{key}.lock"
    try:
        fd = _open_lock(path)
    except OSError as e:
        if e.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise
        yield False
        return
    held = True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            timeout = lock_timeout_s()
            say(
                f"waiting (at most {timeout:.0f} s) for {holder}, which is compiling the operator "
                f"hooks for torch {build['version']} into {folder}"
            )
            deadline = time.monotonic() + timeout
            while True:
                time.sleep(0.2)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        holder = _lock_holder(fd)
                        raise HooksUnavailable(
                            f"{holder} has held the hooks cache lock {path} for over {timeout:.0f} s "
                            "(GPUPROF_HOOKS_LOCK_TIMEOUT_S), compiling the operator hooks for torch "
                            f"{build['version']}; if it is stuck, end it"
                            + (f" (kill {holder.split()[1]})" if holder.startswith("pid ") else "")
                            + " and run again"
                        ) from None
        except OSError as e:
            no_flock = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)
            if isinstance(e, BlockingIOError) or e.errno not in no_flock:
                raise
            # No flock on this file system (some Lustre mounts): builds are not serialised, but each
            # publishes whole, by a rename, so concurrent ones cannot leave a broken entry.
            held = False
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass
        yield held
    finally:
        os.close(fd)  # releases the flock


# ---- publishing -------------------------------------------------------------------------------
def _create_excl(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def stale_builds(folder: Path, key: str) -> None:
    """Holding the entry's lock, no one else builds it: folders of builds that never finished
    (killed), and the previous failed build's, go."""
    for path in list(folder.glob(f"{key}.building-*")) + list(folder.glob(f"{key}.failed")):
        shutil.rmtree(path, ignore_errors=True)


def new_build_folder(folder: Path, key: str, locked: bool) -> Path:
    """A private folder (mode 700) to build the entry in, beside where it will be published. Holding
    the entry's lock, the folders of builds that never finished go first."""
    if locked:
        stale_builds(folder, key)
    try:
        return Path(tempfile.mkdtemp(prefix=f"{key}.building-", dir=folder))
    except OSError as e:
        raise HooksUnavailable(
            f"gpuprof cannot write its hooks cache {folder} ({e.strerror}); point GPUPROF_CACHE_DIR "
            f"at a folder you can write: {private_hint()}"
        ) from None


def publish(work: Path, built: Path, folder: Path, key: str, facts: dict, identity: str) -> Path:
    """Publish the module ``built`` (checked by a load in a child process) from the build folder
    ``work`` as the entry KEY: the module under a name no earlier build had, its manifest, then the
    folder renamed into place. Returns the module's path in the entry."""
    name = f"_torchhooks-{os.urandom(6).hex()}.so"
    os.rename(built, work / name)
    os.chmod(work / name, 0o755)
    for path in work.iterdir():  # the build's objects and log
        if path.name != name:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
    with open(work / name, "rb") as f:
        digest, size = _sha256(f)
    manifest = {"module": name, "size": size, "sha256": digest, **facts, "built_unix": time.time()}
    _create_excl(work / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    add_stamp(work, identity)  # the build's child loaded it beside this very torch
    os.chmod(work, 0o755)  # readable by all, writable by its owner only
    target = folder / key
    try:
        os.rename(work, target)
    except OSError as e:
        shutil.rmtree(work, ignore_errors=True)
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # published meanwhile (a file system without flock)
            published = entry(folder, key)
            if published.state == "ok":
                return published.module
        raise HooksUnavailable(f"gpuprof could not publish its hooks into {target} ({e.strerror})") from None
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return target / name
