#include "gpuprof/analysis/critical_path.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "gpuprof/analysis/launch_stats.h"
#include "run_sort.h"

namespace gpuprof {

const char* path_cause_key(PathCause c) {
  static const char* const keys[kNumPathCauses] = {"cpu_bound",
                                                   "data_loading",
                                                   "gpu_compute_bound",
                                                   "gpu_communication_bound",
                                                   "gpu_kernel_kernel_overhead",
                                                   "gpu_kernel_launch_overhead"};
  return keys[static_cast<int>(c)];
}

namespace {

// Calls that return only when the device work they wait for is done (HTA's BLOCKING_SYNC_CALLS,
// and the driver's and HIP's equivalents).
bool is_blocking_sync_call(std::string_view n) {
  return n == "cudaStreamSynchronize" || n == "cudaDeviceSynchronize" || n == "cudaEventSynchronize" ||
         n == "cuStreamSynchronize" || n == "cuCtxSynchronize" || n == "cuEventSynchronize" ||
         n == "hipStreamSynchronize" || n == "hipDeviceSynchronize" || n == "hipEventSynchronize";
}

bool is_host_lane_kind(EventKind k) {
  return k == EventKind::HostOp || k == EventKind::UserRange || k == EventKind::Runtime || k == EventKind::Driver;
}

// One host thread's events, outer before inner (by start, the longer first at equal starts), each
// with the position of the one directly enclosing it.
struct HostThread {
  std::vector<uint32_t> events;
  std::vector<int64_t> starts;
  std::vector<uint32_t> parent;
  std::vector<int64_t> ends;   // sorted
};

// Where a walk stands in one host thread: how many of its starts, and of its ends, lie before the
// walk's time. The walk's time only goes back, so these only go down: O(1) amortised per move.
struct HostCursor {
  size_t starts = 0;
  size_t ends = 0;
};

// Activities of one device (or all), by end.
struct DeviceEnds {
  std::vector<uint32_t> events;
  std::vector<int64_t> ends;
};

// What a name is, worked out once per name: the walk asks for every piece of the chain.
constexpr uint8_t kKnown = 0x80, kDataLoaderName = 1, kBlockingSync = 2, kLaunchCall = 4, kCommKernel = 8;

class PathWalker {
 public:
  PathWalker(const Trace& t, const LaunchLinks& links) : t_(t), links_(links) {
    const size_t n = t.events.size();
    launched_.assign(n, kNoIndex);
    prev_on_stream_.assign(n, kNoIndex);
    // Each stream's activities; a few streams, found by a linear search from the last one used.
    std::vector<std::pair<std::pair<int, uint32_t>, std::vector<uint32_t>>> streams;
    size_t last = 0;
    std::vector<uint32_t> activities;
    for (uint32_t i = 0; i < n; ++i) {
      const Event& e = t.events[i];
      if (!e.on_device() || e.dur_ns <= 0) continue;
      const std::pair<int, uint32_t> key{e.device, e.tid};
      if (last >= streams.size() || streams[last].first != key) {
        last = 0;
        while (last < streams.size() && streams[last].first != key) ++last;
        if (last == streams.size()) streams.emplace_back(key, std::vector<uint32_t>());
      }
      streams[last].second.push_back(i);
      activities.push_back(i);
      const uint32_t call = i < links.runtime_of.size() ? links.runtime_of[i] : kNoIndex;
      if (call != kNoIndex && launched_[call] == kNoIndex) launched_[call] = i;
    }
    auto by_start = [&](uint32_t a, uint32_t b) { return start_before(a, b); };
    for (auto& [key, items] : streams) {
      sort_runs(items, by_start);
      for (size_t k = 1; k < items.size(); ++k) prev_on_stream_[items[k]] = items[k - 1];
    }
    all_ = by_end(activities);
    DeviceEnds* d = nullptr;
    int last_device = 0;
    for (size_t k = 0; k < all_.events.size(); ++k) {   // each device's, still by end
      const uint32_t i = all_.events[k];
      const int device = t.events[i].device;
      if (d == nullptr || device != last_device) {
        d = &device_ends_[device];
        last_device = device;
      }
      d->events.push_back(i);
      d->ends.push_back(all_.ends[k]);
    }
    name_flags_.assign(t.strings.size(), 0);
    top_slot_.assign(t.strings.size(), kNoIndex);
    index_host_lane();
  }

  StepCriticalPath walk(const StepBreakdown& step) const;

