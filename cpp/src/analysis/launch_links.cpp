#include "gpuprof/analysis/launch_links.h"

#include <algorithm>
#include <unordered_map>

#include "gpuprof/analysis/tensor_cores.h"
#include "run_sort.h"

namespace gpuprof {

namespace {

// id -> event index for the correlation and external ids. Profilers number them with counters,
// so the ids of a trace mostly lie in a range not much larger than their count: then a plain
// vector indexed by id (no hashing, no node per entry); otherwise a hash map.
class IdIndex {
 public:
  explicit IdIndex(const std::vector<uint64_t>& ids) {
    uint64_t max_id = 0;
    for (uint64_t id : ids) max_id = std::max(max_id, id);
    dense_ = max_id <= 4 * uint64_t(ids.size()) + 4096;
    if (dense_) slots_.assign(size_t(max_id) + 1, kNoIndex);
    else sparse_.reserve(ids.size());
  }
  // The slot for `id` (kNoIndex when new), to read or to set.
  uint32_t& operator[](uint64_t id) {
    return dense_ ? slots_[size_t(id)] : sparse_.try_emplace(id, kNoIndex).first->second;
  }
  uint32_t find(uint64_t id) const {
    if (dense_) return id < slots_.size() ? slots_[size_t(id)] : kNoIndex;
    const auto it = sparse_.find(id);
    return it == sparse_.end() ? kNoIndex : it->second;
  }

