"""Files written whole or not at all.

Every file gpuprof writes (reports, Chrome traces, ``gpuprof.save`` spans, the CLI's outputs) is
written to a temporary file in the destination's folder and renamed onto the destination once it is
complete: a reader sees the old file or the new one, never a truncated one, whatever stops the write
half-way (a full disk, a quota, a kill, an error while rendering). The temporary file is removed
when the write fails.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Union

PathLike = Union[str, os.PathLike]


def replace_atomically(path: PathLike, write: Callable[[str], None]) -> str:
    """Call ``write(tmp)`` to write the whole file at ``tmp``, a new file in ``path``'s folder, then
    rename it onto ``path``. ``tmp`` ends in ``.gz`` when ``path`` does, so a writer that picks its
    encoding from the suffix picks the same one. Creates the folder when missing. On any error the
    temporary file is removed and the error raised; ``path`` is left as it was.

    A symbolic link is followed (the file it points to is replaced, the link stays); a destination
    that is not a regular file (``/dev/stdout``, a named pipe) is written directly, as it cannot be
    replaced."""
    path = os.fspath(path)
    target = os.path.realpath(path)
    try:
        existing = os.stat(target)
    except OSError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        write(path)
        return path
    folder = os.path.dirname(target)
    _make_folder(folder)
    tmp = _new_temporary(folder, os.path.basename(target))
    try:
        write(tmp)
        if existing is not None:  # a file replaced keeps its permissions; a new one gets the umask's
            try:
                os.chmod(tmp, stat.S_IMODE(existing.st_mode))
            except OSError:
                pass
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _make_folder(folder: str) -> None:
    """``os.makedirs``, with an error that says which part of the path is a file where a folder
    is needed (the OS says only "File exists" or "Not a directory")."""
    try:
        os.makedirs(folder, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        part = folder
        while part and not os.path.lexists(part):
            part = os.path.dirname(part)
        if part and not os.path.isdir(part):
            raise NotADirectoryError(errno.ENOTDIR, f"{part} is a file, not a folder") from None
        raise


def write_text(path: PathLike, *pieces: str) -> str:
    """The text ``pieces`` (UTF-8), one after the other, as the whole content of ``path``, written
    atomically. A report's JSON is megabytes: its pieces (and the file's final newline) are written
    as they are rather than copied into one string first."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for piece in pieces:
                f.write(piece)

    return replace_atomically(path, write)


def failure_reason(e: BaseException) -> str:
    """Why a write failed, in a few words: an OSError's own text (``[Errno 28] No space left on
    device``), else the exception's type and message."""
    if isinstance(e, OSError):
        return e.strerror if e.strerror and not e.filename else str(e)
    return f"{type(e).__name__}: {e}"


def _new_temporary(folder: str, base: str) -> str:
    # Created here (O_EXCL: never someone else's file) with the umask's permissions, then written
    # by name (the native trace writer opens it again). A hidden name ending in .tmp (.tmp.gz for a
    # gzip file), which no folder scan takes for a trace or a report if a kill leaves it behind.
    suffix = ".tmp.gz" if base.endswith(".gz") else ".tmp"
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{os.urandom(4).hex()}{suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {base}")
