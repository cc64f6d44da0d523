"""What each DataLoader iterated during a session was set to, and how long the training loop waited
for each of its batches, for the report and the advice.

torch's DataLoader iterators all inherit ``__next__`` from ``_BaseDataLoaderIter``; while a session
records, that method is wrapped so that the first batch of each iterator notes its settings, and
every batch notes how long ``__next__`` took (the loop's wait) and how many batches were ready
when it was called. The wrap costs a dict lookup, two clock reads and a look at the iterator's
queues per batch, and is removed with the hooks. What happens inside the workers is measured by
``input_reader.py``; this module gathers both per loader at a span's end (``pipeline_records``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import Any, Optional

from .._host import cpu_budget, cpus_available  # noqa: F401 (public here too)
from .input_reader import PipelineCapture
from .input_records import set_current_channel


def _ready_batches(it: Any) -> int:
    """Batches produced and not yet taken by the loop when it asks for the next one: those that
    came out of order and wait in the iterator, and those in its data queue; -1 when the loader
    loads in the training process (no queue) or the queue cannot tell."""
    if not getattr(it, "_num_workers", 0):
        return -1
    try:
        ready = sum(1 for v in it._task_info.values() if len(v) == 2)
        return ready + int(it._data_queue.qsize())
    except Exception:  # NotImplementedError on macOS's multiprocessing queues
        return -1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _settings_of(it: Any) -> dict:
    dataset = getattr(it, "_dataset", None)
    try:
        length = len(dataset) if dataset is not None else None
    except Exception:  # an IterableDataset without __len__, or a __len__ that raises
        length = None
    sampler = getattr(it, "_index_sampler", None)
    batch_size = getattr(sampler, "batch_size", None) if getattr(it, "_auto_collation", False) else None
    num_workers = int(getattr(it, "_num_workers", 0) or 0)
    prefetch = getattr(it, "_prefetch_factor", None)
    # A custom batch sampler may call anything its batch_size (a list of bucket sizes): only a
    # number is one, as docs/schema.md says.
    batch_size = batch_size if _is_int(batch_size) else None
    prefetch = prefetch if _is_int(prefetch) else None
    return {
        "iterator": type(it).__name__,
        "dataset": type(dataset).__name__ if dataset is not None else None,
        "dataset_length": length,
        "batch_size": batch_size,
        "num_workers": num_workers,
        "pin_memory": bool(getattr(it, "_pin_memory", False)),
        "prefetch_factor": prefetch if num_workers > 0 else None,
        "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
        "batches_seen": 0,
    }


class DataLoaderCapture:
    """Collects one settings record per loader and, with ``pipeline``, what its batches cost.

    ``open``/``close``: the session's life (iterators made meanwhile carry the workers' hook);
    ``install``/``remove``: while steps are hooked (the ``__next__`` wrap, the timed fetch and pin
    in the main process, the workers told to time); ``reset``: a recording epoch starts."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, dict] = {}
        self._iter_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # it -> (key, chan)
        self._chan_key: dict[int, tuple] = {}
        self._unmeasured: dict[tuple, int] = {}  # key -> iterators whose workers predate the session
        self._waits: list = []  # (chan, start_ns, wait_ns, ready batches, thread id)
        self._lock = threading.Lock()
        self._base = None
        self._original = None
        self.pipeline = PipelineCapture()
        self._epoch_ns = 0
        self._epoch_cpu_ns = 0
        self._epoch_busy_ns = -1

    def open(self) -> None:
        self.pipeline.open()

    def close(self) -> None:
        self.remove()
        self.pipeline.close()

    def install(self) -> None:
        if self._original is not None:
            return
        module = sys.modules.get("torch.utils.data.dataloader")
        if module is None:  # the training script never imported torch's DataLoader
            return
        self.pipeline.open()
        base = module._BaseDataLoaderIter
        original = base.__next__
        capture = self
        clock = time.monotonic_ns

        def __next__(it):
            # Runs inside the training loop's iteration: gpuprof's part never raises there (a
            # loader it cannot read is simply not recorded).
            try:
                noted = capture._iter_keys.get(it)
                if noted is None:
                    noted = capture._note(it)
                key, chan = noted
                ready = _ready_batches(it)
            except Exception:
                key, chan, ready = None, -1, -1
            before = set_current_channel(chan)
            t0 = clock()
            try:
                batch = original(it)  # StopIteration passes through uncounted
            finally:
                set_current_channel(before)
            if key is not None:
                capture._waits.append((chan, t0, clock() - t0, ready, threading.get_native_id()))
                capture._by_key[key]["batches_seen"] += 1
            return batch

        __next__.__wrapped__ = original
        __next__._gpuprof_capture = True
        base.__next__ = __next__
        self._base, self._original = base, original
        self.pipeline.span_on()

    def remove(self) -> None:
        self.pipeline.span_off()
        if self._original is not None:
            self._base.__next__ = self._original
            self._base = self._original = None

    def _note(self, it: Any) -> tuple:
        settings = _settings_of(it)
        key = (id(getattr(it, "_dataset", None)),) + tuple(
            settings[k]
            for k in ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
        )
        chan: Optional[int]
        if settings["num_workers"] > 0:
            chan = self.pipeline.channel_of(it)
        else:
            chan = self.pipeline.new_main_channel(it)
        with self._lock:
            self._by_key.setdefault(key, settings)
            if chan is None:  # its workers started before the session: not measured inside
                chan = -1
                self._unmeasured[key] = self._unmeasured.get(key, 0) + 1
            self._chan_key[chan] = key
            self._iter_keys[it] = (key, chan)
        return key, chan

    def reset(self) -> None:
        """A new span starts: loaders are noted again as they are iterated."""
        with self._lock:
            for settings in self._by_key.values():
                settings["batches_seen"] = 0
            self._waits = []
        self.pipeline.discard()
        self._epoch_ns = time.monotonic_ns()
        self._epoch_cpu_ns = time.process_time_ns()
        self._epoch_busy_ns = cpus_busy_ns()

    def records(self) -> list[dict]:
        with self._lock:
            return [dict(s) for s in self._by_key.values() if s["batches_seen"] > 0]

    def pipeline_records(self) -> dict:
        """What the span measured of each loader it drew batches from (the input of
        ``gpuprof.analysis.input_pipeline``; its docstring gives the layout)."""
        records = self.pipeline.take()
        now, cpu, busy = time.monotonic_ns(), time.process_time_ns(), cpus_busy_ns()
        with self._lock:
            waits, self._waits = self._waits, []
            by_key = {k: s for k, s in self._by_key.items() if s["batches_seen"] > 0}
            chan_key = dict(self._chan_key)
            unmeasured = dict(self._unmeasured)
        loaders: dict[tuple, dict] = {
            k: {
                "settings": dict(s),
                "batches": [],
                "waits": [],
                "pins": [],
                "errors": [],
                "workers": [],
                "unmeasured_iterators": unmeasured.get(k, 0),
                "dropped_records": 0,
            }
            for k, s in by_key.items()
        }

        def loader_of(chan: int) -> Optional[dict]:
            return loaders.get(chan_key.get(chan))

        for chan, start, wait, ready, tid in waits:
            row = loader_of(chan)
            if row is not None:
                row["waits"].append({"start_ns": start, "wait_ns": wait, "ready": ready, "tid": tid})
        for rec in records:
            row = loader_of(rec[1])
            if row is None:
                continue
            kind = rec[0]
            if kind == "b":
                row["batches"].append(dict(zip(BATCH_FIELDS, rec[2:])))
            elif kind == "p":
                row["pins"].append({"tid": rec[2], "start_ns": rec[3], "pin_ns": rec[4]})
            elif kind == "e":
                row["errors"].append(
                    dict(zip(("worker", "pid", "batch", "ts_ns", "stage", "error", "index"), rec[2:]))
                )
        for chan, workers in self.pipeline.workers().items():
            row = loader_of(chan)
            if row is not None:
                row["workers"] += workers
                row["dropped_records"] += sum(w.get("dropped") or 0 for w in workers)
        if self.pipeline.last_over_budget:  # a very long span: its later records were counted only
            for row in loaders.values():
                row["dropped_records"] += self.pipeline.last_over_budget
        return {
            "window_ns": [self._epoch_ns, now],
            "process_cpu_ns": cpu - self._epoch_cpu_ns,
            "cpus_busy_ns": busy - self._epoch_busy_ns if busy >= 0 and self._epoch_busy_ns >= 0 else None,
            "loaders": list(loaders.values()),
        }


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BUSY_COLUMNS = (1, 2, 3, 6, 7, 8)  # user, nice, system, irq, softirq, steal (guest is in user)


