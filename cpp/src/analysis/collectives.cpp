// Collectives per kind and process group (collectives.h; docs/metrics.md, "Collectives").
#include "gpuprof/analysis/collectives.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>
#include <unordered_map>

#include "gpuprof/analysis/intervals.h"

namespace gpuprof {

namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string collective_kind(std::string_view name) {
  name.remove_prefix(backend_collective_prefix_length(name));
  std::string s = lower(name);
  while (!s.empty() && s.front() == '_') s.erase(s.begin());
  while (!s.empty() && s.back() == '_') s.pop_back();
  if (s.empty() || s == "wait" || s == "init") return "";
  // The longer spellings first: "reduce_scatter" before "reduce", "allgather" before "gather".
  struct Rule {
    std::string_view prefix;
    const char* kind;
  };
  static constexpr Rule rules[] = {
      {"allreduce", "all_reduce"},
      {"all_reduce", "all_reduce"},
      {"allgather", "all_gather"},
      {"all_gather", "all_gather"},
      {"reduce_scatter", "reduce_scatter"},
      {"reducescatter", "reduce_scatter"},
      {"alltoall", "all_to_all"},
      {"all_to_all", "all_to_all"},
      {"broadcast", "broadcast"},
      {"barrier", "barrier"},
      {"recv", "recv"},
      {"send", "send"},
      {"gather", "gather"},
      {"scatter", "scatter"},
  };
  for (const Rule& r : rules)
    if (starts_with(s, r.prefix)) return r.kind;
  if (s == "reduce") return "reduce";
  return std::string(name);
}

int64_t dtype_bytes(std::string_view dtype) {
  // torch's ScalarType names (record_param_comms' dtype) and the C++ type names Kineto writes as
  // an input's type (a gloo range's "Input type").
  static const std::unordered_map<std::string, int64_t> sizes = {
      {"float", 4},
      {"double", 8},
      {"half", 2},
      {"c10::half", 2},
      {"bfloat16", 2},
      {"c10::bfloat16", 2},
      {"long", 8},
      {"long int", 8},
      {"int64_t", 8},
      {"int", 4},
      {"short", 2},
      {"short int", 2},
      {"char", 1},
      {"signed char", 1},
      {"byte", 1},
      {"unsigned char", 1},
      {"bool", 1},
      {"complexhalf", 4},
      {"complexfloat", 8},
      {"c10::complex<float>", 8},
      {"complexdouble", 16},
      {"c10::complex<double>", 16},
      {"uint16", 2},
      {"uint32", 4},
      {"uint64", 8},
      {"float8_e4m3fn", 1},
      {"float8_e5m2", 1},
      {"float8_e4m3fnuz", 1},
      {"float8_e5m2fnuz", 1},
      {"float8_e8m0fnu", 1},
  };
  const auto it = sizes.find(lower(dtype));
  return it == sizes.end() ? -1 : it->second;
}

double bus_bandwidth_factor(std::string_view kind, int64_t n) {
  if (n < 1) return -1.0;
  const double f = double(n - 1) / double(n);
  if (kind == "all_reduce") return 2.0 * f;
  if (kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all") return f;
  if (kind == "broadcast" || kind == "reduce" || kind == "send" || kind == "recv") return 1.0;
  return -1.0;
}

double algbw_gbps(int64_t bytes, int64_t time_ns) {
  return bytes >= 0 && time_ns > 0 ? double(bytes) / double(time_ns) : -1.0;   // bytes/ns = GB/s
}

double busbw_gbps(std::string_view kind, int64_t bytes, int64_t time_ns, int64_t group_size) {
  const double alg = algbw_gbps(bytes, time_ns);
  const double factor = bus_bandwidth_factor(kind, group_size);
  return alg >= 0.0 && factor >= 0.0 ? alg * factor : -1.0;
}

namespace {

struct Candidate {
  uint32_t event;
  const CollectiveInfo* info;   // may be null
  std::string kind;
};

// nccl-tests' size S of one call, in elements: the buffer an all_reduce, broadcast or reduce works
// on; the whole gathered output of an all_gather (n x what each rank sends); the whole input of a
// reduce_scatter and of an all_to_all. torch records in and out counts on this rank: S is the
// larger, or n x the input for an all_gather whose output is not recorded (gloo's ranges carry
// their inputs only). -1 when not known.
int64_t size_elements(const std::string& kind, const CollectiveInfo& info, int32_t group_size) {
  if (kind == "all_gather" && info.out_nelems < 0)
    return info.in_nelems >= 0 && group_size > 0 ? info.in_nelems * group_size : -1;
  return std::max(info.in_nelems, info.out_nelems);
}

// The calls, in start order: record_param_comms ops that record a collective, then backend ranges
// outside them; each with what it records of itself (by its external id).
std::vector<Candidate> find_calls(const Trace& t) {
  std::unordered_map<uint64_t, const CollectiveInfo*> info_by_id;
  for (const CollectiveInfo& c : t.collectives)
    if (c.external_id != 0) info_by_id.emplace(c.external_id, &c);
  auto info_of = [&](const Event& e) -> const CollectiveInfo* {
    if (e.external_id == 0) return nullptr;
    const auto it = info_by_id.find(e.external_id);
    return it == info_by_id.end() ? nullptr : it->second;
  };
  const uint32_t param_comms = t.strings.find("record_param_comms");
  std::vector<Candidate> calls;
  std::unordered_map<uint32_t, std::vector<Interval>> recorded_by_thread;
  for (uint32_t i = 0; param_comms != kNoIndex && i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::HostOp || e.name != param_comms) continue;
    const CollectiveInfo* info = info_of(e);
    if (info == nullptr) continue;
    std::string kind = collective_kind(info->name);
    if (kind.empty()) continue;
    calls.push_back({i, info, std::move(kind)});
    recorded_by_thread[e.tid].push_back({e.start_ns, e.end_ns()});
  }
  for (auto& [tid, v] : recorded_by_thread)
    std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  auto inside_recorded = [&](const Event& e) {
    const auto it = recorded_by_thread.find(e.tid);
    if (it == recorded_by_thread.end()) return false;
    const auto& v = it->second;
    auto after = std::upper_bound(v.begin(), v.end(), e.start_ns,
                                  [](int64_t s, const Interval& iv) { return s < iv.start; });
    // The records on one thread follow each other; a few back is enough for one starting inside.
    for (int back = 0; after != v.begin() && back < 4; ++back) {
      --after;
      if (after->end >= e.end_ns()) return true;
    }
    return false;
  };
  std::vector<int8_t> backend_by_name(t.strings.size(), -1);   // each name checked once
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::HostOp && e.kind != EventKind::UserRange) continue;
    if (e.name < backend_by_name.size()) {
      if (backend_by_name[e.name] < 0) backend_by_name[e.name] = is_backend_collective_name(t.name_of(e)) ? 1 : 0;
      if (backend_by_name[e.name] == 0) continue;
    } else if (!is_backend_collective_name(t.name_of(e))) {
      continue;
    }
    if (inside_recorded(e)) continue;
    const std::string& name = t.name_of(e);
    std::string kind = collective_kind(name);
    if (kind.empty()) continue;
    calls.push_back({i, info_of(e), std::move(kind)});
  }
  std::sort(calls.begin(), calls.end(), [&](const Candidate& a, const Candidate& b) {
    const Event &ea = t.events[a.event], &eb = t.events[b.event];
    return ea.start_ns != eb.start_ns ? ea.start_ns < eb.start_ns : a.event < b.event;
  });
  return calls;
}

