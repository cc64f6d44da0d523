"""Cross-rank analysis over hand-built ranks (python/gpuprof/analysis/ranks.py): the expected numbers
are worked out in the comments."""

from gpuprof.advice import advise
from gpuprof.analysis.ranks import cross_rank, summary_from_report
from gpuprof.report.model import CATEGORIES


def _rank(rank, world, steps, comm_total_us=None):
    """steps: list of dicts of category -> us for step numbers 1.. ; total is their sum."""
    rows = []
    for i, cats in enumerate(steps, start=1):
        row = {"step": i, **{f"{k}_us": 0.0 for k, _ in CATEGORIES}}
        row.update({f"{k}_us": v for k, v in cats.items()})
        row["total_us"] = sum(cats.values())
        rows.append(row)
    return {
        "rank": rank,
        "local_rank": rank % 2,
        "world_size": world,
        "hostname": f"n{rank // 2}",
        "device": "cpu",
        "backend": "gloo",
        "steps": rows,
        "average": {},
        "comm_total_us": comm_total_us,
    }


def test_one_slow_rank_of_four_is_the_straggler_and_the_others_wait_for_it():
    # Ranks 0, 1, 3: 10 ms compute + 2 ms allreduce. Rank 2: 4 ms more in its DataLoader, so it
    # arrives last; the others wait those 4 ms inside the allreduce (6 ms in collectives).
    fast = [{"cpu_exec": 10_000, "communication": 6_000}] * 3
    slow = [{"cpu_exec": 10_000, "dataloader": 4_000, "communication": 2_000}] * 3
    out = cross_rank([_rank(r, 4, slow if r == 2 else fast) for r in range(4)])
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2, 3]
    assert out["matched_steps"] == 3 and out["missing_ranks"] == []
    # Outside collectives: 10 ms on the other ranks, 14 ms on rank 2 -> 4 ms, 25% of their 16 ms step,
    # in all 3 steps. The others have no noise, so the threshold is the floor: max(1 ms, 10% of 10 ms,
    # 5% of 16 ms) = 1 ms. The ranks that wait for it (victims) are not named.
    assert out["stragglers"] == [
        {
            "rank": 2,
            "excess_us": 4000.0,
            "excess_pct": 25.0,
            "category": "dataloader_us",
            "steps_held": [1, 2, 3],
            "matched_steps": 3,
            "threshold_us": 1000.0,
            "noise_us": 0.0,
            "best_excess_us": 4000.0,
        }
    ]
    assert out["slowest_unnamed"]["rank"] in (0, 1, 3) and out["slowest_unnamed"]["steps_held"] == []
    waits = {r["rank"]: r["collective_wait_us"] for r in out["ranks"]}
    assert waits == {0: 4000.0, 1: 4000.0, 2: 0.0, 3: 4000.0}
    # Imbalance: (max busy 14 ms - mean busy 11 ms) / mean step 16 ms = 18.75%.
    assert out["imbalance_pct"] == 18.75
    assert all(r["comm_comp_overlap_pct"] is None for r in out["ranks"])  # no device collectives


def test_two_ranks_the_fast_one_is_the_reference():
    # The lower median: with two ranks the excess is the whole difference, not half of it.
    a = [{"cpu_exec": 5_000, "communication": 3_000}] * 3
    b = [{"cpu_exec": 7_000, "communication": 1_000}] * 3
    out = cross_rank([_rank(0, 2, a), _rank(1, 2, b)])
    # 2 ms of rank 0's 8 ms step: 25%, in every step.
    ((s),) = out["stragglers"]
    assert (s["rank"], s["excess_us"], s["excess_pct"], s["category"]) == (1, 2000.0, 25.0, "cpu_exec_us")
    assert s["steps_held"] == [1, 2, 3]
    # Two steps are too few to name anyone, however clear the difference.
    assert cross_rank([_rank(0, 2, a[:2]), _rank(1, 2, b[:2])])["stragglers"] == []


def test_one_slow_step_is_not_a_straggler():
    # Rank 1 lost 30 ms once in 5 steps (descheduled): its mean is 6 ms above, its typical step is not.
    a = [{"cpu_exec": 5_000, "communication": 1_000}] * 5
    b = [{"cpu_exec": 5_000, "communication": 1_000}] * 4 + [{"cpu_exec": 5_000, "other": 30_000}]
    assert cross_rank([_rank(0, 2, a), _rank(1, 2, b)])["stragglers"] == []


