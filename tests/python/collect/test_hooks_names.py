"""Operator and range names through the RecordFunction hooks, which look each name up by its
address first (a per-thread cache, cpp/src/collect/collector.cpp): a name whose storage is reused
for another name must never be reported with the earlier one, and threads never mix names."""

import threading
from collections import Counter, defaultdict

import torch

import gpuprof
from gpuprof._native import _core


def user_ranges(trace, prefix):
    return [e for e in _core.trace_events(trace, "user_range") if e["name"].startswith(prefix)]


def test_a_name_whose_storage_is_reused_is_never_reported_stale():
    # torch.profiler.record_function keeps its name in a std::string inside a RecordFunction on
    # the heap: each one is freed at the end of its block and the next is allocated, usually at the
    # same address, with another name in it. Short names sit in the string itself, long ones in
    # a buffer of their own; same length with a different last character, shorter and longer.
    names = []
    for i in range(600):
        k = i % 11
        names.append(f"blk_{k}" if i % 2 else f"blk_a_rather_long_name_on_the_heap_{k}{'_' * (i % 3)}")
    x = torch.ones(4)
    with gpuprof.profile() as prof:
        for name in names:
            with torch.profiler.record_function(name):
                x.add_(1)
        prof.step()
    trace = prof.report().trace
    recorded = sorted(user_ranges(trace, "blk_"), key=lambda e: e["start_ns"])
    assert [e["name"] for e in recorded] == names
    assert trace.event_names("host_op").count("aten::add_") == len(names)


def test_ops_on_four_threads_keep_their_names():
    per_thread = 300

    def worker(w):
        a = torch.ones(8)
        for i in range(per_thread):
            with torch.profiler.record_function(f"t{w}_range_{i % 5}"):
                a.mul_(1.0)
                a.add_(1)

    with gpuprof.profile(max_events=100_000) as prof:
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        prof.step()
    trace = prof.report().trace
    ranges = user_ranges(trace, "t")
    counts = Counter(e["name"] for e in ranges)
    assert counts == {f"t{w}_range_{k}": per_thread // 5 for w in range(4) for k in range(5)}
    tids_of = defaultdict(set)
    for e in ranges:
        tids_of[e["name"][:2]].add(e["tid"])
    assert all(len(tids) == 1 for tids in tids_of.values())  # each thread's names on its own thread
    assert len({next(iter(t)) for t in tids_of.values()}) == 4
    ops = Counter(trace.event_names("host_op"))
    assert ops["aten::mul_"] == 4 * per_thread and ops["aten::add_"] == 4 * per_thread


def test_record_shapes_match_torch_profiler_input_shapes():
    # The hooks hand the input sizes over as a list of integers and the collector writes the text
    # once per distinct list: it must read exactly as torch.profiler's input shapes do (scalars,
    # tensor lists and 0-dim tensors as [], one list per input), op by op, for the same work.
    a, b, c = torch.randn(4, 5), torch.randn(5, 6), torch.randn(6)

    def work():
        torch.mm(a, b)
        torch.addmm(c, a, b)
        torch.relu(a)
        a.add(1.5)
        torch.cat([a, a])
        torch.mm(a, b)  # the same list again: the text interned the first time

    with gpuprof.profile(record_shapes=True) as prof:
        work()
        prof.step()
    ours = {(r["name"], r["input_shapes"]) for r in prof.report().to_dict()["operators_by_shape"]}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as tp:
        work()
    theirs = {(e.key, str(e.input_shapes)) for e in tp.key_averages(group_by_input_shape=True)}
    assert {
        ("aten::mm", "[[4, 5], [5, 6]]"),
        ("aten::addmm", "[[6], [4, 5], [5, 6], [], []]"),
        ("aten::add", "[[4, 5], [], []]"),
        ("aten::cat", "[[], []]"),
    } <= ours
    assert ours <= theirs, ours - theirs