// Each call's communication kernels: launched from its thread inside its range, or carrying its
// external id.
std::vector<IntervalList> call_kernels(const Trace& t, const LaunchLinks& links,
                                       const std::vector<Candidate>& calls) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> calls_by_thread;   // indices into `calls`
  std::unordered_map<uint64_t, uint32_t> call_by_id;
  for (uint32_t c = 0; c < calls.size(); ++c) {
    const Event& e = t.events[calls[c].event];
    calls_by_thread[e.tid].push_back(c);
    if (e.external_id != 0) call_by_id.emplace(e.external_id, c);
  }
  auto call_around = [&](const Event& launch) -> int64_t {
    const auto it = calls_by_thread.find(launch.tid);
    if (it == calls_by_thread.end()) return -1;
    const auto& v = it->second;   // in start order
    auto after = std::upper_bound(v.begin(), v.end(), launch.start_ns,
                                  [&](int64_t s, uint32_t c) { return s < t.events[calls[c].event].start_ns; });
    if (after == v.begin()) return -1;
    const Event& e = t.events[calls[*(after - 1)].event];
    return e.end_ns() >= launch.end_ns() ? int64_t(*(after - 1)) : -1;
  };
  std::vector<IntervalList> kernels(calls.size());
  std::vector<int8_t> comm_by_name(t.strings.size(), -1);
  for (uint32_t k = 0; k < t.events.size(); ++k) {
    const Event& e = t.events[k];
    if (e.kind != EventKind::Kernel) continue;
    int8_t& comm = comm_by_name[e.name];
    if (comm < 0) comm = is_communication_kernel_name(t.name_of(e)) ? 1 : 0;
    if (comm == 0) continue;
    int64_t c = -1;
    const uint32_t runtime = k < links.runtime_of.size() ? links.runtime_of[k] : kNoIndex;
    if (runtime != kNoIndex) c = call_around(t.events[runtime]);
    if (c < 0 && e.external_id != 0) {
      const auto it = call_by_id.find(e.external_id);
      if (it != call_by_id.end()) c = it->second;
    }
    if (c >= 0) kernels[size_t(c)].push_back({e.start_ns, e.end_ns()});
  }
  return kernels;
}

