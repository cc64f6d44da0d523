"""What each DataLoader iterated during a session was set to, for the report and the advice.

torch's DataLoader iterators all inherit ``__next__`` from ``_BaseDataLoaderIter``; while a session
records, that method is wrapped so that the first batch of each iterator notes its settings. The
wrap costs one dict lookup per batch and is removed with the hooks.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import Any


def cpus_available() -> int:
    """CPUs this process may run on (its affinity mask: what SLURM or taskset granted)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
    """Installed for the recording part of a session; collects one settings record per loader."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, dict] = {}
        self._iter_keys: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._base = None
        self._original = None

    def install(self) -> None:
        if self._original is not None:
            return
        module = sys.modules.get("torch.utils.data.dataloader")
        if module is None:  # the training script never imported torch's DataLoader
            return
        base = module._BaseDataLoaderIter
        original = base.__next__
        capture = self

        def __next__(it):
            # Runs inside the training loop's iteration: gpuprof's part never raises there (a
            # loader it cannot read is simply not recorded).
            try:
                key = capture._iter_keys.get(it)
                if key is None:
                    key = capture._note(it)
            except Exception:
                key = None
            batch = original(it)  # StopIteration passes through uncounted
            if key is not None:
                capture._by_key[key]["batches_seen"] += 1
            return batch

        __next__.__wrapped__ = original
        __next__._gpuprof_capture = True
        base.__next__ = __next__
        self._base, self._original = base, original

    def remove(self) -> None:
        if self._original is not None:
            self._base.__next__ = self._original
            self._base = self._original = None

    def _note(self, it: Any) -> tuple:
        settings = _settings_of(it)
        key = (id(getattr(it, "_dataset", None)),) + tuple(
            settings[k]
            for k in ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
        )
        with self._lock:
            self._by_key.setdefault(key, settings)
            self._iter_keys[it] = key
        return key

    def reset(self) -> None:
        """A new span starts: loaders are noted again as they are iterated."""
        with self._lock:
            for settings in self._by_key.values():
                settings["batches_seen"] = 0

    def records(self) -> list[dict]:
        with self._lock:
            return [dict(s) for s in self._by_key.values() if s["batches_seen"] > 0]