 private:
  bool dense_ = false;
  std::vector<uint32_t> slots_;
  std::unordered_map<uint64_t, uint32_t> sparse_;
};

// Sorts event indices by (start, rank, longer first, index), a total order, through a copy of those
// keys beside each index: the comparisons then read one contiguous array instead of the events.
// `rank(e)` orders events that start together before their durations do.
template <class Rank>
void sort_by_start(const Trace& t, std::vector<uint32_t>& items, Rank rank) {
  struct Keyed {
    int64_t start, dur;
    uint32_t rank, index;
    bool operator<(const Keyed& o) const {
      if (start != o.start) return start < o.start;
      if (rank != o.rank) return rank < o.rank;
      if (dur != o.dur) return dur > o.dur;
      return index < o.index;
    }
  };
  std::vector<Keyed> keyed(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const Event& e = t.events[items[k]];
    keyed[k] = {e.start_ns, e.dur_ns, rank(e), items[k]};
  }
  sort_runs(keyed);
  for (size_t k = 0; k < items.size(); ++k) items[k] = keyed[k].index;
}

// Host-side events whose enclosing op we need: runtime/driver calls and synchronisations.
bool needs_enclosing_op(EventKind k) {
  return k == EventKind::Runtime || k == EventKind::Driver || k == EventKind::Sync;
}

// Per host thread: a sweep over ops (and the calls inside them) in start order with a stack of
// open ops, giving each op its parent and each call its innermost enclosing op.
void nest_thread(const Trace& t, std::vector<uint32_t>& items, std::vector<int8_t>& eligible_by_name,
                 LaunchLinks& links) {
  auto before = [&](uint32_t a, uint32_t b) {
    const Event& ea = t.events[a];
    const Event& eb = t.events[b];
    if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
    const bool op_a = ea.kind == EventKind::HostOp, op_b = eb.kind == EventKind::HostOp;
    if (op_a != op_b) return op_a;   // an op opens before a call that starts with it
    if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;   // the outer op first
    return a < b;
  };
  // Recorded and imported events mostly come in this order already: check before sorting.
  if (!std::is_sorted(items.begin(), items.end(), before))
    sort_by_start(t, items, [](const Event& e) { return e.kind == EventKind::HostOp ? 0u : 1u; });
  std::vector<uint32_t> open;
  for (uint32_t i : items) {
    const Event& e = t.events[i];
    while (!open.empty() && t.events[open.back()].end_ns() <= e.start_ns &&
           !(t.events[open.back()].dur_ns == 0 && t.events[open.back()].start_ns == e.start_ns))
      open.pop_back();
    // An op still open but ending before this event ends only partly overlaps it: not a parent.
    uint32_t enclosing = kNoIndex;
    for (size_t k = open.size(); k-- > 0;) {
      if (t.events[open[k]].end_ns() >= e.end_ns()) {
        enclosing = open[k];
        break;
      }
    }
    if (e.kind == EventKind::HostOp) {
      links.parent_op[i] = enclosing;
      links.top_op[i] = enclosing == kNoIndex ? i : links.top_op[enclosing];
      if (eligible_by_name[e.name] < 0)
        eligible_by_name[e.name] = is_tensor_core_eligible_op(t.name_of(e)) ? 1 : 0;
      const bool eligible = eligible_by_name[e.name] == 1;
      const uint32_t inherited = enclosing == kNoIndex ? kNoIndex : links.eligible_root[enclosing];
      links.eligible_root[i] = inherited != kNoIndex ? inherited : (eligible ? i : kNoIndex);
      open.push_back(i);
    } else if (links.op_of[i] == kNoIndex) {
      links.op_of[i] = enclosing;
    }
  }
}

}  // namespace

LaunchLinks link_launches(const Trace& t) {
  const size_t n = t.events.size();
  LaunchLinks links;
  links.runtime_of.assign(n, kNoIndex);
  links.op_of.assign(n, kNoIndex);
  links.parent_op.assign(n, kNoIndex);
  links.top_op.assign(n, kNoIndex);
  links.eligible_root.assign(n, kNoIndex);

  std::vector<uint64_t> external_ids, correlations;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::HostOp && e.external_id != 0) external_ids.push_back(e.external_id);
    else if (needs_enclosing_op(e.kind) && e.kind != EventKind::Sync && e.correlation != 0)
      correlations.push_back(e.correlation);
  }
  IdIndex op_by_external_id(external_ids);
  IdIndex runtime_by_correlation(correlations);
  // Each host thread's ops and calls; a few threads, found by a linear search from the last one used.
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> host_items_by_thread;
  size_t last = 0;
  const auto items_of = [&](uint32_t tid) -> std::vector<uint32_t>& {
    if (last < host_items_by_thread.size() && host_items_by_thread[last].first == tid)
      return host_items_by_thread[last].second;
    last = 0;
    while (last < host_items_by_thread.size() && host_items_by_thread[last].first != tid) ++last;
    if (last == host_items_by_thread.size()) host_items_by_thread.emplace_back(tid, std::vector<uint32_t>());
    return host_items_by_thread[last].second;
  };
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (e.kind == EventKind::HostOp) {
      if (e.external_id != 0) {
        uint32_t& op = op_by_external_id[e.external_id];
        if (op == kNoIndex) op = i;   // the first op with an id keeps it
      }
      items_of(e.tid).push_back(i);
    } else if (needs_enclosing_op(e.kind)) {
      // Only runtime calls launch device work; a driver call with the same id never shadows one.
      if (e.correlation != 0 && e.kind != EventKind::Sync) {
        uint32_t& call = runtime_by_correlation[e.correlation];
        if (call == kNoIndex || (t.events[call].kind == EventKind::Driver && e.kind == EventKind::Runtime))
          call = i;
      }
      items_of(e.tid).push_back(i);
    }
  }
  std::vector<int8_t> eligible_by_name(t.strings.size(), -1);   // each op name classified once
  for (auto& [tid, items] : host_items_by_thread) {
    // The external id names the op exactly; time containment is the fallback for calls without one.
    for (uint32_t i : items) {
      const Event& e = t.events[i];
      if (e.kind != EventKind::HostOp && e.external_id != 0) {
        const uint32_t op = op_by_external_id.find(e.external_id);
        if (op != kNoIndex) links.op_of[i] = op;
      }
    }
    nest_thread(t, items, eligible_by_name, links);
  }

  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if ((e.on_device() || e.kind == EventKind::Sync) && e.correlation != 0) {
      const uint32_t call = runtime_by_correlation.find(e.correlation);
      if (call != kNoIndex && call != i) {
        links.runtime_of[i] = call;
        // A sync's own thread may be a stream row; the call it belongs to knows the op for sure.
        if (e.on_device() || links.op_of[call] != kNoIndex) links.op_of[i] = links.op_of[call];
      }
    }
    // A device event whose runtime call is missing may still carry the op's external id.
    if (e.on_device() && links.op_of[i] == kNoIndex && e.external_id != 0) {
      const uint32_t op = op_by_external_id.find(e.external_id);
      if (op != kNoIndex) links.op_of[i] = op;
    }
  }
  return links;
}

// Host ops of each thread in nesting order (outer before inner), for the bottom-up sums.
std::vector<uint32_t> host_ops_outer_first(const Trace& t) {
  std::vector<uint32_t> ops;
  for (uint32_t i = 0; i < t.events.size(); ++i)
    if (t.events[i].kind == EventKind::HostOp) ops.push_back(i);
  const auto outer_first = [&](uint32_t a, uint32_t b) {
    const Event& ea = t.events[a];
    const Event& eb = t.events[b];
    if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
    if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;
    return a < b;
  };
  // A total order: when the trace already lists its ops so (a live session's, many files), the
  // check is the whole cost.
  if (!std::is_sorted(ops.begin(), ops.end(), outer_first)) sort_by_start(t, ops, [](const Event&) { return 0u; });
  return ops;
}

}  // namespace gpuprof