 private:
  bool start_before(uint32_t a, uint32_t b) const {
    const Event& ea = t_.events[a];
    const Event& eb = t_.events[b];
    if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
    if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;
    return a < b;
  }

  DeviceEnds by_end(const std::vector<uint32_t>& items) const {
    std::vector<std::pair<int64_t, uint32_t>> keyed;
    keyed.reserve(items.size());
    for (uint32_t i : items) keyed.emplace_back(t_.events[i].end_ns(), i);
    sort_runs(keyed);
    DeviceEnds d;
    d.ends.reserve(keyed.size());
    d.events.reserve(keyed.size());
    for (const auto& [end, i] : keyed) {
      d.ends.push_back(end);
      d.events.push_back(i);
    }
    return d;
  }

  uint8_t flags(uint32_t name) const {
    uint8_t& f = name_flags_[name];
    if (!(f & kKnown)) {
      const std::string& s = t_.strings.at(name);
      f = kKnown | (is_dataloader_name(s) ? kDataLoaderName : 0) | (is_blocking_sync_call(s) ? kBlockingSync : 0) |
          (is_launch_call(s) ? kLaunchCall : 0) | (is_communication_kernel_name(s) ? kCommKernel : 0);
    }
    return f;
  }

  // The host lane: the threads that hold step markers or launch device work (the training loop's
  // thread and autograd's), as one timeline; the thread with most host events when none does.
  void index_host_lane() {
    std::vector<uint32_t> tids;   // a few threads: a linear search is the cheapest
    size_t last = 0;              // the position of the thread found last: mostly the next one's too
    const auto position = [&](uint32_t tid) {
      if (last < tids.size() && tids[last] == tid) return last;
      const size_t k = size_t(std::find(tids.begin(), tids.end(), tid) - tids.begin());
      if (k < tids.size()) last = k;
      return k;
    };
    auto add_tid = [&](uint32_t tid) {
      if (position(tid) == tids.size()) tids.push_back(tid);
    };
    for (uint32_t i = 0; i < t_.events.size(); ++i) {
      const Event& e = t_.events[i];
      if (e.kind == EventKind::StepMarker) add_tid(e.tid);
      else if ((e.kind == EventKind::Runtime || e.kind == EventKind::Driver) && launched_[i] != kNoIndex)
        add_tid(e.tid);
    }
    if (tids.empty()) {
      std::unordered_map<uint32_t, size_t> counts;
      for (const Event& e : t_.events)
        if (is_host_lane_kind(e.kind) && e.dur_ns > 0) ++counts[e.tid];
      if (counts.empty()) return;
      auto most = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second < b.second : a.first > b.first;
      });
      tids.push_back(most->first);
    }
    lane_.resize(tids.size());
    for (uint32_t i = 0; i < t_.events.size(); ++i) {
      const Event& e = t_.events[i];
      if (!is_host_lane_kind(e.kind) || e.dur_ns <= 0) continue;
      const size_t k = position(e.tid);
      if (k < tids.size()) lane_[k].events.push_back(i);
    }
    auto by_start = [&](uint32_t a, uint32_t b) { return start_before(a, b); };
    for (HostThread& h : lane_) {
      sort_runs(h.events, by_start);
      h.parent.assign(h.events.size(), kNoIndex);
      h.starts.reserve(h.events.size());
      h.ends.reserve(h.events.size());
      // The ends as the events leave the stack of open ones: for nested events that is their
      // order already, so the sort below is only a check.
      std::vector<uint32_t> open;   // positions of the enclosing events
      const auto close = [&] {
        h.ends.push_back(t_.events[h.events[open.back()]].end_ns());
        open.pop_back();
      };
      for (uint32_t k = 0; k < h.events.size(); ++k) {
        const Event& e = t_.events[h.events[k]];
        h.starts.push_back(e.start_ns);
        while (!open.empty() && t_.events[h.events[open.back()]].end_ns() <= e.start_ns) close();
        if (!open.empty()) h.parent[k] = open.back();
        open.push_back(k);
      }
      while (!open.empty()) close();
      sort_runs(h.ends);
    }
  }

  std::vector<HostCursor> cursors_at(int64_t t) const {
    std::vector<HostCursor> c(lane_.size());
    for (size_t k = 0; k < lane_.size(); ++k) {
      const HostThread& h = lane_[k];
      c[k].starts = size_t(std::lower_bound(h.starts.begin(), h.starts.end(), t) - h.starts.begin());
      c[k].ends = size_t(std::lower_bound(h.ends.begin(), h.ends.end(), t) - h.ends.begin());
    }
    return c;
  }

