"""Per-step rows held on disk: a windowed read's steps, critical paths, collective calls and per-step
memory and FLOPs rows (``windowed.py``) grow with the trace's steps, about 5 KB a step as Python
dicts, so a trace of a million short steps would need gigabytes for them alone. They are written as
JSON text, one row a line, to an anonymous temporary file (the OS removes it when it is closed, when
the last sequence over it is let go, or when the process ends, however it ends), and read back
through ``SpilledRows``: a read-only ``collections.abc.Sequence`` (``len``, indexing, slicing,
iteration) whose memory is 8 bytes a row (the row's offset) and one chunk of rows while iterated.

The rows are exactly what was written: JSON keeps dicts' key order, ints and floats (``repr``)
exactly; tuples come back as lists, and every row written here is a dict or a list.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, Optional

#: Bytes read at once while iterating (a chunk's rows are decoded, yielded and let go).
CHUNK_BYTES = 1 << 20


class RowFile:
    """An anonymous temporary file rows are appended to and read from (``os.pread``: no shared file
    position). ``close`` removes it; so does letting go of it and of every sequence over it."""

    def __init__(self, folder: Optional[str] = None) -> None:
        import tempfile

        self._file = tempfile.TemporaryFile(prefix="gpuprof-steps-", dir=folder)
        self.size = 0

    def append(self, data: bytes) -> int:
        """Writes ``data`` at the end; returns where it starts."""
        start = self.size
        self._file.seek(start)
        self._file.write(data)
        self.size += len(data)
        return start

    def read(self, start: int, end: int) -> bytes:
        self._file.flush()
        out = os.pread(self._file.fileno(), end - start, start)
        if len(out) != end - start:
            raise OSError(f"gpuprof's per-step rows file was cut short ({len(out)} of {end - start} bytes)")
        return out

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        self._file.close()


class SpilledRows(Sequence):
    """Rows appended (``extend``) to a ``RowFile`` and read back in order; ``convert`` (a function
    of a row) is applied to each row as it is read."""

    def __init__(self, file: RowFile, convert: Optional[Callable[[Any], Any]] = None) -> None:
        self._file = file
        self._ends = array("q")  # each row's end; a row starts where the one before it ends
        self._starts = array("q")  # each run of rows' start: rows of one extend are contiguous
        self._runs = array("q")  # the number of rows before each run
        self._convert = convert

    # ---- writing -----------------------------------------------------------------------------
    def extend(self, rows: Iterable) -> None:
        """Appends rows (dicts or lists of JSON's own types) in one write."""
        import json

        lines = [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows]
        if not lines:
            return
        start = self._file.append(b"".join(lines))
        self._starts.append(start)
        self._runs.append(len(self._ends))
        end = start
        for line in lines:
            end += len(line)
            self._ends.append(end)

    def extend_all(self, rows: Iterable) -> None:
        """``extend`` with rows from an iterable of any length, written 4,096 rows at a time (the
        rows of one batch in memory at once)."""
        batch: list = []
        for row in rows:
            batch.append(row)
            if len(batch) >= 4096:
                self.extend(batch)
                batch = []
        self.extend(batch)

    def mapped(self, convert: Callable[[Any], Any]) -> SpilledRows:
        """The same rows (the same file and index, not copied), each read through ``convert`` after
        this sequence's own conversion."""
        own = self._convert
        out = SpilledRows(self._file, convert if own is None else (lambda row: convert(own(row))))
        out._ends, out._starts, out._runs = self._ends, self._starts, self._runs
        return out

    def update(self, change: Callable[[Any], None]) -> None:
        """``change(row)`` (which changes the row in place) on every row, in order, written back:
        one pass over the rows, one chunk of them in memory at a time. ``convert`` is applied first
        and not again: the rows are stored converted."""
        old = self.mapped(lambda row: row)
        self._ends, self._starts, self._runs = array("q"), array("q"), array("q")
        self._convert = None

        def changed(row):
            change(row)
            return row

        self.extend_all(changed(row) for row in old)

    # ---- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ends)

    def _start(self, i: int) -> int:
        """Where row ``i`` starts: after row i - 1, unless it begins a run."""
        lo, hi = 0, len(self._runs) - 1
        while lo < hi:  # the last run that begins at or before row i
            mid = (lo + hi + 1) // 2
            if self._runs[mid] <= i:
                lo = mid
            else:
                hi = mid - 1
        return self._starts[lo] if self._runs[lo] == i else self._ends[i - 1]

    def _decode(self, data: bytes) -> Any:
        import json

        row = json.loads(data)
        return self._convert(row) if self._convert is not None else row

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row index out of range")
        return self._decode(self._file.read(self._start(i), self._ends[i]))

    def __iter__(self) -> Iterator:
        i, n = 0, len(self)
        while i < n:
            start = self._start(i)
            j = i + 1  # rows i .. j-1: contiguous, about CHUNK_BYTES
            while j < n and self._ends[j] - start <= CHUNK_BYTES and self._start(j) == self._ends[j - 1]:
                j += 1
            data = self._file.read(start, self._ends[j - 1])
            at = 0
            for k in range(i, j):
                end = self._ends[k] - start
                yield self._decode(data[at:end])
                at = end
            i = j

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<gpuprof per-step rows on disk: {len(self)} rows>"

    def tolist(self) -> list:
        return list(self)

    def __reduce__(self):  # pickled (sent to another process) as the list it is
        return (list, (self.tolist(),))


class SpilledMapping(Mapping):
    """A read-only mapping whose items are held on disk as ``[key, value]`` rows of a
    ``SpilledRows``, in the order they were added (``extend`` with a dict's items). Iterating reads
    the rows in order; looking a key up builds an index of the keys the first time (in memory: the
    caller's choice)."""

    def __init__(self, file: RowFile) -> None:
        self.rows = SpilledRows(file)
        self._index: Optional[dict] = None

    def extend(self, items: Iterable) -> None:
        self.rows.extend([k, v] for k, v in items)
        self._index = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator:
        return (k for k, _v in self.rows)

    def items(self):  # type: ignore[override]
        return ((k, v) for k, v in self.rows)

    def __getitem__(self, key):
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self)}
        return self.rows[self._index[key]][1]

    def __eq__(self, other) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(k in other and other[k] == v for k, v in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<gpuprof per-step items on disk: {len(self)} items>"

    def __reduce__(self):  # pickled as the dict it is
        return (dict, (list(self.items()),))


def materialized(value: Any) -> Any:
    """``value`` with every ``SpilledRows`` inside it (in dicts and lists) read into a list: what
    ``json.dumps`` and a caller who changes the rows need."""
    if isinstance(value, SpilledRows):
        return value.tolist()
    if isinstance(value, SpilledMapping):
        return dict(value.items())
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialized(v) for v in value]
    return value


