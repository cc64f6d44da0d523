// Step segmentation and the priority sweep. The rules are those of the old TensorBoard plugin's
// overview page (docs/breakdown.md), so that users can compare numbers; each is commented with why.
#include "gpuprof/analysis/breakdown.h"

#include <cstdint>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <unordered_map>

#include "gpuprof/analysis/intervals.h"

namespace gpuprof {

const char* category_name(Category c) {
  static const char* names[kNumCategories] = {"Kernel",  "Memcpy",     "Memset",   "Communication",
                                              "Runtime", "DataLoader", "CPU Exec", "Other"};
  return names[static_cast<int>(c)];
}

const char* category_key(Category c) {
  static const char* keys[kNumCategories] = {"kernel",  "memcpy",     "memset",   "communication",
                                             "runtime", "dataloader", "cpu_exec", "other"};
  return keys[static_cast<int>(c)];
}

static bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

static bool contains_ci(std::string_view s, std::string_view needle) {
  auto it = std::search(s.begin(), s.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  });
  return it != s.end();
}

bool is_dataloader_name(std::string_view name) {
  // torch's DataLoader opens `enumerate(DataLoader)#<IterClass>.__next__` on every next().
  return (starts_with(name, "enumerate(DataLoader)#") && name.find(".__next__") != std::string_view::npos) ||
         starts_with(name, "enumerate(DataPipe)#");
}

bool is_communication_op_name(std::string_view name) {
  // The plugin's list was nccl:/gloo: collectives; torch >= 1.13 names them through c10d and
  // record_param_comms, and functional collectives through (_)c10d_functional.
  return starts_with(name, "nccl:") || starts_with(name, "gloo:") || starts_with(name, "c10d::") ||
         starts_with(name, "c10d_functional::") || starts_with(name, "_c10d_functional::") ||
         name == "record_param_comms" || starts_with(name, "mpi:") || starts_with(name, "ucc:");
}

bool is_communication_kernel_name(std::string_view name) {
  // NCCL and RCCL kernels (ncclKernel_AllReduce_..., ncclDevKernel_...), and NVSHMEM collectives.
  return contains_ci(name, "nccl") || contains_ci(name, "rccl") || contains_ci(name, "nvshmem");
}

bool event_category(const Trace& trace, const Event& e, Category* out) {
  switch (e.kind) {
    case EventKind::Kernel:
      *out = is_communication_kernel_name(trace.name_of(e)) ? Category::Communication : Category::Kernel;
      return true;
    case EventKind::Memcpy: *out = Category::Memcpy; return true;
    case EventKind::Memset: *out = Category::Memset; return true;
    case EventKind::Runtime: *out = Category::Runtime; return true;
    case EventKind::HostOp:
    case EventKind::UserRange: {
      const std::string& name = trace.name_of(e);
      if (is_step_marker_name(name)) return false;
      if (is_dataloader_name(name)) *out = Category::DataLoader;
      else if (is_communication_op_name(name)) *out = Category::Communication;
      else *out = Category::CpuExec;
      return true;
    }
    default: return false;
  }
}

namespace {

struct HostStep {
  int64_t number;
  int64_t start;
  int64_t end;
  bool numbered = true;   // false: the name carried no usable number (numbered by position)
};

// Step markers that would cut zero-length or overlapping steps, made one step each: every marker of
// one step number (a loop that called prof.step() twice, a trace written by two profilers, copies
// of one event) becomes one step over all of them; a marker inside another step's host range
// (a nested profiler) is dropped. Both are counted, for the report to say so. Sorted by start.
void merge_step_markers(std::vector<HostStep>& steps, BreakdownResult& result) {
  std::sort(steps.begin(), steps.end(), [](const HostStep& a, const HostStep& b) {
    if (a.number != b.number) return a.number < b.number;
    if (a.numbered != b.numbered) return a.numbered;   // a number's markers side by side
    return a.start < b.start;
  });
  size_t out = 0;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i + 1;
    HostStep merged = steps[i];
    while (j < steps.size() && merged.numbered && steps[j].numbered && steps[j].number == merged.number) {
      merged.start = std::min(merged.start, steps[j].start);
      merged.end = std::max(merged.end, steps[j].end);
      ++j;
    }
    if (j - i > 1) result.duplicate_step_markers += static_cast<int>(j - i);
    steps[out++] = merged;
    i = j;
  }
  steps.resize(out);
  std::sort(steps.begin(), steps.end(), [](const HostStep& a, const HostStep& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;   // an outer step before its inner ones
  });
  out = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const HostStep& outer = steps[out > 0 ? out - 1 : 0];
    if (out > 0 && steps[i].start < outer.end && steps[i].end <= outer.end) {   // inside the one before
      ++result.nested_step_markers;
      continue;
    }
    steps[out++] = steps[i];
  }
  steps.resize(out);
  // A marker whose name holds no step number (ProfilerStep#abc) is a step all the same (its range
  // is real): numbered after the step before it, or, first, before the first numbered one.
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].numbered) continue;
    if (i > 0) {
      steps[i].number = steps[i - 1].number + 1;
      continue;
    }
    int64_t number = 0;
    for (size_t j = 1; j < steps.size(); ++j)
      if (steps[j].numbered) {
        number = std::max<int64_t>(0, steps[j].number - int64_t(j));
        break;
      }
    steps[i].number = number;
  }
}