def cpus_busy_ns() -> int:
    """The time the CPUs this process may use (its affinity mask) were busy, every process's work
    and the hypervisor's steal together, in ns since boot (/proc/stat); -1 where it cannot tell."""
    try:
        mask = os.sched_getaffinity(0)
        ticks = 0
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                cols = line.split()
                if int(cols[0][3:]) in mask:
                    ticks += sum(int(cols[i]) for i in _BUSY_COLUMNS if i < len(cols))
        return ticks * 1_000_000_000 // _CLK_TCK
    except (OSError, ValueError, AttributeError, IndexError):
        return -1


# The fields of a batch record after its kind and channel (input_records.py writes them in this order).
BATCH_FIELDS = (
    "worker",
    "pid",
    "tid",
    "seq",
    "start_ns",
    "idle_ns",
    "load_ns",
    "transform_ns",
    "collate_ns",
    "cpu_ns",
    "runq_ns",
    "samples",
    "sample_sum_ns",
    "sample_sumsq",
    "slowest",
    "gc_ns",
)

# The names of the input pipeline's events in a span's Trace (the timeline's and the Chrome trace's
# worker tracks): a batch's loading, transforming and collating, one after the other on its
# worker's track (loading and transforming alternate per sample; the track shows their sums), and
# the pin-memory thread's pinning.
STAGE_EVENT_NAMES = {
    "load": "DataLoader load",
    "transform": "DataLoader transform",
    "collate": "DataLoader collate",
    "pin": "DataLoader pin_memory",
}


