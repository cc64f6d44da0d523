"""Watching a run: a few numbers per training step, always on, at a cost the steps do not feel
(``gpuprof run --watch``, ``gpuprof.watch()``; docs/watch.md).

Per step: its wall time, the time the loop waited for DataLoader batches, the process's CPU time,
host RSS (read when the last reading is ``RSS_EVERY_NS`` old, and at the memory rule's window ends;
the steps between carry it), the samples it drew when the loader's batch size is a number, and on a
GPU torch's
allocator peak and NVML's utilization, memory in use and power (read at most once a second, and
given to the steps of that second). No profiler, no RecordFunction hook, nothing per operator: the
steps are found where ``gpuprof run`` finds them (collect/autostep.py), the waits by the light wrap
of the DataLoader's ``__next__`` (collect/dataloader.py ``BatchWaits``).

Each rank appends to ``OUT/rank<N>/watch.jsonl``, one JSON object a line, written at most once a
second: a ``start`` line, one ``step`` line per step, a ``flag`` line when a rule below fires and
an ``end`` line. The file stays under ``max_bytes``: past it, the older three quarters of its step
lines are merged two by two (``steps`` says how many steps a line holds; times are their means,
RSS and peaks their maxima), so old steps lose resolution and recent ones keep theirs. With
``openmetrics``, the last step's numbers are also written, in OpenMetrics text, to a file that
node_exporter's textfile collector reads; each write replaces it whole (a temporary file renamed
over it), so a reader never sees half a file.

The flags, each written once when it starts to hold:
  slow_steps      the median of the last ``SLOW_WINDOW`` steps is over ``SLOW_RATIO`` times the
                  run's own baseline (the median of ``BASELINE_STEPS`` steps after the first
                  ``SKIP_STEPS``) and at least ``SLOW_MIN_MS`` above it; ``slow_steps_over`` when
                  the median is back under ``RECOVER_RATIO`` times the baseline.
  memory_growing  host RSS (and on a GPU torch's allocated memory) at the end of each of the last
                  ``GROWTH_WINDOWS`` windows of ``GROWTH_WINDOW_STEPS`` steps was above the one
                  before, by ``GROWTH_MIN_BYTES`` or more in all.

Nothing here may end or slow the training run: a write that fails stops the writing with one
warning, and the run goes on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from .._host import cuda_allocator_levels, job_rank
from ..collect.dataloader import BatchWaits
from .capture import CaptureListener, register

log = logging.getLogger("gpuprof")

FLUSH_EVERY_S = 1.0
FLUSH_NS = int(FLUSH_EVERY_S * 1e9)
DEFAULT_MAX_BYTES = 16 << 20
MIN_MAX_BYTES = 16 << 10
SKIP_STEPS = 3
BASELINE_STEPS = 20
SLOW_WINDOW = 5  # odd: its median holds a bound when more than half its steps hold it
SLOW_RATIO = 1.5
RECOVER_RATIO = 1.25
SLOW_MIN_MS = 0.5
GROWTH_WINDOW_STEPS = 25
GROWTH_WINDOWS = 4
GROWTH_MIN_BYTES = 32 << 20
RSS_EVERY_NS = 100_000_000  # RSS read at a step's end when the last read is this old (and at window ends)
MAX_FLAG_LINES = 200  # kept when the file is compacted (the newest)

# The fields of a step line, in the order they are written.
STEP_FIELDS = (
    "step",
    "steps",
    "t",
    "step_ms",
    "dataloader_wait_ms",
    "cpu_ms",
    "rss_bytes",
    "samples",
    "samples_per_s",
    "gpu_peak_allocated_bytes",
    "gpu_util_pct",
    "gpu_mem_bytes",
    "gpu_power_w",
)
# How merged lines combine each field: their sum, their mean (weighted by steps), their maximum.
_SUMMED = {"steps", "samples"}
_MAXED = {"t", "rss_bytes", "gpu_peak_allocated_bytes", "gpu_mem_bytes"}

_STEP_TEMPLATE = (
    '{"kind":"step","step":%d,"steps":1,"t":%.3f,"step_ms":%.3f,"dataloader_wait_ms":%.3f,'
    '"cpu_ms":%.3f,"rss_bytes":%s,"samples":%s,"samples_per_s":%s,"gpu_peak_allocated_bytes":%s,'
    '"gpu_util_pct":%s,"gpu_mem_bytes":%s,"gpu_power_w":%s}'
)
# The same line where the GPU fields are all null (no GPU) and RSS and samples are numbers.
_CPU_STEP_TEMPLATE = (
    '{"kind":"step","step":%d,"steps":1,"t":%.3f,"step_ms":%.3f,"dataloader_wait_ms":%.3f,'
    '"cpu_ms":%.3f,"rss_bytes":%d,"samples":%d,"samples_per_s":%.3f,"gpu_peak_allocated_bytes":null,'
    '"gpu_util_pct":null,"gpu_mem_bytes":null,"gpu_power_w":null}'
)
_NO_GPU = (None, None, None)


def _int(value) -> str:
    return "null" if value is None else f"{value:d}"


def _num(value) -> str:
    return "null" if value is None else f"{value:.3f}"


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Rss:
    """Resident set size from /proc/self/statm (one pread of a file kept open), or -1. ``raw()``
    is the file's text as read (b"" when unreadable), for ``parse`` later, off the step."""

    def __init__(self) -> None:
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = -1

    def raw(self) -> bytes:
        if self._fd < 0:
            return b""
        try:
            return os.pread(self._fd, 128, 0)
        except OSError:
            return b""

    @staticmethod
    def parse(raw: bytes) -> int:
        try:
            return int(raw.split()[1]) * _PAGE
        except (ValueError, IndexError):
            return -1

    def read(self) -> int:
        return self.parse(self.raw())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _median(values) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def merge_step_lines(a: dict, b: dict) -> dict:
    """Two step lines as one: sums, step-weighted means and maxima (see the module docstring)."""
    na, nb = a.get("steps") or 1, b.get("steps") or 1
    out = {"kind": "step"}
    for field in STEP_FIELDS:
        x, y = a.get(field), b.get(field)
        if field == "step":
            out[field] = x
        elif x is None or y is None:
            out[field] = x if y is None else y
        elif field in _SUMMED:
            out[field] = x + y
        elif field in _MAXED:
            out[field] = max(x, y)
        else:
            out[field] = round((x * na + y * nb) / (na + nb), 3)
    if out.get("samples") is not None and out.get("step_ms"):
        out["samples_per_s"] = round(out["samples"] * 1000.0 / (out["step_ms"] * out["steps"]), 3)
    return out


