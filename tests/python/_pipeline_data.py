"""Datasets with known costs for the input-pipeline tests: sleeps (robust on a loaded machine, where
busy loops are stretched by every other process) in ``__getitem__``, in a torchvision-style
``transform`` attribute and in a collate function; a CPU-bound variant; an iterable one. In a module
of their own so that spawned and forkserver workers can import them.

Each sample says what its injected costs took, as the injected code itself timed them (a sleep on
this shared machine takes up to a third longer than asked when other processes hold the CPUs):
row ``[index, load_s, transform_s, collate_s]`` (the collate's time in every row of its batch)."""

import gc
import os
import signal
import sys
import time

import torch


def _sleep(seconds: float) -> float:
    """Sleep; return how long it took."""
    if seconds <= 0:
        return 0.0
    t = time.perf_counter()
    time.sleep(seconds)
    return time.perf_counter() - t


def _row(i: int, load_s: float = 0.0) -> "torch.Tensor":
    return torch.tensor([float(i), load_s, 0.0, 0.0], dtype=torch.float64)


class SleepTransform:
    """A transform that takes `seconds` (torchvision style: a callable attribute of the dataset)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, x):
        x[2] = _sleep(self.seconds)
        return x


class SleepCollate:
    """A collate_fn that takes `seconds` per batch, then stacks; it times itself whole, the stacking
    included (the collate stage is the whole ``collate_fn``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, samples):
        t = time.perf_counter()
        _sleep(self.seconds)
        out = torch.stack(samples)
        out[:, 3] = time.perf_counter() - t
        return out


class GcCollate:
    """A collate_fn that makes `garbage` cyclic objects, sleeps `seconds`, then runs a full
    collection that frees them: the pause Python's collector takes when it runs inside a batch. The
    collector stays off from the garbage's making to that collection: once on again, the next
    allocation on any thread (a loader's or gpuprof's own thread, while this one sleeps) would run
    the collection there, on that thread, and this thread's ``gc.collect()`` would then find nothing
    to do (or return at once, the other collection still running). It times itself: row
    ``[index, whole_s, collect_s, 0]``, the whole call and the collection in it."""

    def __init__(self, seconds: float, garbage: int = 200_000) -> None:
        self.seconds, self.garbage = seconds, garbage

    def __call__(self, samples):
        t = time.perf_counter()
        was_on = gc.isenabled()
        gc.disable()
        try:
            junk = [[] for _ in range(self.garbage)]
            for a in junk:
                a.append(a)  # each list holds itself: only the cycle collector frees it
            del junk
            _sleep(self.seconds)
            c = time.perf_counter()
            gc.collect()
            collect_s = time.perf_counter() - c
        finally:
            if was_on:
                gc.enable()
        out = torch.stack(samples)
        out[:, 1] = time.perf_counter() - t
        out[:, 2] = collect_s
        return out


class Injected(torch.utils.data.Dataset):
    """`load_s` per sample in __getitem__ (plus `slow[i]` for sample i), `transform_s` in its
    transform; sample `fail_at` raises ValueError, or kills its worker with `kill=True`."""

    def __init__(self, load_s=0.0, transform_s=0.0, n=100_000, slow=None, fail_at=None, kill=False):
        self.load_s, self.n = load_s, n
        self.slow = dict(slow or {})
        self.transform = SleepTransform(transform_s) if transform_s else None
        self.fail_at, self.kill = fail_at, kill

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError(f"sample {i} is corrupt <b>\x1b[31m")
        x = _row(i, _sleep(self.load_s + self.slow.get(i, 0.0)))
        return self.transform(x) if self.transform is not None else x


class Burn(torch.utils.data.Dataset):
    """`cpu_s` of CPU work per sample (a busy loop on the thread's own CPU clock): loading that
    needs a CPU the whole time, as decoding and augmenting do."""

    def __init__(self, cpu_s: float, n=100_000) -> None:
        self.cpu_s, self.n = cpu_s, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        end = time.thread_time() + self.cpu_s
        x = 0
        while time.thread_time() < end:
            x += 1
        return _row(i)


class Stream(torch.utils.data.IterableDataset):
    """An iterable data set: `load_s` per sample in __iter__, `transform_s` in its transform; the
    samples are split between the workers."""

    def __init__(self, load_s=0.0, transform_s=0.0, n=100_000) -> None:
        self.load_s, self.n = load_s, n
        self.transform = SleepTransform(transform_s) if transform_s else None

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(start, self.n, step):
            x = _row(i, _sleep(self.load_s))
            yield self.transform(x) if self.transform is not None else x


def _timed_frames() -> int:
    """gpuprof's code on the stack above the caller, up to torch's worker loop: 0 while torch's own
    fetch runs. (Frames below the worker loop are the main process's at the fork.)"""
    import gpuprof

    package = os.path.dirname(os.path.abspath(gpuprof.__file__)) + os.sep
    f = sys._getframe(2)
    n = 0
    while f is not None and f.f_code.co_name != "_worker_loop":
        if os.path.abspath(f.f_code.co_filename).startswith(package):
            n += 1
        f = f.f_back
    return n


class Probe(torch.utils.data.Dataset):
    """Each sample says how many of gpuprof's frames were on its stack when it was loaded."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.tensor([i, _timed_frames()])
