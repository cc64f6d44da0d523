#include "gpuprof/analysis/cuda_graphs.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "gpuprof/analysis/modules.h"

namespace gpuprof {

namespace {

// An event that names the host code around a launch: an operator, a user range (a compiled
// region is one, or an operator in a trace that lists it so), a module call.
bool names_host_code(const Trace& t, const Event& e) {
  if (e.kind == EventKind::HostOp || e.kind == EventKind::UserRange) return true;
  std::string_view segment, type;
  return e.kind == EventKind::PythonFunction && parse_module_call_name(t.name_of(e), &segment, &type);
}

// For each call (indices into t.events), the innermost host event of names_host_code on its
// thread that contains it (kNoIndex: none). One sweep per thread over the calls by start.
std::vector<uint32_t> innermost_around(const Trace& t, const std::vector<uint32_t>& calls) {
  std::unordered_map<uint32_t, std::vector<uint32_t>> calls_of;   // by thread
  for (uint32_t c : calls) calls_of[t.events[c].tid].push_back(c);
  std::unordered_map<uint32_t, std::vector<uint32_t>> around_of;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (calls_of.count(e.tid) && names_host_code(t, e)) around_of[e.tid].push_back(i);
  }
  const auto outer_first = [&](uint32_t a, uint32_t b) {
    const Event &x = t.events[a], &y = t.events[b];
    return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.dur_ns > y.dur_ns;
  };
  std::unordered_map<uint32_t, uint32_t> found;
  for (auto& [tid, mine] : calls_of) {
    std::vector<uint32_t>& around = around_of[tid];
    std::sort(mine.begin(), mine.end(), outer_first);
    std::sort(around.begin(), around.end(), outer_first);
    std::vector<uint32_t> open;
    size_t next = 0;
    for (uint32_t c : mine) {
      const Event& call = t.events[c];
      for (; next < around.size() && t.events[around[next]].start_ns <= call.start_ns; ++next) {
        while (!open.empty() && t.events[open.back()].end_ns() <= t.events[around[next]].start_ns) open.pop_back();
        open.push_back(around[next]);
      }
      while (!open.empty() && t.events[open.back()].end_ns() <= call.start_ns) open.pop_back();
      for (size_t k = open.size(); k-- > 0;) {
        if (t.events[open[k]].end_ns() >= call.end_ns()) {
          found[c] = open[k];
          break;
        }
      }
    }
  }
  std::vector<uint32_t> out(calls.size(), kNoIndex);
  for (size_t i = 0; i < calls.size(); ++i) {
    auto it = found.find(calls[i]);
    if (it != found.end()) out[i] = it->second;
  }
  return out;
}

}  // namespace

std::vector<CudaGraphRow> cuda_graph_table(const Trace& t, const LaunchLinks& links) {
  std::map<uint32_t, CudaGraphRow> by_graph;
  std::map<uint32_t, std::map<uint64_t, uint32_t>> launches_of;   // graph -> correlation -> call
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::Kernel || e.aux >= t.kernels.size()) continue;
    const uint32_t graph = t.kernels[e.aux].graph_id;
    if (graph == 0) continue;
    CudaGraphRow& r = by_graph[graph];
    r.graph_id = graph;
    ++r.kernels;
    r.device_ns += e.dur_ns;
    if (e.correlation == 0) continue;
    const uint32_t call = i < links.runtime_of.size() ? links.runtime_of[i] : kNoIndex;
    auto [it, added] = launches_of[graph].emplace(e.correlation, call);
    if (!added && it->second == kNoIndex) it->second = call;
  }
  if (by_graph.empty()) return {};
  std::vector<uint32_t> calls;
  for (const auto& [graph, launches] : launches_of)
    for (const auto& [correlation, call] : launches)
      if (call != kNoIndex) calls.push_back(call);
  std::sort(calls.begin(), calls.end());
  calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
  const std::vector<uint32_t> around = innermost_around(t, calls);
  std::unordered_map<uint32_t, uint32_t> around_of;
  for (size_t i = 0; i < calls.size(); ++i) around_of[calls[i]] = around[i];
  std::vector<CudaGraphRow> rows;
  for (auto& [graph, r] : by_graph) {
    std::map<std::string, int64_t> places;   // the name around a launch -> launches made there
    for (const auto& [correlation, call] : launches_of[graph]) {
      ++r.launches;
      if (call == kNoIndex) continue;
      uint32_t from = around_of[call];
      if (from == kNoIndex) from = links.launching_op(call);
      if (from != kNoIndex) ++places[std::string(t.name_of(t.events[from]))];
    }
    int64_t most = 0;
    for (const auto& [name, n] : places)   // by name: the first of the most frequent wins
      if (n > most) most = n, r.launched_from = name;
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const CudaGraphRow& a, const CudaGraphRow& b) {
    return a.device_ns != b.device_ns ? a.device_ns > b.device_ns : a.graph_id < b.graph_id;
  });
  return rows;
}

}  // namespace gpuprof