// The process group: as recorded; the job's only group when none is recorded; what the job's
// table says of a recorded group for what its record leaves out.
void fill_group(CollectiveInfo& info, const std::vector<ProcessGroupInfo>& groups) {
  const ProcessGroupInfo* only_group = groups.size() == 1 ? &groups[0] : nullptr;
  const ProcessGroupInfo* group = nullptr;
  if (info.pg_name.empty() && only_group != nullptr &&
      (info.group_size < 0 || info.group_size == only_group->size))
    group = only_group;
  else if (!info.pg_name.empty())
    for (const ProcessGroupInfo& g : groups)
      if (g.name == info.pg_name) group = &g;
  if (group != nullptr) {
    if (info.pg_name.empty()) info.pg_name = group->name;
    if (info.pg_desc.empty()) info.pg_desc = group->desc;
    if (info.group_ranks.empty()) info.group_ranks = group->ranks;
    if (info.group_size < 0) info.group_size = group->size;
  }
}

// Largest total first; calls follow their rows.
void sort_rows(CollectiveTable& out) {
  std::vector<uint32_t> order(out.rows.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return out.rows[a].total_ns > out.rows[b].total_ns; });
  std::vector<uint32_t> moved(order.size());
  std::vector<CollectiveRow> rows;
  for (uint32_t i = 0; i < order.size(); ++i) {
    moved[order[i]] = i;
    rows.push_back(std::move(out.rows[order[i]]));
  }
  out.rows = std::move(rows);
  for (CollectiveCall& call : out.calls) call.row = moved[call.row];
}

}  // namespace

CollectiveTable collective_table(const Trace& t, const LaunchLinks& links, const BreakdownResult& steps,
                                 const std::vector<ProcessGroupInfo>& groups) {
  CollectiveTable out;
  if (steps.steps.empty()) return out;
  const std::vector<Candidate> calls = find_calls(t);
  std::vector<IntervalList> kernels = call_kernels(t, links, calls);

  // The step each call starts in.
  std::vector<const StepBreakdown*> by_start;
  for (const StepBreakdown& s : steps.steps) by_start.push_back(&s);
  std::sort(by_start.begin(), by_start.end(),
            [](const StepBreakdown* a, const StepBreakdown* b) { return a->start_ns < b->start_ns; });
  auto step_of = [&](int64_t ts) -> const StepBreakdown* {
    auto after = std::upper_bound(by_start.begin(), by_start.end(), ts,
                                  [](int64_t v, const StepBreakdown* s) { return v < s->start_ns; });
    if (after == by_start.begin()) return nullptr;
    const StepBreakdown* s = *(after - 1);
    return ts < s->end_ns ? s : nullptr;
  };

  using Key = std::tuple<std::string, std::string, std::string, std::string, int32_t>;
  std::map<Key, uint32_t> row_of;
  for (uint32_t c = 0; c < calls.size(); ++c) {
    const Candidate& cand = calls[c];
    const Event& e = t.events[cand.event];
    const StepBreakdown* step = step_of(e.start_ns);
    if (step == nullptr || (e.flags & kContextFlag)) continue;   // a window's context: counted where owned
    CollectiveInfo info = cand.info != nullptr ? *cand.info : CollectiveInfo{};
    fill_group(info, groups);
    CollectiveCall call;
    call.step = step->step;
    IntervalList& ks = kernels[c];
    if (!ks.empty()) {
      merge_intervals(ks);
      call.start_ns = ks.front().start;
      call.end_ns = ks.back().end;
      call.dur_ns = total_length(ks);
    } else {
      call.start_ns = e.start_ns;
      call.end_ns = e.end_ns();
      call.dur_ns = e.dur_ns;
    }
    const int64_t elems = size_elements(cand.kind, info, info.group_size);
    const int64_t width = dtype_bytes(info.dtype);
    call.bytes = elems >= 0 && width > 0 ? elems * width : -1;
    const Key key{cand.kind, info.pg_name, info.pg_desc, info.group_ranks, info.group_size};
    auto [it, added] = row_of.emplace(key, uint32_t(out.rows.size()));
    if (added) {
      CollectiveRow r;
      r.name = cand.kind;
      r.process_group = info.pg_name;
      r.pg_desc = info.pg_desc;
      r.group_ranks = info.group_ranks;
      r.group_size = info.group_size;
      r.bytes = 0;
      out.rows.push_back(std::move(r));
    }
    CollectiveRow& row = out.rows[it->second];
    ++row.calls;
    row.total_ns += call.dur_ns;
    row.bytes = row.bytes >= 0 && call.bytes >= 0 ? row.bytes + call.bytes : -1;
    row.on_device = row.on_device || !ks.empty();
    call.row = it->second;
    out.calls.push_back(call);
  }
  sort_rows(out);
  return out;
}

}  // namespace gpuprof