  // Moves the cursors back to t (never forward: the walk's time only decreases).
  void retreat(int64_t t, std::vector<HostCursor>& c) const {
    for (size_t k = 0; k < lane_.size(); ++k) {
      const HostThread& h = lane_[k];
      while (c[k].starts > 0 && h.starts[c[k].starts - 1] >= t) --c[k].starts;
      while (c[k].ends > 0 && h.ends[c[k].ends - 1] >= t) --c[k].ends;
    }
  }

  // The innermost lane event open at t (started before t, ends at or after it): the latest-starting
  // of the threads' innermost ones. kNoIndex when the lane is between operators.
  uint32_t innermost(int64_t t, const std::vector<HostCursor>& c, const HostThread** thread, uint32_t* pos) const {
    uint32_t best = kNoIndex;
    for (size_t j = 0; j < lane_.size(); ++j) {
      const HostThread& h = lane_[j];
      if (c[j].starts == 0) continue;
      uint32_t k = uint32_t(c[j].starts - 1);
      while (k != kNoIndex && t_.events[h.events[k]].end_ns() < t) k = h.parent[k];
      if (k == kNoIndex) continue;
      if (best == kNoIndex || t_.events[h.events[k]].start_ns > t_.events[best].start_ns) {
        best = h.events[k];
        *thread = &h;
        *pos = k;
      }
    }
    return best;
  }

  // The latest start or end of a lane event before t: the innermost open event is the same since.
  int64_t previous_boundary(const std::vector<HostCursor>& c, int64_t floor_ns) const {
    int64_t b = floor_ns;
    for (size_t k = 0; k < lane_.size(); ++k) {
      const HostThread& h = lane_[k];
      if (c[k].starts > 0) b = std::max(b, h.starts[c[k].starts - 1]);
      if (c[k].ends > 0) b = std::max(b, h.ends[c[k].ends - 1]);
    }
    return b;
  }

  // Whether the time inside this host event is the loop waiting for a batch: the event or one
  // enclosing it is the DataLoader's range.
  bool in_dataloader(const HostThread& h, uint32_t pos) const {
    for (uint32_t k = pos; k != kNoIndex; k = h.parent[k])
      if (flags(t_.events[h.events[k]].name) & kDataLoaderName) return true;
    return false;
  }

  // The device activity a host call at t was blocked on: for a synchronisation, the latest to end
  // while it waited; for a call that is not an asynchronous launch (cudaMemcpy), its own activity
  // when that ended inside it. kNoIndex when the call waited on nothing.
  uint32_t waited_on(uint32_t call, int64_t t) const {
    const Event& c = t_.events[call];
    if (c.kind != EventKind::Runtime && c.kind != EventKind::Driver) return kNoIndex;
    const uint8_t f = flags(c.name);
    if (f & kBlockingSync) {
      auto it = std::upper_bound(all_.ends.begin(), all_.ends.end(), t);
      if (it == all_.ends.begin()) return kNoIndex;
      const size_t k = size_t(it - all_.ends.begin()) - 1;
      return all_.ends[k] > c.start_ns ? all_.events[k] : kNoIndex;
    }
    const uint32_t own = launched_[call];
    if (own == kNoIndex || (f & kLaunchCall)) return kNoIndex;
    const int64_t end = t_.events[own].end_ns();
    return end <= t && end > c.start_ns ? own : kNoIndex;
  }

  // The activity on `device`, off `stream`, that ended last within [lo, hi].
  uint32_t latest_other_stream(int device, uint32_t stream, int64_t lo, int64_t hi) const {
    auto d = device_ends_.find(device);
    if (d == device_ends_.end()) return kNoIndex;
    const DeviceEnds& de = d->second;
    size_t k = size_t(std::upper_bound(de.ends.begin(), de.ends.end(), hi) - de.ends.begin());
    while (k > 0 && de.ends[k - 1] >= lo) {
      --k;
      if (t_.events[de.events[k]].tid != stream) return de.events[k];
    }
    return kNoIndex;
  }

  const Trace& t_;
  const LaunchLinks& links_;
  std::vector<uint32_t> launched_;         // runtime call -> the (first) activity it launched
  std::vector<uint32_t> prev_on_stream_;   // activity -> the one before it on its stream
  std::map<int, DeviceEnds> device_ends_;
  DeviceEnds all_;
  std::vector<HostThread> lane_;
  mutable std::vector<uint8_t> name_flags_;   // by string id: kKnown | what the name is
  mutable std::vector<uint32_t> top_slot_;    // by string id: a walk's row of that name (scratch)
};

