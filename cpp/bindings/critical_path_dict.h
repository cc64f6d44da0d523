// The critical path as the report's `critical_path` section (gpuprof/analysis/critical_path.h;
// docs/schema.md): per step its length, the share of each cause and the names with most time on
// it. The chain itself is drawn from its pieces (path_pieces): the Chrome export and the HTML timeline
// (critical_path_bindings.cpp).
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/tables.h"
#include "rows.h"

namespace gpuprof::bindings {

inline double pct_of(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0;
}

inline py::dict critical_path_dict(const Trace& t, const std::vector<StepCriticalPath>& paths) {
  py::list steps;
  for (const StepCriticalPath& p : paths) {
    py::dict causes;
    for (int c = 0; c < kNumPathCauses; ++c) causes[path_cause_key(PathCause(c))] = pct_of(p.ns[c], p.length_ns());
    py::list top;
    for (const PathTopRow& r : p.top) {
      py::dict row;
      row["name"] = display_name(t.strings.at(r.name));
      row["kind"] = event_kind_key(r.kind);
      row["us"] = us(r.ns);
      row["pct"] = pct_of(r.ns, p.length_ns());
      top.append(row);
    }
    py::dict step;
    step["step"] = p.step;
    step["length_us"] = us(p.length_ns());
    step["by_cause_pct"] = causes;
    step["launch_calls_pct"] = pct_of(p.launch_calls_ns, p.length_ns());
    step["top"] = top;
    steps.append(step);
  }
  py::dict out;
  out["steps"] = steps;
  return out;
}

// The analysis pass's paths of the steps the report draws (the slowest and the median, chosen as
// analysis/__init__.py's step_views chooses them), kept so that drawing them does not link the
// launches and walk the trace again (critical_path_pieces' `kept`). `trace`, `events` and `count`
// say which trace they belong to: a path is only used for the same one. `owner` (the trace's Python
// object) keeps it alive, so that no other trace can come to stand at its address.
struct KeptCriticalPaths {
  py::object owner;
  const Trace* trace = nullptr;
  const Event* events = nullptr;
  size_t count = 0;
  std::vector<StepCriticalPath> paths;

  bool of(const Trace& t) const { return trace == &t && events == t.events.data() && count == t.events.size(); }
  const StepCriticalPath* find(const Trace& t, const StepBreakdown& s) const {
    if (!of(t)) return nullptr;
    for (const StepCriticalPath& p : paths)
      if (p.step == s.step && p.start_ns == s.start_ns && p.end_ns == s.end_ns) return &p;
    return nullptr;
  }
};

// Keeps the paths of the slowest step (the first of the longest) and of the median one (sorted by
// length, stable, the ((n - 1) / 2)th), moving them out of `paths` (one per step of `steps`).
inline py::object kept_drawn_paths(const Trace& t, const std::vector<StepBreakdown>& steps,
                                   std::vector<StepCriticalPath>& paths) {
  KeptCriticalPaths kept;
  kept.owner = py::cast(&t, py::return_value_policy::reference);
  kept.trace = &t;
  kept.events = t.events.data();
  kept.count = t.events.size();
  if (!steps.empty() && steps.size() == paths.size()) {
    size_t slowest = 0;
    for (size_t k = 1; k < steps.size(); ++k)
      if (steps[k].total_ns() > steps[slowest].total_ns()) slowest = k;
    std::vector<size_t> order(steps.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return steps[a].total_ns() < steps[b].total_ns(); });
    const size_t typical = order[(order.size() - 1) / 2];
    kept.paths.push_back(std::move(paths[slowest]));
    if (typical != slowest) kept.paths.push_back(std::move(paths[typical]));
  }
  return py::cast(std::move(kept));
}

}  // namespace gpuprof::bindings