// Per name id, the category (or -1): classifying by name once instead of once per event keeps the
// sweep's string work proportional to the number of distinct names.
std::vector<int8_t> categories_by_event(const Trace& trace) {
  std::vector<int8_t> by_name_host(trace.strings.size(), -2), by_name_kernel(trace.strings.size(), -2);
  std::vector<int8_t> out(trace.events.size(), -1);
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const Event& e = trace.events[i];
    std::vector<int8_t>* cache = nullptr;
    if (e.kind == EventKind::HostOp || e.kind == EventKind::UserRange) cache = &by_name_host;
    else if (e.kind == EventKind::Kernel) cache = &by_name_kernel;
    if (cache && (*cache)[e.name] != -2) {
      out[i] = (*cache)[e.name];
      continue;
    }
    Category c;
    int8_t v = event_category(trace, e, &c) ? static_cast<int8_t>(c) : -1;
    if (cache) (*cache)[e.name] = v;
    out[i] = v;
  }
  return out;
}

// The start of the first runtime or driver call with each correlation id: ids are mostly a counter,
// then a vector indexed by id holds the calls (no node per call); otherwise a hash map.
class LaunchTimes {
 public:
  explicit LaunchTimes(const Trace& t) : t_(t) {
    uint64_t max_id = 0, calls = 0;
    for (const Event& e : t.events)
      if (is_call(e)) {
        max_id = std::max(max_id, e.correlation);
        ++calls;
      }
    dense_ = max_id <= 4 * calls + 4096;
    if (dense_) call_by_id_.assign(size_t(max_id) + 1, kNoIndex);
    else ts_by_id_.reserve(calls);
    for (uint32_t k = 0; k < t.events.size(); ++k) {
      const Event& e = t.events[k];
      if (!is_call(e)) continue;
      if (!dense_) ts_by_id_.emplace(e.correlation, e.start_ns);
      else if (call_by_id_[size_t(e.correlation)] == kNoIndex) call_by_id_[size_t(e.correlation)] = k;
    }
  }
  // The start of the call that launched device event `e`, when there is one.
  bool find(const Event& e, int64_t* ts) const {
    if (e.correlation == 0) return false;
    if (dense_) {
      const uint32_t c = e.correlation < call_by_id_.size() ? call_by_id_[size_t(e.correlation)] : kNoIndex;
      if (c != kNoIndex) *ts = t_.events[c].start_ns;
      return c != kNoIndex;
    }
    const auto it = ts_by_id_.find(e.correlation);
    if (it != ts_by_id_.end()) *ts = it->second;
    return it != ts_by_id_.end();
  }

 private:
  static bool is_call(const Event& e) {
    return (e.kind == EventKind::Runtime || e.kind == EventKind::Driver) && e.correlation != 0;
  }
  const Trace& t_;
  bool dense_ = false;
  std::vector<uint32_t> call_by_id_;
  std::unordered_map<uint64_t, int64_t> ts_by_id_;
};

}  // namespace