StepCriticalPath PathWalker::walk(const StepBreakdown& step) const {
  StepCriticalPath p;
  p.step = step.step;
  p.start_ns = step.start_ns;
  p.end_ns = step.end_ns;
  const int64_t s = step.start_ns;
  std::vector<PathSegment> back;   // from the end to the start
  auto add = [&](int64_t from, int64_t to, PathCause cause, uint32_t event) {
    from = std::max(from, s);
    if (to > from) back.push_back({from, to, cause, event});
  };
  int64_t t = step.end_ns;
  std::vector<HostCursor> cursors = cursors_at(t);
  uint32_t act = kNoIndex;   // the device activity the walk is in; kNoIndex: on the host lane
  if (step.end_ns > step.host_end_ns) {   // the device's work outlasted the host's step
    auto it = std::upper_bound(all_.ends.begin(), all_.ends.end(), t);
    if (it != all_.ends.begin() && *(it - 1) > s) act = all_.events[size_t(it - all_.ends.begin()) - 1];
  }
  while (t > s) {
    if (act == kNoIndex) {
      retreat(t, cursors);
      const HostThread* h = nullptr;
      uint32_t pos = kNoIndex;
      const uint32_t op = innermost(t, cursors, &h, &pos);
      const uint32_t waited = op == kNoIndex ? kNoIndex : waited_on(op, t);
      if (waited != kNoIndex) {
        add(t_.events[waited].end_ns(), t, PathCause::CpuBound, op);
        t = t_.events[waited].end_ns();
        act = waited;
        continue;
      }
      const int64_t b = previous_boundary(cursors, s);
      add(b, t, op != kNoIndex && in_dataloader(*h, pos) ? PathCause::DataLoading : PathCause::CpuBound, op);
      t = b;
      continue;
    }
    const Event& a = t_.events[act];
    if (t > a.end_ns()) {   // the walk reached the device at an end beyond this activity's
      add(a.end_ns(), t, PathCause::CpuBound, kNoIndex);
      t = a.end_ns();
    }
    add(a.start_ns, t,
        (flags(a.name) & kCommKernel) ? PathCause::GpuCommunicationBound : PathCause::GpuComputeBound, act);
    t = a.start_ns;
    if (t <= s) break;
    const uint32_t call = act < links_.runtime_of.size() ? links_.runtime_of[act] : kNoIndex;
    const uint32_t prev = prev_on_stream_[act];
    const bool call_first = call != kNoIndex && t_.events[call].start_ns <= t;
    if (call_first && (prev == kNoIndex || t_.events[prev].end_ns() <= t_.events[call].start_ns)) {
      // Launched onto an idle stream: the launch set the start.
      add(t_.events[call].start_ns, t, PathCause::GpuKernelLaunchOverhead, kNoIndex);
      t = t_.events[call].start_ns;
      act = kNoIndex;
      continue;
    }
    if (prev != kNoIndex) {   // queued behind the activity before it on its stream...
      int64_t prev_end = t_.events[prev].end_ns();
      uint32_t next = prev;
      if (t - prev_end > kKernelKernelDelayThresholdNs) {   // ...unless it waited on another stream
        const uint32_t other = latest_other_stream(a.device, a.tid, prev_end, t);
        if (other != kNoIndex) {
          next = other;
          prev_end = t_.events[other].end_ns();
        }
      }
      if (prev_end < t) add(prev_end, t, PathCause::GpuKernelKernelOverhead, kNoIndex);
      t = std::min(t, prev_end);
      act = next;
      continue;
    }
    act = kNoIndex;   // nothing before it on the device and no launch recorded: back to the host
  }
  p.segments.assign(back.rbegin(), back.rend());
  // Time by (name, kind): a row per pair, found through the name's slot (a name seen under two
  // kinds, rarely, by a search of the rows); the slots are cleared again for the next step.
  std::vector<PathTopRow> top;
  for (const PathSegment& g : p.segments) {
    p.ns[static_cast<int>(g.cause)] += g.end_ns - g.start_ns;
    if (g.event == kNoIndex) continue;
    const Event& e = t_.events[g.event];
    if ((e.kind == EventKind::Runtime || e.kind == EventKind::Driver) && (flags(e.name) & kLaunchCall))
      p.launch_calls_ns += g.end_ns - g.start_ns;
    uint32_t& slot = top_slot_[e.name];
    uint32_t row = slot;
    if (row != kNoIndex && top[row].kind != e.kind) {
      row = 0;
      while (row < top.size() && !(top[row].name == e.name && top[row].kind == e.kind)) ++row;
      if (row == top.size()) row = kNoIndex;
    }
    if (row == kNoIndex) {
      row = uint32_t(top.size());
      top.push_back({e.name, e.kind, 0});
      if (slot == kNoIndex) slot = row;
    }
    top[row].ns += g.end_ns - g.start_ns;
  }
  for (const PathTopRow& r : top) top_slot_[r.name] = kNoIndex;
  std::sort(top.begin(), top.end(), [&](const PathTopRow& x, const PathTopRow& y) {
    if (x.ns != y.ns) return x.ns > y.ns;
    if (x.name != y.name) return t_.strings.at(x.name) < t_.strings.at(y.name);
    return x.kind < y.kind;
  });
  if (top.size() > kPathTopRows) top.resize(kPathTopRows);
  p.top = std::move(top);
  return p;
}

}  // namespace