def test_a_difference_within_the_other_ranks_noise_is_not_a_straggler():
    # Ranks 0-2 alternate 10 and 14 ms outside collectives (a loaded host): each one's steps are 2 ms
    # off its own median, so the noise (1.4826 x MAD) is 2.97 ms and the threshold 3 x that, 8.9 ms.
    # Rank 3 is 3 ms slower in every step: within the noise, not named; 12 ms slower: named.
    def ranks(extra_us):
        out = []
        for r in range(4):
            steps = [
                {
                    "cpu_exec": (10_000 if i % 2 else 14_000) + (extra_us if r == 3 else 0),
                    "communication": 1_000,
                }
                for i in range(10)
            ]
            out.append(_rank(r, 4, steps))
        return out

    quiet = cross_rank(ranks(3_000))
    assert quiet["stragglers"] == [] and quiet["slowest_unnamed"]["rank"] == 3
    assert (
        quiet["slowest_unnamed"]["noise_us"] == 2965.2 and quiet["slowest_unnamed"]["threshold_us"] == 8895.6
    )
    ((s),) = cross_rank(ranks(12_000))["stragglers"]
    assert s["rank"] == 3 and len(s["steps_held"]) == 10


def test_slower_in_half_the_steps_is_not_a_clear_majority():
    # Rank 1 loses 20 ms in 5 of 10 steps: not 2 of 3 of them, so not named; the summary says so
    # instead of "no straggler" beside a table where rank 1's mean is 10 ms higher.
    a = [{"cpu_exec": 10_000, "communication": 1_000}] * 10
    b = [{"cpu_exec": 10_000 + (20_000 if i < 5 else 0), "communication": 1_000} for i in range(10)]
    out = cross_rank([_rank(0, 2, a), _rank(1, 2, b)])
    assert out["stragglers"] == [] and out["slowest_unnamed"]["steps_held"] == [1, 2, 3, 4, 5]
    from gpuprof.analysis.ranks import attach
    from gpuprof.report.sections import rank_summary_lines

    lines = rank_summary_lines(attach({}, out))
    assert any(
        line.startswith("no straggler named: rank 1") and "slower in 5 of 10 steps" in line for line in lines
    )


def _loaded(rank_steps_ms):
    return [{"cpu_exec": ms * 1000.0, "communication": 1_000} for ms in rank_steps_ms]


def test_a_clean_pair_on_a_loaded_host_names_no_straggler():
    # Two clean ranks, 20 ms of work each; busy loops beside them take the CPU from rank 0 in 4 of
    # its 6 steps (+6 to +11 ms) and from rank 1 once. Rank 1's noise: its times off their median
    # (20.35) are -0.35, 0.35, -0.15, 0.15, 7.65, -0.35: MAD 0.35 ms, x 1.4826 x 3 = 1.56 ms, so the
    # threshold is 10% of 20.35 = 2.04 ms, and rank 0 exceeds it in 4 of 6 steps: by the per-step
    # test alone it would be named. Its best steps are not slower: its lower quartile (second best
    # of 6) is 20.1 ms against rank 1's 20.0 ms, 0.1 ms, below the 2.04 ms floor: not named.
    a = _loaded([26.0, 20.1, 31.0, 27.5, 20.0, 29.0])
    b = _loaded([20.0, 20.7, 20.2, 20.5, 28.0, 20.0])
    out = cross_rank([_rank(0, 2, a), _rank(1, 2, b)])
    assert out["stragglers"] == []
    slow = out["slowest_unnamed"]
    assert slow["rank"] == 0 and len(slow["steps_held"]) == 4 and slow["best_excess_us"] == 100.0
    # A real straggler on the same loaded host: rank 1 sleeps 40 ms in every step on top of the same
    # noise. Its best steps are 40 ms slower too (second best 60.0 - 20.1 = 39.9 ms): named.
    c = _loaded([x + 40.0 for x in [20.0, 20.7, 20.2, 20.5, 28.0, 20.0]])
    ((s),) = cross_rank([_rank(0, 2, a), _rank(1, 2, c)])["stragglers"]
    assert s["rank"] == 1 and s["best_excess_us"] == 39_900.0 and len(s["steps_held"]) == 6


def test_balanced_ranks_name_no_straggler():
    # 5% apart: under the 10% threshold, noise.
    out = cross_rank(
        [
            _rank(0, 2, [{"kernel": 10_000, "communication": 1_000}]),
            _rank(1, 2, [{"kernel": 10_500, "communication": 500}]),
        ]
    )
    assert out["stragglers"] == []


def test_steps_are_matched_by_number_and_missing_ranks_are_named():
    # Rank 1 recorded steps 1-3, rank 0 steps 1-2: only 1-2 count. Rank 2 of 3 never reported.
    r0 = _rank(0, 3, [{"cpu_exec": 1_000}] * 2)
    r1 = _rank(1, 3, [{"cpu_exec": 1_000}] * 2 + [{"cpu_exec": 90_000}])
    out = cross_rank([r1, r0])
    assert out["matched_steps"] == 2 and out["missing_ranks"] == [2]
    assert [r["steps"] for r in out["ranks"]] == [2, 2] and out["stragglers"] == []