def compact_lines(lines: list[dict], max_bytes: int) -> list[dict]:
    """The lines of a watch.jsonl brought under ``max_bytes * 5/8``: the older three quarters of
    the step lines merged two by two, as many times as it takes; the newest ``MAX_FLAG_LINES``
    other lines kept as they are, in place."""
    target = max_bytes * 5 // 8
    others = [i for i, line in enumerate(lines) if line.get("kind") != "step"]
    drop = set(others[:-MAX_FLAG_LINES]) if len(others) > MAX_FLAG_LINES else set()
    lines = [line for i, line in enumerate(lines) if i not in drop]
    for _ in range(64):
        steps = [i for i, line in enumerate(lines) if line.get("kind") == "step"]
        if len(steps) < 2 or _size(lines) <= target:
            break
        old = steps[: max(2, len(steps) * 3 // 4)]
        merged: dict[int, Optional[dict]] = {}
        for j in range(0, len(old) - 1, 2):
            merged[old[j]] = merge_step_lines(lines[old[j]], lines[old[j + 1]])
            merged[old[j + 1]] = None
        lines = [merged.get(i, line) for i, line in enumerate(lines) if merged.get(i, line) is not None]
    return lines


def _size(lines: list[dict]) -> int:
    return sum(len(_dump(line)) + 1 for line in lines)


def _dump(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def _label(value: str) -> str:
    """An OpenMetrics label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# (metric, help, the step field it shows, the factor from the field's unit to the metric's)
OPENMETRICS = (
    ("gpuprof_step", "The last training step number this rank finished.", "step", 1),
    ("gpuprof_step_seconds", "Wall time of the last training step.", "step_ms", 1e-3),
    ("gpuprof_step_median_seconds", "Median wall time of the last steps.", "median_ms", 1e-3),
    ("gpuprof_step_baseline_seconds", "Median wall time of the run's baseline steps.", "baseline_ms", 1e-3),
    (
        "gpuprof_dataloader_wait_seconds",
        "Time the last step waited for DataLoader batches.",
        "dataloader_wait_ms",
        1e-3,
    ),
    ("gpuprof_process_cpu_seconds", "CPU time of the training process in the last step.", "cpu_ms", 1e-3),
    ("gpuprof_rss_bytes", "Resident set size of the training process.", "rss_bytes", 1),
    ("gpuprof_samples_per_second", "Samples per second of the last step.", "samples_per_s", 1),
    (
        "gpuprof_gpu_allocator_peak_bytes",
        "Peak memory torch's allocator held in the last step.",
        "gpu_peak_allocated_bytes",
        1,
    ),
    ("gpuprof_gpu_utilization_ratio", "GPU utilization (NVML), 0 to 1.", "gpu_util_pct", 0.01),
    ("gpuprof_gpu_memory_used_bytes", "GPU memory in use (NVML).", "gpu_mem_bytes", 1),
    ("gpuprof_gpu_power_watts", "GPU power draw (NVML).", "gpu_power_w", 1),
)
FLAG_NAMES = ("slow_steps", "memory_growing")


def openmetrics_text(line: dict, labels: dict, flags: dict) -> str:
    """The OpenMetrics text of one step line (every metric a gauge; fields that are None left out),
    the flags as ``gpuprof_flag{flag=...}`` 0 or 1, and ``# EOF``."""
    tags = ",".join(f'{k}="{_label(str(v))}"' for k, v in labels.items())
    out = []
    for name, words, field, factor in OPENMETRICS:
        value = line.get(field)
        if value is None:
            continue
        out += [f"# HELP {name} {words}", f"# TYPE {name} gauge", f"{name}{{{tags}}} {value * factor:.9g}"]
    out += [
        "# HELP gpuprof_flag Whether a watch flag holds now (docs/watch.md).",
        "# TYPE gpuprof_flag gauge",
    ]
    for flag in FLAG_NAMES:
        out.append(f'gpuprof_flag{{{tags},flag="{flag}"}} {1 if flags.get(flag) else 0}')
    out.append("# EOF")
    return "\n".join(out) + "\n"


def openmetrics_path(path: str, rank: int, world: int) -> Path:
    """Each rank its own file: ``{rank}`` in the path is replaced by the rank; without it, a job of
    more than one rank writes ``NAME.rank<N>.prom`` beside the given ``NAME.prom``."""
    if "{rank}" in path:
        return Path(path.replace("{rank}", str(rank)))
    p = Path(path)
    if world > 1:
        return p.with_name(f"{p.stem}.rank{rank}{p.suffix}")
    return p


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file in the same folder renamed over it (the
    temporary's name does not end in .prom: node_exporter never reads it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Watcher:
    """The per-step numbers of one process. ``step()`` ends a step (the finder's boundary, or the
    script's own call); ``close()`` writes what is left and an ``end`` line."""

    def __init__(
        self,
        out: str = "gpuprof-out",
        *,
        openmetrics: Optional[str] = None,
        batch_size: Optional[int] = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        script: str = "",
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.out = Path(out)
        self.openmetrics = openmetrics
        self.batch_size = batch_size
        self.max_bytes = max(int(max_bytes), MIN_MAX_BYTES)
        self.script = script
        self.step_num = 0
        self.path: Optional[Path] = None  # OUT/rank<N>/watch.jsonl, once the rank is known
        self.metrics_path: Optional[Path] = None
        self.flags: dict[str, bool] = {}
        self.baseline_ms: Optional[float] = None
        self._clock = clock
        self._cpu = time.process_time_ns
        self._rss = _Rss()
        self._waits = BatchWaits()
        self._pending: list = []  # raw step tuples (step(), _step_text) and other lines' dicts, not written
        self._recent: list[float] = []  # step_ms of the last SLOW_WINDOW steps
        self._baseline: list[float] = []
        self._growth: list[tuple[int, int]] = []  # (rss, gpu allocated) at each window's end
        self._last_line: dict = {}
        self._broken = False
        self._closed = False
        self._rank = (0, 1)
        self._torch_cuda = None
        self._gpu_poller = None  # collect.nvml.NvmlPoller, from the first write on
        self._gpu_sample: tuple = _NO_GPU
        self._last_flush_ns = 0
        self._rss_raw = b""  # statm's text as last read, and when (step clock)
        self._rss_ns: Optional[int] = None
        self._rss_parsed: tuple = (b"", -1)  # the last text parsed at the write, and its bytes
        self._slow_counts = [0, 0]  # steps in the window over the slow bound, under the recovery one
        self._t0 = self._clock()
        self._cpu0 = self._cpu()
        self._capture = CaptureListener(self)
        self._registered: list = []  # the registry's files naming this run by its PID

    # ---- life ------------------------------------------------------------------------------------
    def start(self) -> Watcher:
        self._waits.install()
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:
            if cuda is not None and cuda.is_available():
                self._torch_cuda = cuda
        except Exception:
            self._torch_cuda = None
        self._t0, self._cpu0 = self._clock(), self._cpu()
        self._last_flush_ns = self._t0
        self._rank = job_rank()[:2]
        self._capture.install_signal()
        self._pending.append(
            {
                "kind": "start",
                "t": round(time.time(), 3),
                "rank": self._rank[0],
                "world": self._rank[1],
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "script": self.script,
            }
        )
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._capture.close()  # a capture in progress: its steps so far, as a partial report
        except Exception:
            log.exception("gpuprof watch: the capture in progress could not be ended")
        self._capture.remove_signal()
        self._waits.remove()
        self._pending.append({"kind": "end", "t": round(time.time(), 3), "steps": self.step_num})
        self.flush()
        for name in self._registered:
            try:
                name.unlink()
            except OSError:
                pass
        self._rss.close()
        if self._gpu_poller is not None:
            self._gpu_poller.close()

    @property
    def rank(self) -> tuple:
        """(rank, world size) as the watcher writes them."""
        return self._rank

    def add_line(self, line: dict) -> None:
        """A line for the log, written at the next write."""
        self._pending.append(line)

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- a step ends -----------------------------------------------------------------------------
    def step(self) -> None:
        # Raw numbers only (ns, statm's text): made into the line's units, and the slow-step rule
        # run over them, at the write, once a second; nothing here builds more than the tuple.
        now, cpu = self._clock(), self._cpu()
        number = self.step_num
        window_end = (number + 1) % GROWTH_WINDOW_STEPS == 0
        if window_end or self._rss_ns is None or now - self._rss_ns >= RSS_EVERY_NS:
            self._rss_raw, self._rss_ns = self._rss.raw(), now
        raw = self._rss_raw
        peak = None
        cuda = self._torch_cuda
        if cuda is not None:
            try:
                peak = cuda_allocator_levels(cuda)[2]
                cuda.reset_peak_memory_stats()
            except Exception:
                peak = None
        waits, capture = self._waits, self._capture
        self._pending.append(
            (
                number,
                now,
                now - self._t0,
                waits.wait_ns,
                cpu - self._cpu0,
                raw,
                -1 if waits.unknown else waits.samples,
                peak,
                self._gpu_sample,
                capture.running is not None,  # a captured step's time holds the profiler's
            )
        )
        waits.wait_ns = waits.samples = 0
        waits.unknown = False
        if window_end:
            self._check_growth(_Rss.parse(raw))
        self.step_num = number + 1
        if now - self._last_flush_ns >= FLUSH_NS:
            self.flush(now)
        if capture.signalled:  # SIGUSR2 came: a capture of the next steps, armed here
            try:
                capture.take_signal()
            except Exception:
                log.exception("gpuprof watch: the capture SIGUSR2 asked for could not be armed")
        if capture.running is not None:
            capture.step()
        elif capture.begins == self.step_num:
            capture.begin()
        # The wall time gpuprof itself spent above is left out of the next step (its CPU time, a
        # few microseconds, is not: a second CPU-time read would cost a system call a step).
        self._t0, self._cpu0 = self._clock(), cpu

    def _step_line(self, item: tuple, wall: float, at: int) -> dict:
        return json.loads(self._step_text(item, wall, at))

    def _step_text(self, item: tuple, wall: float, at: int) -> str:
        """One step's line, formatted from a template (a dict through json.dumps costs 3x more);
        ``wall``/``at``: the time of day and the step clock at the write, for the step's ``t``."""
        number, end, step_ns, wait_ns, cpu_ns, raw, samples, peak, gpu, _ = item
        parsed = self._rss_parsed
        if raw is parsed[0]:  # the steps between two reads share one
            rss = parsed[1]
        else:
            rss = _Rss.parse(raw)
            self._rss_parsed = (raw, rss)
        if samples <= 0:
            samples = self.batch_size or None
        t = wall - (at - end) / 1e9
        if gpu is _NO_GPU and peak is None and samples and rss >= 0 and step_ns > 0:
            return _CPU_STEP_TEMPLATE % (
                number,
                t,
                step_ns / 1e6,
                wait_ns / 1e6,
                cpu_ns / 1e6,
                rss,
                samples,
                samples * 1e9 / step_ns,
            )
        rate = samples * 1e9 / step_ns if samples and step_ns > 0 else None
        util, mem, power = gpu
        return _STEP_TEMPLATE % (
            number,
            t,
            step_ns / 1e6,
            wait_ns / 1e6,
            cpu_ns / 1e6,
            _int(rss if rss >= 0 else None),
            _int(samples),
            _num(rate),
            _int(peak),
            _num(util),
            _int(mem),
            _num(power),
        )

    # ---- flags -----------------------------------------------------------------------------------
    def _flag(self, flag: str, message: str, step: int, t: float, **numbers) -> dict:
        line = {"kind": "flag", "flag": flag, "step": step, "t": round(t, 3)}
        line.update(numbers)
        line["message"] = message
        return line

    def _check_slow(self, step_ms: float, step: int, t: float, out: list) -> None:
        """The slow-step rule at the end of step ``step`` (ended at time of day ``t``), run at the
        write over the steps it writes: its lines go to ``out``. The window's median is over the
        slow bound exactly when more than half its steps are (under the recovery bound likewise):
        those steps are counted as they come and go, the median taken only for a flag's line."""
        recent = self._recent
        recent.append(step_ms)
        gone = recent.pop(0) if len(recent) > SLOW_WINDOW else None
        base = self.baseline_ms
        counts = self._slow_counts
        if base is None:
            if step >= SKIP_STEPS:
                self._baseline.append(step_ms)
                if len(self._baseline) == BASELINE_STEPS:
                    self.baseline_ms = base = round(_median(self._baseline), 3)
                    counts[0] = sum(1 for v in recent if v > base * SLOW_RATIO and v - base >= SLOW_MIN_MS)
                    counts[1] = sum(1 for v in recent if v < base * RECOVER_RATIO)
                    out.append(
                        {
                            "kind": "baseline",
                            "step": step,
                            "baseline_ms": self.baseline_ms,
                            "steps": [SKIP_STEPS, SKIP_STEPS + BASELINE_STEPS],
                        }
                    )
            return
        if step_ms > base * SLOW_RATIO and step_ms - base >= SLOW_MIN_MS:
            counts[0] += 1
        elif step_ms < base * RECOVER_RATIO:
            counts[1] += 1
        if gone is not None:
            if gone > base * SLOW_RATIO and gone - base >= SLOW_MIN_MS:
                counts[0] -= 1
            elif gone < base * RECOVER_RATIO:
                counts[1] -= 1
        if len(recent) < SLOW_WINDOW:
            return
        if not self.flags.get("slow_steps"):
            if counts[0] > SLOW_WINDOW // 2:
                median = _median(recent)
                self.flags["slow_steps"] = True
                out.append(
                    self._flag(
                        "slow_steps",
                        f"steps slowed down: the last {SLOW_WINDOW} steps' median {median:.3f} ms is "
                        f"{median / base:.2f}x the run's baseline {base:.3f} ms",
                        step,
                        t,
                        median_ms=round(median, 3),
                        baseline_ms=base,
                        ratio=round(median / base, 3),
                    )
                )
        elif counts[1] > SLOW_WINDOW // 2:
            median = _median(recent)
            self.flags["slow_steps"] = False
            out.append(
                self._flag(
                    "slow_steps_over",
                    f"steps are back near the baseline: median {median:.3f} ms, baseline {base:.3f} ms",
                    step,
                    t,
                    median_ms=round(median, 3),
                    baseline_ms=base,
                    ratio=round(median / base, 3),
                )
            )

    def _check_growth(self, rss: int) -> None:
        allocated = -1
        if self._torch_cuda is not None:
            try:
                allocated = cuda_allocator_levels(self._torch_cuda)[0]
            except Exception:
                allocated = -1
        marks = self._growth
        marks.append((rss, allocated))
        if len(marks) > GROWTH_WINDOWS + 1:
            del marks[0]
        if len(marks) < GROWTH_WINDOWS + 1:
            return
        grew = []
        for i, what in ((0, "host RSS"), (1, "GPU memory allocated by torch")):
            values = [m[i] for m in marks]
            if min(values) >= 0 and all(b > a for a, b in zip(values, values[1:])):
                if values[-1] - values[0] >= GROWTH_MIN_BYTES:
                    grew.append((what, values[0], values[-1]))
        if grew and not self.flags.get("memory_growing"):
            self.flags["memory_growing"] = True
            steps = GROWTH_WINDOWS * GROWTH_WINDOW_STEPS
            what, first, last = grew[0]
            self._pending.append(
                self._flag(
                    "memory_growing",
                    f"{what} grew in each of the last {GROWTH_WINDOWS} windows of {GROWTH_WINDOW_STEPS} "
                    f"steps: {first / 2**20:.1f} MiB to {last / 2**20:.1f} MiB over {steps} steps",
                    self.step_num,
                    time.time(),
                    what=what,
                    from_bytes=first,
                    to_bytes=last,
                    over_steps=steps,
                )
            )
        elif not grew and self.flags.get("memory_growing"):
            self.flags["memory_growing"] = False

    # ---- writing ---------------------------------------------------------------------------------
    def flush(self, now: Optional[int] = None) -> None:
        """Write the pending lines (and the OpenMetrics file); read NVML for the next second."""
        self._last_flush_ns = self._clock() if now is None else now
        pending, self._pending = self._pending, []
        if self._broken:
            return
        try:
            self._write(pending)
        except Exception as e:  # a full disk, a folder gone: the run goes on, unwatched
            self._broken = True
            log.warning(
                "gpuprof watch: writing %s failed (%s); watching stops, the run goes on",
                self.path or self.out,
                e,
            )
            return
        self._sample_gpu()
        try:
            self._capture.poll()  # one stat of the run folder's capture request
        except Exception:
            log.exception("gpuprof watch: could not read the capture request")

    def _open_paths(self) -> None:
        rank, world = job_rank()[:2]  # torch.distributed's by now, when the script set it up
        self._rank = (rank, world)
        folder = self.out / f"rank{rank}"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "watch.jsonl"
        # The PID's name is removed at the end; the SLURM job's stays (the job's folder, ended).
        self._registered = register(self.out, os.getpid(), socket.gethostname())[:1]
        if self.openmetrics:
            self.metrics_path = openmetrics_path(self.openmetrics, rank, world)
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, pending: list) -> None:
        if self.path is None:
            self._open_paths()
        wall, at = time.time(), self._clock()
        text = []
        last = None
        flags: list = []
        for item in pending:
            if isinstance(item, tuple):
                text.append(self._step_text(item, wall, at))
                last = item
                if not item[9]:  # not a captured step
                    self._check_slow(item[2] / 1e6, item[0], wall - (at - item[1]) / 1e9, flags)
                    if flags:
                        text.extend(_dump(line) for line in flags)
                        flags.clear()
            else:
                if item.get("kind") == "start":
                    item["rank"], item["world"] = self._rank
                text.append(_dump(item))
        if text:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("\n".join(text) + "\n")
                size = f.tell()
            if size > self.max_bytes:
                self._compact()
        if last is not None:
            self._last_line = self._step_line(last, wall, at)
        if self.metrics_path is not None and self._last_line:
            line = dict(self._last_line)
            if self._recent:
                line["median_ms"] = round(_median(self._recent), 3)
            line["baseline_ms"] = self.baseline_ms
            labels = {"rank": self._rank[0], "host": socket.gethostname(), "run": str(self.out.resolve())}
            write_atomically(self.metrics_path, openmetrics_text(line, labels, self.flags))

    def _compact(self) -> None:
        lines = []
        with open(self.path, encoding="utf-8") as f:
            for raw in f:
                try:
                    lines.append(json.loads(raw))
                except ValueError:  # a line cut by a crash of an earlier run: dropped
                    continue
        kept = compact_lines(lines, self.max_bytes)
        write_atomically(self.path, "".join(_dump(line) + "\n" for line in kept))

    def _sample_gpu(self) -> None:
        """The GPU fields of the steps until the next write: the poller's last reading. The poller
        starts at the first write, on the device current then (the training thread's: a rank's own
        GPU once it has chosen it), and reads NVML on its own thread."""
        cuda = self._torch_cuda
        if cuda is None:
            return
        if self._gpu_poller is None:
            try:
                device = cuda.current_device()
                props = cuda.get_device_properties(device)
                bus = "{:04x}:{:02x}:{:02x}.0".format(
                    getattr(props, "pci_domain_id", 0),
                    getattr(props, "pci_bus_id", 0),
                    getattr(props, "pci_device_id", 0),
                )
            except Exception:
                device, bus = 0, ""
            from ..collect.nvml import NvmlPoller

            self._gpu_poller = NvmlPoller(device, bus, FLUSH_EVERY_S)
        latest = self._gpu_poller.latest
        self._gpu_sample = _NO_GPU if latest is None else latest


def watch(
    out: str = "gpuprof-out",
    *,
    openmetrics: Optional[str] = None,
    batch_size: Optional[int] = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    step_marker: Optional[str] = None,
    auto_steps: bool = True,
):
    """Watch the training loop that follows: ``with gpuprof.watch(out="runs/a") as w: train()``.
    Steps end at each step of the first torch.optim optimizer that steps, at ``step_marker`` when
    given, or at the loop's own ``w.step()`` calls (from the first one on; ``auto_steps=False``:
    only there, from the start). Writes
    ``out/rank<N>/watch.jsonl`` and, with ``openmetrics``, that file (docs/watch.md)."""
    return _Watching(
        out,
        openmetrics=openmetrics,
        batch_size=batch_size,
        max_bytes=max_bytes,
        marker=step_marker,
        backward_steps=False,
        auto_steps=auto_steps,
    )


class _Watching:
    """A ``Watcher`` with its step finder, as one context manager (and ``start``/``stop``)."""

    def __init__(
        self,
        out,
        *,
        openmetrics,
        batch_size,
        max_bytes,
        marker,
        announce=None,
        script="",
        backward_steps=True,
        auto_steps=True,
    ) -> None:
        self._backward_steps = backward_steps
        self._auto_steps = auto_steps
        self.watcher = Watcher(
            out, openmetrics=openmetrics, batch_size=batch_size, max_bytes=max_bytes, script=script
        )
        self._marker = marker
        self._announce = announce or (lambda line: log.info("%s", line))
        self._finder = None

    def start(self) -> _Watching:
        from ..collect.autostep import StepFinder

        self.watcher.start()
        if not self._auto_steps:
            return self
        try:
            import torch  # noqa: F401  (the finder's hooks live there)

            self._finder = StepFinder(
                self.watcher,
                marker=self._marker,
                announce=self._announce,
                backward_steps=self._backward_steps,
            ).install()
        except ImportError:  # no torch: the loop's own step() calls only
            self._finder = None
        return self

    def step(self) -> None:
        self.watcher.step()

    def stop(self) -> None:
        if self._finder is not None:
            self._finder.remove()
            self._finder = None
        self.watcher.close()

    @property
    def path(self) -> Optional[Path]:
        return self.watcher.path

    def __enter__(self) -> _Watching:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