def add_pipeline_events(trace, pipeline: dict) -> None:
    """The span's input-pipeline records as events of the Trace: each worker's batches on a track
    of its own (``device`` holds the worker id, -1 in the main process; ``tid`` the worker's process
    id, or the main process's thread), the pin-memory thread's pinning on its thread."""
    names = STAGE_EVENT_NAMES
    for loader in pipeline.get("loaders", []):
        for b in loader["batches"]:
            at = b["start_ns"]
            for stage, dur in (
                ("load", b["load_ns"]),
                ("transform", b["transform_ns"]),
                ("collate", b["collate_ns"]),
            ):
                if dur < 0:  # no transform timed apart from loading
                    continue
                trace.add_event("input_stage", names[stage], at, dur, 0, b["seq"], b["worker"], b["tid"])
                at += dur
        for p in loader["pins"]:
            trace.add_event("input_stage", names["pin"], p["start_ns"], p["pin_ns"], 0, 0, -1, p["tid"])


def _nothing() -> None:
    return None


class BatchWaits:
    """The light version of ``DataLoaderCapture`` for watching a run (``gpuprof run --watch``): the
    same ``__next__`` wrap, but it only adds up how long the loop waited for its batches and how
    many samples they held (the loader's ``batch_size``, when it has a number), for the step that
    takes them. No worker hooks, no per-batch records: two clock reads, two additions and one look
    at the iterator the last batch came from a batch (its batch size is kept beside a weak
    reference to it; another iterator's is looked up by iterator, read from its settings once).
    ``take`` returns (wait ns, samples or -1 when a batch of unknown size came) since the last call."""

    def __init__(self) -> None:
        self.wait_ns = 0
        self.samples = 0
        self.unknown = False
        self._sizes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # iterator -> batch size
        self._last = _nothing  # a weak reference to the iterator of the last batch
        self._last_size = -1
        self._base = None
        self._original = None

    def install(self) -> bool:
        """Wrap torch's DataLoader iterators; False when torch's DataLoader is not importable."""
        if self._original is not None:
            return True
        try:
            from torch.utils.data import dataloader as module
        except Exception:  # no torch here: nothing to wait for
            return False
        base = module._BaseDataLoaderIter
        original = base.__next__
        waits = self
        clock = time.perf_counter_ns

        def __next__(it):
            t0 = clock()
            batch = original(it)  # StopIteration passes through uncounted
            waits.wait_ns += clock() - t0
            size = waits._last_size if waits._last() is it else waits._size_of(it)
            if size > 0:
                waits.samples += size
            else:
                waits.unknown = True
            return batch

        __next__.__wrapped__ = original
        base.__next__ = __next__
        self._base, self._original = base, original
        return True

    def _size_of(self, it) -> int:
        """The batch size of a batch from iterator ``it`` (-1: not a number, or unreadable), kept
        as the last iterator's."""
        size = self._sizes.get(it)
        if size is None:
            try:
                size = _settings_of(it)["batch_size"] or -1
            except Exception:  # an iterator gpuprof cannot read: its samples are unknown
                size = -1
            try:
                self._sizes[it] = size
            except TypeError:  # no weak references to it: read again at its next batch
                return size
        self._last, self._last_size = weakref.ref(it), size
        return size

    def remove(self) -> None:
        if self._original is not None:
            self._base.__next__ = self._original
            self._base = self._original = None

    def take(self) -> tuple[int, int]:
        wait, samples = self.wait_ns, (-1 if self.unknown else self.samples)
        self.wait_ns = self.samples = 0
        self.unknown = False
        return wait, samples