BreakdownResult compute_breakdown(const Trace& trace, const BreakdownOptions& opts) {
  BreakdownResult result;

  // 1. Host steps: ProfilerStep#N ranges, or the whole host span as one step.
  std::vector<HostStep> host_steps;
  int64_t host_lo = INT64_MAX, host_hi = INT64_MIN;
  for (const Event& e : trace.events) {
    if (e.kind == EventKind::StepMarker) {
      const std::string& name = trace.name_of(e);
      int64_t n = step_number_from_name(name);
      if (n < 0 && result.malformed_step_markers++ == 0) result.malformed_step_example = name;
      host_steps.push_back({n < 0 ? int64_t(host_steps.size()) : n, e.start_ns, e.end_ns(), n >= 0});
    } else if (!e.on_device() && e.kind != EventKind::GpuUserRange && e.kind != EventKind::Sync &&
               e.kind != EventKind::Overhead && e.kind != EventKind::Other && e.kind != EventKind::InputStage) {
      host_lo = std::min(host_lo, e.start_ns);
      host_hi = std::max(host_hi, e.end_ns());
    }
  }
  result.had_step_markers = !host_steps.empty();
  if (host_steps.empty()) {
    if (host_lo > host_hi) return result;   // no host activity at all: nothing to segment
    host_steps.push_back({0, host_lo, host_hi});
  }
  merge_step_markers(host_steps, result);

  // 2. Attribute device work to the step whose host range holds the runtime call that launched it.
  const LaunchTimes launch_times(trace);

  const size_t n = host_steps.size();
  std::vector<int64_t> device_count(n, 0), device_end(n, INT64_MIN);
  int64_t attributed = 0;
  int64_t first_device_start = INT64_MAX;   // the first step's earliest device work
  std::vector<int64_t> unattributed_ends;   // device work launched outside every step
  size_t after = 0;   // the first step starting after the last launch: mostly the next one's too
  for (const Event& e : trace.events) {
    if (!e.on_device()) continue;
    size_t i = n;   // the step whose host range holds the launch; n: none
    bool skewed = false;
    int64_t ts = 0;
    if (launch_times.find(e, &ts)) {
      if (!((after == 0 || host_steps[after - 1].start <= ts) && (after == n || ts < host_steps[after].start)))
        after = static_cast<size_t>(std::upper_bound(host_steps.begin(), host_steps.end(), ts,
                                                     [](int64_t t, const HostStep& h) { return t < h.start; }) -
                                    host_steps.begin());
      if (after > 0 && ts < host_steps[after - 1].end) i = after - 1;
      // Clock skew: started long after (or before) its launch. It counts as its step's device work
      // but does not move the step's end (a kernel 1000 s late made a 1000 s step), nor the first
      // step's start; counted for the report.
      int64_t lag = 0;
      if (__builtin_sub_overflow(e.start_ns, ts, &lag)) lag = e.start_ns > ts ? INT64_MAX : -INT64_MAX;
      lag = std::max(lag, -INT64_MAX);
      if (lag > kMaxLaunchLagNs || lag < -kMaxLaunchLeadNs) {
        skewed = true;
        ++result.skewed_device_events;
        if (std::abs(lag) > std::abs(result.max_launch_skew_ns)) result.max_launch_skew_ns = lag;
      }
    }
    if (i == n) {
      if (!skewed) unattributed_ends.push_back(e.end_ns());
      continue;
    }
    ++device_count[i];
    ++attributed;
    if (skewed) continue;
    device_end[i] = std::max(device_end[i], e.end_ns());
    if (i == 0) first_device_start = std::min(first_device_start, e.start_ns);
  }

  // 3. Drop steps the profiler did not see finish on the device. Only when there is device work at
  //    all: a CPU-only run keeps every step.
  size_t keep = n;
  if (attributed > 0) {
    while (keep > 0 && device_count[keep - 1] == 0) --keep;
    result.dropped_trailing_steps = static_cast<int>(n - keep);
    // The profiler likely stopped before the last step's kernels ran.
    if (opts.drop_incomplete_last_step && keep >= 2 &&
        double(device_count[keep - 1]) < 0.8 * double(device_count[keep - 2])) {
      --keep;
      result.dropped_incomplete_last = true;
    }
  }

  // 4. Step boundaries: device work can run past the host range of its step. The first step has
  //    no step before it, but device work launched before it (outside every step) can still be
  //    running when it starts: as the plugin does, the first step starts where the last of that work
  //    ends, if it ends after the step's host start and before the step's own device work begins.
  result.steps.resize(keep);
  int64_t prev_end = INT64_MIN;
  if (keep > 0 && device_count[0] > 0)
    for (int64_t end : unattributed_ends)
      if (end < first_device_start) prev_end = std::max(prev_end, end);
  for (size_t i = 0; i < keep; ++i) {
    StepBreakdown& s = result.steps[i];
    s.step = host_steps[i].number;
    s.host_start_ns = host_steps[i].start;
    s.host_end_ns = host_steps[i].end;
    s.device_activities = device_count[i];
    s.start_ns = std::max(prev_end, host_steps[i].start);
    s.end_ns = std::max(host_steps[i].end, device_end[i]);
    if (s.end_ns < s.start_ns) s.end_ns = s.start_ns;   // a step swallowed by its predecessor's kernels
    prev_end = s.end_ns;
  }
  if (keep == 0) return result;

  // 5. Per category, the union of its intervals over the whole trace.
  std::array<IntervalList, kNumCategories> by_cat;
  const std::vector<int8_t> cats = categories_by_event(trace);
  for (size_t i = 0; i < trace.events.size(); ++i) {
    if (cats[i] < 0) continue;
    const Event& e = trace.events[i];
    by_cat[cats[i]].push_back({e.start_ns, e.end_ns()});
  }
  for (auto& list : by_cat) merge_intervals(list);

  // 6. Priority sweep inside each step: each category takes what is still free of its union.
  for (StepBreakdown& s : result.steps) {
    IntervalList taken;
    int64_t assigned = 0;
    for (int c = 0; c < kNumCategories - 1; ++c) {
      IntervalList mine = clip(by_cat[c], s.start_ns, s.end_ns);
      if (mine.empty()) continue;
      const int64_t free_part = total_length(subtract(mine, taken));
      s.ns[c] = free_part;
      assigned += free_part;
      taken = unite(taken, mine);
    }
    s.ns[static_cast<int>(Category::Other)] = s.total_ns() - assigned;
  }
  return result;
}

}  // namespace gpuprof