std::vector<StepCriticalPath> critical_paths(const Trace& trace, const LaunchLinks& links,
                                             const BreakdownResult& steps) {
  std::vector<StepCriticalPath> out;
  if (steps.steps.empty()) return out;
  const PathWalker walker(trace, links);
  out.reserve(steps.steps.size());
  for (const StepBreakdown& s : steps.steps) out.push_back(walker.walk(s));
  return out;
}

namespace {

bool same_piece(const Trace& t, const PathPiece& a, const PathSegment& b) {
  if (a.cause != b.cause) return false;
  if (a.event == kNoIndex || b.event == kNoIndex) return a.event == b.event;
  const Event& x = t.events[a.event];
  const Event& y = t.events[b.event];
  return x.name == y.name && x.kind == y.kind && x.device == y.device && x.tid == y.tid;
}

}  // namespace

PathPieces path_pieces(const Trace& trace, const StepCriticalPath& path, size_t max_pieces) {
  PathPieces out;
  for (const PathSegment& g : path.segments) {
    if (!out.pieces.empty() && out.pieces.back().end_ns == g.start_ns && same_piece(trace, out.pieces.back(), g)) {
      out.pieces.back().end_ns = g.end_ns;
      ++out.merged;
      continue;
    }
    out.pieces.push_back({g.start_ns, g.end_ns, g.cause, g.event});
  }
  if (out.pieces.size() <= max_pieces) return out;
  // The max_pieces longest, the earlier first among equal lengths: a selection, not a sort (a
  // kernel-bound step has tens of thousands of pieces for the 2,000 kept).
  std::vector<std::pair<int64_t, uint32_t>> order;   // (-length, position): the kept ones first
  order.reserve(out.pieces.size());
  for (size_t k = 0; k < out.pieces.size(); ++k)
    order.emplace_back(out.pieces[k].start_ns - out.pieces[k].end_ns, uint32_t(k));
  if (max_pieces > 0) std::nth_element(order.begin(), order.begin() + ptrdiff_t(max_pieces - 1), order.end());
  for (size_t k = max_pieces; k < order.size(); ++k) out.cut_ns -= order[k].first;
  order.resize(max_pieces);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<PathPiece> kept;
  kept.reserve(order.size());
  for (const auto& [neg_len, k] : order) kept.push_back(out.pieces[k]);
  out.cut = out.pieces.size() - kept.size();
  out.pieces = std::move(kept);
  return out;
}

std::string path_piece_name(const Trace& trace, const PathPiece& piece) {
  if (piece.event != kNoIndex) return trace.strings.at(trace.events[piece.event].name);
  switch (piece.cause) {
    case PathCause::GpuKernelLaunchOverhead: return "launch overhead";
    case PathCause::GpuKernelKernelOverhead: return "kernel-kernel gap";
    case PathCause::DataLoading: return "waiting for a batch";
    default: return "host between operators";
  }
}

std::string path_piece_place(const Trace& trace, const PathPiece& piece) {
  if (piece.event == kNoIndex) return "";
  const Event& e = trace.events[piece.event];
  if (e.on_device()) return "GPU " + std::to_string(e.device) + " stream " + std::to_string(e.tid);
  return "host thread " + std::to_string(e.tid);
}

}  // namespace gpuprof