def test_overlap_is_the_share_of_device_communication_beside_compute_and_copies():
    # 1 ms of NCCL kernels per step, 750 us of it beside a compute kernel, 100 us beside a copy:
    # 75% and 10%, from the GPU summary's union intervals (the sweep is specified in C++,
    # tests/cpp/gpu_summary_test.cpp), not from the breakdown's exposed communication.
    r = _rank(0, 1, [{"kernel": 5_000, "communication": 250}], comm_total_us=1_000)
    r["comm_overlap_compute_us"], r["comm_overlap_copy_us"] = 750.0, 100.0
    row = cross_rank([r])["ranks"][0]
    assert (row["comm_comp_overlap_pct"], row["comm_copy_overlap_pct"]) == (75.0, 10.0)
    # Without device collectives (gloo on the CPU) there is no overlap to speak of.
    plain = cross_rank([_rank(0, 1, [{"cpu_exec": 5_000, "communication": 250}])])["ranks"][0]
    assert plain["comm_comp_overlap_pct"] is None and plain["comm_copy_overlap_pct"] is None


def test_summary_from_report_reads_distributed_info_and_the_device_communication():
    # Two steps; the GPU summary of the steps' window: 8 us of NCCL kernels, 6 under compute, 2
    # under copies -> per step 4, 3 and 1.
    data = {
        "steps": [
            {"step": 7, "total_us": 10.0, "communication_us": 1.0, "start_ns": 5},
            {"step": 8, "total_us": 10.0, "communication_us": 1.0, "start_ns": 15},
        ],
        "average": {"total_us": 10.0},
        "metadata": {"distributedInfo": '{"backend": "nccl", "rank": 3, "world_size": 8}'},
        "devices": [
            {"id": 0, "comm_kernel_us": 8.0, "comm_overlap_compute_us": 6.0, "comm_overlap_copy_us": 2.0}
        ],
    }
    s = summary_from_report(data)
    assert (s["rank"], s["world_size"], s["backend"]) == (3, 8, "nccl")
    assert (s["comm_total_us"], s["comm_overlap_compute_us"], s["comm_overlap_copy_us"]) == (4.0, 3.0, 1.0)
    assert s["steps"][0] == {"step": 7, "total_us": 10.0, "communication_us": 1.0}
    # A report saved before the GPU summary had these fields: overlap not measured, never guessed.
    del data["devices"]
    assert summary_from_report(data)["comm_total_us"] is None


def _report_with(out, step_us, comm_us):
    avg = {
        "total_us": step_us,
        **{f"{k}_us": 0.0 for k, _ in CATEGORIES},
        **{f"{k}_pct": 0.0 for k, _ in CATEGORIES},
    }
    avg["communication_us"] = comm_us
    avg["communication_pct"] = 100.0 * comm_us / step_us
    return {
        "steps": [{"step": 1, "total_us": step_us}],
        "average": avg,
        "counts": {"steps": 1},
        "ranks": out["ranks"],
        "stragglers": out["stragglers"],
    }


def test_advice_blames_the_straggler_not_the_communication():
    fast = [{"cpu_exec": 10_000, "communication": 6_000}] * 3
    slow = [{"cpu_exec": 10_000, "dataloader": 4_000, "communication": 2_000}] * 3
    out = cross_rank([_rank(r, 4, slow if r == 2 else fast) for r in range(4)])
    recs = advise(_report_with(out, 16_000, 6_000))
    rules = [r["rule"] for r in recs]
    assert "straggler" in rules and "communication" not in rules
    rec = recs[rules.index("straggler")]
    assert rec["evidence"]["rank"] == 2 and rec["evidence"]["category"] == "dataloader_us"
    assert rec["saving_bound_pct"] == 25.0  # 4 ms of a 16 ms step
    assert "DistributedSampler" in rec["fix"]


def test_without_a_straggler_exposed_communication_is_advised():
    even = [{"cpu_exec": 10_000, "communication": 6_000}]
    out = cross_rank([_rank(r, 2, even) for r in range(2)])
    rules = [r["rule"] for r in advise(_report_with(out, 16_000, 6_000))]
    assert "communication" in rules and "straggler" not in rules


def test_renderers_show_the_ranks_and_the_straggler_escaped():
    from report_samples import cpu_report_dict

    import gpuprof
    from gpuprof.analysis.ranks import attach

    fast = [{"cpu_exec": 10_000, "communication": 6_000}] * 3
    slow = [{"cpu_exec": 10_000, "dataloader": 4_000, "communication": 2_000}] * 3
    ranks = [_rank(r, 4, slow if r == 2 else fast) for r in range(4)]
    ranks[1]["hostname"] = "<b>node|1</b>"
    data = attach(cpu_report_dict(), cross_rank(ranks))
    report = gpuprof.Report.from_dict(data)
    text = report.to_text(color=False, width=160)
    assert (
        "Ranks" in text and "rank 2 is a straggler: 4.00 ms per step" in text and "mostly dataloader" in text
    )
    md = report.to_markdown()
    assert "### Ranks" in md and "| &lt;b&gt;node\\|1&lt;/b&gt; |" in md
    html = report.to_html()
    assert 'id="ranks"' in html and "&lt;b&gt;node|1&lt;/b&gt;" in html and "<b>node" not in html
