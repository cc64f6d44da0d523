// The critical path as the report's `critical_path` section (gpuprof/analysis/critical_path.h;
// docs/schema.md): per step its length, the share of each cause and the names with most time on
// it. The chain itself is drawn from its pieces (path_pieces): the Chrome export and the HTML timeline
// (critical_path_bindings.cpp).
#pragma once

#include <string>
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

}  // namespace gpuprof::bindings
