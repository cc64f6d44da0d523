"""Watching a run (session/watch.py, ``gpuprof run --watch``, ``gpuprof.watch()``): one line per
step with its numbers, the flags against the run's own baseline and for memory that grows, the
OpenMetrics file node_exporter reads, and the bound on the log's size."""

from __future__ import annotations

import json
import mmap
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import types

import pytest

from gpuprof.session import watch as w

# A DataLoader loop of STEPS steps that sleeps SLEEP s a step, and SLOW s from step SLOW_AFTER on;
# it prints its own line and exits with the status it is given, so the test sees both unchanged.
TRAIN = textwrap.dedent("""
    import sys, time, torch
    from torch.utils.data import DataLoader, TensorDataset

    steps, sleep, slow_after, slow, status = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), \\
        float(sys.argv[4]), int(sys.argv[5])
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(steps * 8, 16)), batch_size=8)
    for i, (x,) in enumerate(loader):
        time.sleep(sleep if i < slow_after else slow)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("script done", i + 1)
    sys.exit(status)
""")


def _run(tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprof.cli",
            "run",
            "--watch",
            *map(str, args[:-5]),
            script,
            *map(str, args[-5:]),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_watch_writes_one_line_per_step_and_leaves_the_run_alone(tmp_path):
    out = tmp_path / "out"
    r = _run(tmp_path, "--out", out, 40, 0.005, 10**6, 0, 3)
    # The script's own output and exit status, as without gpuprof.
    assert r.returncode == 3, r.stderr
    assert r.stdout == "script done 40\n"
    lines = _lines(out / "rank0" / "watch.jsonl")
    assert lines[0]["kind"] == "start" and lines[0]["rank"] == 0 and lines[0]["world"] == 1
    assert lines[-1] == {"kind": "end", "t": lines[-1]["t"], "steps": 40}
    steps = [line for line in lines if line["kind"] == "step"]
    # 40 optimizer steps: 40 lines, numbered 0..39, each one step.
    assert [s["step"] for s in steps] == list(range(40))
    assert all(s["steps"] == 1 for s in steps)
    for s in steps[1:]:
        # Each step sleeps 5 ms: its wall time is at least that; the CPU time is the process's own
        # (sleep takes none), the wait for the batch a part of the step.
        assert s["step_ms"] >= 5.0
        assert 0 <= s["dataloader_wait_ms"] < s["step_ms"]
        assert 0 <= s["cpu_ms"]
        assert s["rss_bytes"] > 20 << 20  # torch is loaded
        # batch_size=8 from the DataLoader: 8 samples, and samples/s = 8 / step time.
        assert s["samples"] == 8
        assert s["samples_per_s"] == pytest.approx(8000.0 / s["step_ms"], rel=1e-3)
        assert s["gpu_peak_allocated_bytes"] is None and s["gpu_util_pct"] is None  # CPU only
        assert s["gpu_mem_bytes"] is None and s["gpu_power_w"] is None
    times = [s["t"] for s in steps]
    assert times == sorted(times) and lines[0]["t"] <= times[0]
    assert "watch.jsonl" in r.stderr


def test_a_slowdown_after_n_steps_is_flagged(tmp_path):
    out = tmp_path / "out"
    # 5 ms steps, then 60 ms from step 40 on: 12x the baseline.
    r = _run(tmp_path, "--out", out, 60, 0.005, 40, 0.06, 0)
    assert r.returncode == 0, r.stderr
    lines = _lines(out / "rank0" / "watch.jsonl")
    (base,) = [line for line in lines if line["kind"] == "baseline"]
    assert base["steps"] == [w.SKIP_STEPS, w.SKIP_STEPS + w.BASELINE_STEPS]
    assert base["baseline_ms"] >= 5.0
    flags = [line for line in lines if line["kind"] == "flag" and line["flag"].startswith("slow_steps")]
    # By step 42 the median of the last 5 steps is a 60 ms one: flagged then at the latest, and still
    # slow at the end. A busy machine's noise may flag a step or two earlier, or (5 ms sleeps that
    # overslept) before step 40, a flag that then still holds at step 40: the state at step 42 is
    # what must be slow.
    held = [f for f in flags if f["step"] <= 42]
    assert held and held[-1]["flag"] == "slow_steps", flags
    slow = [f for f in flags if f["flag"] == "slow_steps" and f["step"] >= 40] or held[-1:]
    assert flags[-1]["flag"] == "slow_steps"
    assert slow[0]["ratio"] >= w.SLOW_RATIO and slow[0]["median_ms"] > slow[0]["baseline_ms"] * w.SLOW_RATIO
    assert "slowed down" in slow[0]["message"]


def test_run_refuses_watch_flags_without_watch_and_steps_with_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    for args in (["--openmetrics", "m.prom"], ["--watch", "--steps", "2:4"]):
        r = subprocess.run(
            [sys.executable, "-m", "gpuprof.cli", "run", *args, script, "1", "0", "9", "0", "0"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert r.returncode != 0
        assert "--watch" in r.stderr and "gpuprof run --watch" in r.stderr


class _Clock:
    """A step clock the test moves by hand (ns)."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def _watched(tmp_path, times_ms, **kw):
    clock = _Clock()
    watcher = w.Watcher(str(tmp_path / "out"), clock=clock, **kw).start()
    for ms in times_ms:
        clock.ns += int(ms * 1e6)
        watcher.step()
    watcher.close()
    return _lines(watcher.path)


def test_slow_steps_against_the_baseline_and_back(tmp_path):
    # 3 warm-up steps, 20 baseline steps of 10 ms, 7 more; then 20 ms steps: the median of the last
    # 5 passes 1.5 x 10 ms at the third slow step (index 32); back to 10 ms: under 1.25 x at the
    # third fast one (index 42).
    times = [100.0] * 3 + [10.0] * 27 + [20.0] * 10 + [10.0] * 5
    lines = _watched(tmp_path, times)
    (base,) = [line for line in lines if line["kind"] == "baseline"]
    assert base["baseline_ms"] == 10.0 and base["step"] == 22
    flags = [line for line in lines if line["kind"] == "flag"]
    assert [(f["flag"], f["step"]) for f in flags] == [("slow_steps", 32), ("slow_steps_over", 42)]
    assert flags[0]["median_ms"] == 20.0 and flags[0]["ratio"] == 2.0
    assert flags[1]["median_ms"] == 10.0


def test_a_small_absolute_change_is_not_a_slowdown(tmp_path):
    # 0.1 ms steps becoming 0.3 ms: 3x, but 0.2 ms is under SLOW_MIN_MS: noise of a tiny step.
    lines = _watched(tmp_path, [0.1] * 30 + [0.3] * 10)
    assert not [line for line in lines if line["kind"] == "flag"]


def test_memory_growing_step_over_step_is_flagged(tmp_path):
    kept = []
    watcher = w.Watcher(str(tmp_path / "out")).start()
    # 1 MiB written (so resident) each step: 125 steps = 5 window ends, 100 MiB between the first
    # and the last. Fresh anonymous maps, not the heap: in a long pytest process the allocator
    # hands out memory freed by earlier tests, already resident, and RSS would not move.
    for _ in range(w.GROWTH_WINDOW_STEPS * (w.GROWTH_WINDOWS + 1)):
        block = mmap.mmap(-1, 1 << 20)
        block.write(b"\x01" * (1 << 20))
        kept.append(block)
        watcher.step()
    watcher.close()
    # (Only the memory flags: these steps run on the real clock, whose noise is not under test.)
    flags = [line for line in _lines(watcher.path) if line.get("flag") == "memory_growing"]
    assert len(flags) == 1
    assert flags[0]["step"] == w.GROWTH_WINDOW_STEPS * (w.GROWTH_WINDOWS + 1) - 1
    assert flags[0]["what"] == "host RSS"
    assert flags[0]["to_bytes"] - flags[0]["from_bytes"] >= 90 << 20
    del kept


def test_rss_is_read_every_100_ms_and_at_each_growth_window_end(tmp_path):
    clock = _Clock()
    watcher = w.Watcher(str(tmp_path / "out"), clock=clock).start()
    reads = []
    raw = watcher._rss.raw

    def counted():  # the real read, counted by the step it ends
        reads.append(watcher.step_num)
        return raw()

    watcher._rss.raw = counted
    # 22 ms steps: step 0 reads, then every fifth step (110 ms after the last read; four are 88 ms);
    # step 24 ends the first growth window and reads although step 20's read is 88 ms old; the count
    # starts again from there (step 29). Then 150 ms steps: each reads.
    for _ in range(30):
        clock.ns += 22_000_000
        watcher.step()
    for _ in range(3):
        clock.ns += 150_000_000
        watcher.step()
    watcher.close()
    assert reads == [0, 5, 10, 15, 20, 24, 29, 30, 31, 32]
    steps = [line for line in _lines(watcher.path) if line["kind"] == "step"]
    # Every line has the process's RSS (torch is loaded: more than 20 MiB), the last read's.
    assert len(steps) == 33 and all(s["rss_bytes"] > 20 << 20 for s in steps)


def test_merging_step_lines():
    a = {
        "kind": "step",
        "step": 4,
        "steps": 1,
        "t": 10.0,
        "step_ms": 10.0,
        "dataloader_wait_ms": 1.0,
        "cpu_ms": 8.0,
        "rss_bytes": 100,
        "samples": 8,
        "samples_per_s": 800.0,
        "gpu_peak_allocated_bytes": None,
        "gpu_util_pct": None,
        "gpu_mem_bytes": None,
        "gpu_power_w": None,
    }
    b = dict(a, step=5, steps=3, t=11.0, step_ms=30.0, dataloader_wait_ms=3.0, rss_bytes=300, samples=24)
    m = w.merge_step_lines(a, b)
    # 4 steps: mean time (10 + 3*30)/4 = 25 ms, 32 samples in 100 ms: 320 samples/s; RSS the max.
    assert m["step"] == 4 and m["steps"] == 4 and m["t"] == 11.0
    assert m["step_ms"] == 25.0 and m["dataloader_wait_ms"] == 2.5
    assert m["samples"] == 32 and m["samples_per_s"] == 320.0
    assert m["rss_bytes"] == 300 and m["gpu_util_pct"] is None


def test_the_log_stays_under_its_bound_on_a_long_run(tmp_path):
    out = tmp_path / "out"
    bound = 20_000
    script = tmp_path / "tiny.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        x = torch.ones(1, 2)
        for _ in range(3000):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    """)
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprof.cli",
            "run",
            "--watch",
            "--out",
            out,
            "--watch-max-bytes",
            str(bound),
            "--batch-size",
            "1",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    path = out / "rank0" / "watch.jsonl"
    assert path.stat().st_size <= bound
    lines = _lines(path)
    steps = [line for line in lines if line["kind"] == "step"]
    # Every step is still counted, in order; old steps merged, the newest kept one a line.
    assert sum(s["steps"] for s in steps) == 3000
    numbers = [s["step"] for s in steps]
    assert numbers == sorted(numbers) and numbers[0] == 0
    assert steps[0]["steps"] > 1 and steps[-1]["steps"] == 1 and steps[-1]["step"] == 2999
    assert lines[0]["kind"] == "start" and lines[-1]["kind"] == "end"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} (\S+)$'
)


