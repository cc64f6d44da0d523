"""The memory a folder's analysis may hold: one budget (``--max-memory``, ``GPUPROF_MAX_MEMORY``, else
half the memory left), divided among the worker processes that read at once, so that together they
stay within it (each computing its own cap from the free memory asked for up to N halves of it); on
dask, each worker divides its own memory limit among its threads. Small files come many to a pool of
workers (10,000 small rank files started a pool every 50 files)."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from synthetic_ranks import write_folder  # noqa: E402  (the benchmark's own rank traces)

from gpuprof.report.inputs import batches  # noqa: E402
from gpuprof.traces.read import EVENT_BYTES, default_max_events, parse_size  # noqa: E402

MIB = 1 << 20


def test_sizes_are_read_as_people_write_them():
    assert parse_size("2G") == parse_size("2GiB") == parse_size("2 gb") == 2 << 30
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("512M") == parse_size("512MiB") == 512 * MIB
    assert parse_size("1048576") == MIB
    for bad in ("2x", "G", "-1G", "", "100k"):  # not a size, or under 1 MiB
        with pytest.raises(ValueError):
            parse_size(bad)


def test_the_budget_is_shared_by_the_workers(monkeypatch):
    monkeypatch.delenv("GPUPROF_MAX_EVENTS", raising=False)
    monkeypatch.delenv("GPUPROF_MAX_MEMORY", raising=False)
    # 1 GiB at 256 bytes an event: 4,194,304 events for one import, a quarter each for four.
    assert default_max_events(1, 1 << 30) == (1 << 30) // EVENT_BYTES == 4_194_304
    assert default_max_events(4, 1 << 30) == 1_048_576
    monkeypatch.setenv("GPUPROF_MAX_MEMORY", "1G")  # the same budget from the environment
    assert default_max_events(4) == 1_048_576
    assert default_max_events(4, 2 << 30) == 2_097_152  # the argument (--max-memory) wins
    monkeypatch.setenv("GPUPROF_MAX_EVENTS", "1000")  # an event count, when set, wins over both
    assert default_max_events(4, 1 << 30) == 1000


def test_small_files_come_many_to_a_pool(tmp_path):
    # 2 tasks a pool, a task per 100 bytes: files of 50 bytes are half a task each, one of 200 a
    # whole one (never more), one of 10 a tenth.
    sizes = [50, 50, 50, 200, 10, 10]
    files = []
    for i, n in enumerate(sizes):
        files.append(tmp_path / f"f{i}")
        files[-1].write_bytes(b"x" * n)
    assert list(batches(files, 2, 100)) == [(0, 4), (4, 6)]
    assert list(batches(files, 2, 1)) == [(0, 2), (2, 4), (4, 6)]  # every file a whole task


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    # Two rank traces of 3,561 events each (40 steps): more than half of 1 MiB holds at 256 bytes an
    # event (2,048), fewer than all of it (4,096).
    folder = tmp_path_factory.mktemp("two")
    write_folder(folder, 2, steps=40)
    return folder


def _analyze(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_each_worker_gets_its_share_of_max_memory(two_ranks):
    alone = _analyze(two_ranks, "--max-memory", "1M", "--workers", "1")
    assert alone.returncode == 0, alone.stderr
    assert "windows of consecutive steps" not in alone.stdout
    # Two workers: each rank's 3,561 events exceed its share's 2,048, so each is read in windows of
    # steps (analysis/windowed.py), and the report says so and why.
    shared = _analyze(two_ranks, "--max-memory", "1M", "--workers", "2")
    assert shared.returncode == 0, shared.stdout + shared.stderr
    text = " ".join(shared.stdout.split())
    assert "more than 2,048 events, the cap from this worker's 1/2 share of --max-memory 1 MiB" in text
    assert "it was analysed in 5 windows of consecutive steps" in text  # of 1,024 events at most

    # The steps read in windows are the steps read whole.
    def step_table(out: str) -> list[str]:
        lines = out.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("step  total us"))
        return lines[first : next(i for i in range(first, len(lines)) if lines[i].startswith("mean")) + 1]

    assert len(step_table(alone.stdout)) == 23  # the header, the first and last 10 steps, "…", the mean
    assert step_table(shared.stdout) == step_table(alone.stdout)


def test_a_bad_size_is_one_line_naming_the_setting(two_ranks):
    proc = _analyze(two_ranks, "--max-memory", "lots")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "gpuprof analyze: --max-memory: 'lots' is not a memory size "
        "(write it as 2G, 512M or a number of bytes)"
    )


def test_a_dask_worker_divides_its_own_memory_limit_among_its_threads():
    distributed = pytest.importorskip("distributed")
    from gpuprof.report.inputs import _dask_worker_budget

    assert _dask_worker_budget(0) is None  # not on a dask worker
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, memory_limit="1GiB", processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert client.submit(_dask_worker_budget, 0, pure=False).result() == (512 * MIB, 2)
        assert client.submit(_dask_worker_budget, 256 * MIB, pure=False).result() == (256 * MIB, 2)