def json_default(value: Any) -> Any:
    """``json.dumps``' ``default``: a ``SpilledRows`` written as the list it is (a ``SpilledMapping``
    as the dict)."""
    if isinstance(value, SpilledRows):
        return value.tolist()
    if isinstance(value, SpilledMapping):
        return dict(value.items())
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def each_row(rows, change: Callable[[Any], None]) -> None:
    """``change(row)`` (in place) on every row of a list, or of a ``SpilledRows`` (written back)."""
    if isinstance(rows, SpilledRows):
        rows.update(change)
    else:
        for row in rows:
            change(row)


def by_step(rows) -> Callable[[Any], Any]:
    """``get(step)``: the row of ``rows`` with that ``step`` (the last of several), None without
    one, as ``{r["step"]: r for r in rows}.get`` answers. Over a ``SpilledRows`` whose steps ascend,
    asked in ascending order, it reads the rows once, in order, holding one; otherwise (a list, or
    steps out of order) the dict is built (from the rows read again)."""
    if not isinstance(rows, SpilledRows):
        return {r["step"]: r for r in rows}.get
    it = iter(rows)
    state: dict = {"next": next(it, None), "asked": None, "dict": None}

    def get(step):
        if state["dict"] is not None:
            return state["dict"].get(step)
        if state["asked"] is not None and step <= state["asked"]:
            state["dict"] = {r["step"]: r for r in rows}  # asked out of order: as the dict answers
            return state["dict"].get(step)
        state["asked"] = step
        found = None
        while state["next"] is not None and state["next"]["step"] <= step:
            row, state["next"] = state["next"], next(it, None)
            if state["next"] is not None and state["next"]["step"] < row["step"]:
                state["dict"] = {r["step"]: r for r in rows}  # the rows' steps do not ascend
                return state["dict"].get(step)
            if row["step"] == step:
                found = row
        return found

    return get


def rows_like(rows: Iterable, *like) -> Any:
    """``rows`` (an iterable) as a list, or as a ``SpilledRows`` in the same file (written a batch at
    a time) when any of ``like`` is one: a sequence derived from a windowed read's rows stays on disk."""
    on_disk = next((x for x in like if isinstance(x, SpilledRows)), None)
    if on_disk is None:
        return list(rows)
    out = SpilledRows(on_disk._file)
    out.extend_all(rows)
    return out


_HELD = "\x00gpuprof-held-rows-" + os.urandom(12).hex() + "-{}\x00"  # (random: no trace's string is one)


def json_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))`` (a deep copy, as JSON has it), each ``SpilledRows`` in it
    kept as it is (shared: nothing changes it in place but ``update``), a ``SpilledMapping`` too."""
    import json

    held: list = []

    def keep(v: Any) -> str:
        if isinstance(v, (SpilledRows, SpilledMapping)):
            held.append(v)
            return _HELD.format(len(held) - 1)
        raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")

    out = json.loads(json.dumps(value, default=keep))
    if not held:
        return out
    marks = {_HELD.format(i): rows for i, rows in enumerate(held)}

    def restore(v: Any) -> Any:
        if isinstance(v, str):
            return marks.get(v, v)
        if isinstance(v, dict):
            return {k: restore(x) for k, x in v.items()}
        if isinstance(v, list):
            return [restore(x) for x in v]
        return v

    return restore(out)