def _check_openmetrics(text: str) -> dict:
    """The text format's rules: # HELP and # TYPE before each family's samples, names and labels
    well formed, label values escaped, values numbers, ``# EOF`` last. Returns {name: [values]}."""
    assert text.endswith("# EOF\n")
    helped, typed, samples = set(), {}, {}
    for line in text.splitlines()[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert _NAME.match(name) and name not in helped
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name in helped and kind == "gauge"
            typed[name] = kind
        else:
            m = _SAMPLE.match(line)
            assert m, line
            assert m.group(1) in typed
            samples.setdefault(m.group(1), []).append(float(m.group(3)))
    return samples


def test_openmetrics_file_parses_and_escapes_labels(tmp_path):
    out = tmp_path / 'run "a" \\ b'  # a quote and a backslash in the run's folder
    prom = tmp_path / "metrics" / "job.prom"
    _watched(out, [10.0] * 30, openmetrics=str(prom))
    text = prom.read_text()
    samples = _check_openmetrics(text)
    assert samples["gpuprof_step"] == [29.0]
    assert samples["gpuprof_step_seconds"] == [0.01]
    assert samples["gpuprof_step_baseline_seconds"] == [0.01]
    assert samples["gpuprof_flag"] == [0.0, 0.0]
    assert "gpuprof_gpu_power_watts" not in samples  # no GPU: left out, not 0
    assert 'run "a" \\ b' not in text and 'run \\"a\\" \\\\ b' in text
    parser = pytest.importorskip("prometheus_client.openmetrics.parser")
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert families["gpuprof_step_seconds"].samples[0].value == 0.01
    assert families["gpuprof_flag"].samples[0].labels["run"] == str(out.resolve() / "out")


def test_each_rank_its_own_openmetrics_file():
    assert str(w.openmetrics_path("/m/job.prom", 3, 8)) == "/m/job.rank3.prom"
    assert str(w.openmetrics_path("/m/job.prom", 0, 1)) == "/m/job.prom"
    assert str(w.openmetrics_path("/m/r{rank}/job.prom", 2, 4)) == "/m/r2/job.prom"


def test_openmetrics_file_is_replaced_whole(tmp_path):
    # A reader that reads while the file is rewritten again and again sees only whole files.
    path = tmp_path / "job.prom"
    versions = [f"# HELP x X.\n# TYPE x gauge\nx {i}\n" + "# padding\n" * 2000 + "# EOF\n" for i in range(2)]
    w.write_atomically(path, versions[0])
    with open(path) as before:  # held open: its inode cannot be reused while the test runs
        w.write_atomically(path, versions[1])
        # Renamed over, not written in place: the open file still reads the old text whole.
        assert os.fstat(before.fileno()).st_ino != path.stat().st_ino
        assert before.read() == versions[0]
    done = threading.Event()
    seen = []

    def read():
        while not done.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(300):
        w.write_atomically(path, versions[i % 2])
    done.set()
    reader.join()
    assert seen and all(text in versions for text in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["job.prom"]


def test_watch_in_code_counts_optimizer_steps_and_the_loops_own(tmp_path):
    import torch

    import gpuprof

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gpuprof.watch(out=str(tmp_path / "a"), batch_size=2) as watching:
        for _ in range(7):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    steps = [line for line in _lines(watching.path) if line["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(7))
    assert all(s["samples"] == 2 for s in steps)
    # The loop's own steps only: two optimizer steps in each.
    with gpuprof.watch(out=str(tmp_path / "b"), auto_steps=False) as watching:
        for _ in range(4):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.step()
            watching.step()
    steps = [line for line in _lines(watching.path) if line["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(4))
    assert all(s["samples"] is None for s in steps)  # no DataLoader, no batch_size given
    assert os.path.basename(str(watching.path)) == "watch.jsonl"


def test_the_loops_own_steps_take_over_from_the_optimizers(tmp_path):
    import torch

    import gpuprof

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gpuprof.watch(out=str(tmp_path)) as watching:
        for _ in range(4):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.step()
            watching.step()
    # The first round: two optimizer steps, then the loop's own call; from there one step a round.
    steps = [line for line in _lines(watching.path) if line["kind"] == "step"]
    assert len(steps) == 3 + 3


def test_the_step_finder_leaves_backward_passes_alone_once_the_optimizer_ends_the_steps(tmp_path):
    import torch

    from gpuprof.session.watch import _Watching

    backward = torch.autograd.backward
    model = torch.nn.Linear(4, 1)

    def train(watching, steps: int) -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)  # made under the finder: counted
        for _ in range(steps):
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            opt.step()

    # gpuprof run --watch: backward passes may end the steps (a loop without torch.optim), so the
    # finder wraps torch.autograd.backward until the first optimizer step chooses the optimizer;
    # from then on each backward pass runs torch's own function, without gpuprof's call.
    watching = _Watching(
        str(tmp_path / "run"), openmetrics=None, batch_size=None, max_bytes=1 << 20, marker=None
    )
    watching.start()
    assert torch.autograd.backward is not backward
    train(watching, 3)
    assert torch.autograd.backward is backward
    watching.stop()
    assert torch.autograd.backward is backward
    steps = [line for line in _lines(watching.path) if line["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    # gpuprof.watch() in code: the optimizers may predate it, so backward passes never end the steps
    # and are never wrapped.
    import gpuprof

    with gpuprof.watch(out=str(tmp_path / "code")) as watching:
        assert torch.autograd.backward is backward
        train(watching, 2)
    assert len([line for line in _lines(watching.path) if line["kind"] == "step"]) == 2


class _SlowNvml:
    """NvmlReader's stand-in: each read takes READ_S, as NVML's calls took milliseconds on an H200."""

    READ_S = 0.3
    opened: list = []

    def __init__(self, device, bus=""):
        self.opened.append((device, bus))
        self.ok, self.why = True, ""

    def read(self):
        time.sleep(self.READ_S)
        return {"gpu_util_pct": 77, "gpu_mem_bytes": 5 << 30, "gpu_power_w": 312.5}

    def close(self):
        pass


class _Cuda:
    """torch.cuda as the watcher reads it: the current device, its PCI address, the allocator."""

    def current_device(self):
        return 3

    def get_device_properties(self, device):
        return types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x19, pci_device_id=0)

    def memory_stats_as_nested_dict(self):
        return {"allocated_bytes": {"all": {"current": 1 << 20, "peak": 64 << 20}}}

    def reset_peak_memory_stats(self):
        pass


def test_nvml_is_read_on_a_thread_of_its_own_never_in_the_step(tmp_path, monkeypatch):
    # NVML's reads take 0.3 s here; no step() call waits for one (each well under that, writes
    # included), and the steps after the poller's first reading carry it. The poller opens the GPU
    # current at the first write (CUDA device 3, found by its PCI address).
    from gpuprof.collect import nvml

    monkeypatch.setattr(nvml, "NvmlReader", _SlowNvml)
    _SlowNvml.opened = []
    now = [0]
    watcher = w.Watcher(tmp_path / "out", clock=lambda: now[0]).start()
    watcher._torch_cuda = _Cuda()
    longest = 0.0
    for i in range(12):
        now[0] += 600_000_000  # 0.6 s a step: a write every other step
        t = time.perf_counter()
        watcher.step()
        longest = max(longest, time.perf_counter() - t)
        if i == 3:
            time.sleep(2 * _SlowNvml.READ_S)  # the poller's first reading is in
    watcher.close()
    assert longest < _SlowNvml.READ_S / 2, longest
    assert _SlowNvml.opened == [(3, "0000:19:00.0")]
    steps = [line for line in _lines(watcher.path) if line["kind"] == "step"]
    assert steps[0]["gpu_util_pct"] is None  # no reading before the first write
    assert steps[-1]["gpu_util_pct"] == 77 and steps[-1]["gpu_power_w"] == 312.5
    assert steps[-1]["gpu_mem_bytes"] == 5 << 30
    assert all(s["gpu_peak_allocated_bytes"] == 64 << 20 for s in steps)
