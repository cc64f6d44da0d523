"""A folder of 200 rank traces (bench/synthetic_ranks.py: a synchronous DDP job whose rank 7 does its
host work 1.5x slower) gives the cross-rank report the rules define, computed in time linear in the
ranks: every "median of the other ranks" is read from values sorted once, and must be the very value
sorting the other ranks' values gives (docs/distributed.md, "Stragglers")."""

import random
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from synthetic_ranks import expected, write_folder  # noqa: E402  (the benchmark's own folder)

from gpuprof.analysis import ranks as cross  # noqa: E402

RANKS = 200


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from gpuprof.report.inputs import summarize_files

    folder = tmp_path_factory.mktemp("ranks")
    files = write_folder(folder, RANKS)
    summaries = [s for s, _d in summarize_files(files, workers=2)]
    return folder, summaries


@pytest.fixture(scope="module")
def report(job):
    from gpuprof.report.inputs import analyze

    return analyze(job[0], workers=2)


def test_200_ranks_name_the_slow_rank_and_the_others_wait(report):
    want = expected(RANKS)
    data = report.to_dict()
    assert [r["rank"] for r in data["ranks"]] == list(range(RANKS))
    assert data["cross_rank"]["matched_steps"] == want["steps"] == 5
    assert data["cross_rank"]["missing_ranks"] == [] and data["cross_rank"]["world_size"] == RANKS
    (slow,) = data["stragglers"]  # only the slowed rank: the others' +-3 % jitter is noise
    assert (slow["rank"], slow["category"]) == (want["slow"], "cpu_exec_us")
    assert slow["steps_held"] == [1, 2, 3, 4, 5]
    # The slow rank arrives last at every all-reduce, so it waits least; every other rank waits
    # for it, each about as long (their own jitter apart).
    waits = {r["rank"]: r["collective_wait_us"] for r in data["ranks"]}
    assert waits[7] == min(waits.values())
    others = sorted(w for r, w in waits.items() if r != 7)
    assert others[0] > 0.5 * others[-1] > 0
    # Rank 0's all-reduce row: 20 calls (4 buckets x 5 steps), split into transfer and waiting.
    (row,) = data["collectives"]
    assert row["calls"] == 20 and row["transfer_us"] > 0 and row["wait_us"] > 0


def _literal_call(rank, per_rank, steps):
    """The straggler rule's numbers written out literally: the other ranks' values sorted afresh."""
    others = [q for q in per_rank if q != rank]
    mine = per_rank[rank]
    excess = [
        mine["busy"][s] - statistics.median_low([per_rank[q]["busy"][s] for q in others]) for s in steps
    ]
    dev = []
    for q in others:
        xs = [per_rank[q]["busy"][s] for s in steps]
        dev += [x - statistics.median(xs) for x in xs]
    centre = statistics.median(dev)
    noise = 1.4826 * statistics.median(abs(d - centre) for d in dev)

    def low_q(xs):
        return sorted(xs)[(len(xs) - 1) // 4]

    best = low_q([mine["busy"][s] for s in steps]) - statistics.median_low(
        [low_q([per_rank[q]["busy"][s] for s in steps]) for q in others]
    )
    return round(statistics.median(excess), 3), round(noise, 3), round(best, 3)


def test_each_ranks_comparison_is_the_literal_rule(job):
    _, summaries = job
    result = cross.cross_rank(summaries)
    per_rank = {
        s["rank"]: {
            "busy": {x["step"]: x["total_us"] - x.get(cross.COMM, 0.0) for x in s["steps"]},
        }
        for s in sorted(summaries, key=lambda s: s["rank"])
    }
    steps = sorted(per_rank[0]["busy"])
    got = {c["rank"]: c for c in [*result["stragglers"], result["slowest_unnamed"]]}
    for rank in (7, result["slowest_unnamed"]["rank"]):
        c = got[rank]
        assert (c["excess_us"], c["noise_us"], c["best_excess_us"]) == _literal_call(rank, per_rank, steps)


def test_collective_split_is_the_least_time_of_any_rank_per_call(job):
    # A call's transfer is the least time any rank spent in it (matched by step and order); the rest
    # of a rank's time in it is waiting.
    _, summaries = job
    split = cross.collective_split(summaries, set(range(1, 6)))
    calls = {s["rank"]: [c for c in s["collective_calls"] if c[0] == 0] for s in summaries}
    least = [min(calls[r][i][2] for r in calls) for i in range(len(calls[0]))]
    mine = [c[2] for c in calls[0]]
    transfer, wait = split[0][0]
    assert transfer == pytest.approx(sum(least), abs=1e-3)
    assert wait == pytest.approx(sum(mine) - sum(least), abs=1e-3)


def test_all_but_one_is_sorting_the_others_afresh():
    # Ties between ints and floats (1 and 1.0), repeated values and several entries per owner: each
    # answer is the very element statistics.median_low / median return on the others' values.
    rng = random.Random(5)
    for n in (2, 3, 4, 7, 30):
        for per_owner in (1, 3):
            owners = [o for o in range(n) for _ in range(per_owner)]
            values = [rng.choice([1, 1.0, 2, 2.5, rng.uniform(0, 3)]) for _ in owners]
            table = cross._AllButOne(values, owners)
            for o in range(n):
                rest = [v for v, w in zip(values, owners) if w != o]
                for ours, theirs in (
                    (table.median_low(o), statistics.median_low(rest)),
                    (table.median(o), statistics.median(rest)),
                ):
                    assert ours == theirs and type(ours) is type(theirs)


def test_on_dask_the_same_report_and_a_bad_file_named(job, tmp_path):
    # Small files go many to a dask task; each file's result (or error) is still its own.
    distributed = pytest.importorskip("distributed")
    from gpuprof.report.inputs import analyze, summarize_files

    folder, _ = job
    local = analyze(folder, workers=1).to_dict()
    bad = tmp_path / "rank9.pt.trace.json.gz"
    bad.write_bytes(b"\x1f\x8b not gzip")
    files = [*sorted(folder.glob("rank1*.gz"))[:3], bad]
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = analyze(folder, dask_address=cluster.scheduler_address).to_dict()
        skipped: list = []
        got = summarize_files(files, dask_address=cluster.scheduler_address, skipped=skipped)
    assert remote["ranks"] == local["ranks"] and remote["stragglers"] == local["stragglers"]
    assert [s["source"] for s, _d in got[:3]] == [str(f) for f in files[:3]] and got[3] is None
    assert [s["path"] for s in skipped] == [str(bad)]


def test_the_terminal_and_markdown_show_32_ranks_the_json_all(report):
    # Rank 0, the straggler and the 30 ranks longest outside collectives, in rank order, then one
    # line for the 168 left out; the JSON keeps all 200.
    text = str(report)
    table = text[text.index("Ranks\n") :].split("\n... and ")[0].splitlines()[2:]
    shown = [int(line.split()[0]) for line in table]
    busy = {r["rank"]: r["busy_us"] for r in report.to_dict()["ranks"]}
    longest = sorted((r for r in busy if r not in (0, 7)), key=lambda r: -busy[r])[:30]
    assert shown == sorted([0, 7, *longest])
    assert "... and 168 more ranks: shown are rank 0, the stragglers" in text
    assert "... and 168 more ranks" in report.to_markdown()
    assert len(report.to_dict()["ranks"]) == RANKS
