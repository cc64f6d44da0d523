// The module view: every host op (and, through the launch links, the runtime calls and device work
// it launched) attributed to the nn.Module call it ran in, and one row per module of the model's
// hierarchy with its host and device time, forward and backward (docs/metrics.md, "Modules").
//
// Module calls are host events of kind PythonFunction named "nn.Module: ...": torch.profiler's
// Python tracer writes "nn.Module: Conv2d_0" (with_stack=True), gpuprof's live module hooks write
// "nn.Module: conv1 (Conv2d)" (the module's name under the module that called it, and its type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// The text after "nn.Module: " in a module call's name, read as the segment it adds to its
// caller's path and the module's type: "conv1 (Conv2d)" -> ("conv1", "Conv2d") (gpuprof's live
// form); "Conv2d_0" -> ("Conv2d_0", "Conv2d") (torch.profiler's: the type and its instance
// number); anything else is both. False for a name that is not a module call.
bool parse_module_call_name(std::string_view name, std::string_view* segment, std::string_view* type);

struct ModuleRow {
  std::string path;          // "layer1.0.conv1"; "" for the model (the main root); docs/metrics.md
  std::string type;          // "Conv2d"
  uint32_t parent = kNoIndex;   // index of the parent row; kNoIndex for a root
  int32_t depth = 0;         // 0 for a root
  int64_t calls = 0;         // forward calls
  int64_t host_total_ns = 0;   // its forward calls' wall time + the backward ops attributed to it and below
  int64_t host_self_ns = 0;    // host_total_ns less that of its children rows
  int64_t device_total_ns = 0; // device work launched by ops attributed to it and below
  int64_t device_self_ns = 0;  // device work launched by ops attributed to it alone
  // FLOPs (flops.h) counted at the ops attributed to it and below, forward and backward (set by
  // analyse_tables: the counted calls' FLOPs summed with total_sums)
  int64_t flops = 0;
};

struct ModuleView {
  // Depth first: each row before its children, the main root first, children heaviest first.
  std::vector<ModuleRow> rows;
  // Per event (indexed like Trace::events; empty when the trace has no module calls): the row it is
  // attributed to, or kNoIndex. Set for module calls (their own row), host ops, user ranges, runtime
  // and driver calls, synchronisations and device work (the row of the op that launched it).
  std::vector<uint32_t> row_of;

  // A per-event quantity (indexed like Trace::events) summed by module: `self_sums` counts each
  // event in the row it is attributed to; `total_sums` also in every ancestor of that row. Events
  // attributed to no module count nowhere.
  template <class T>
  std::vector<T> self_sums(const std::vector<T>& per_event) const {
    std::vector<T> out(rows.size(), T{});
    const size_t n = per_event.size() < row_of.size() ? per_event.size() : row_of.size();
    for (size_t i = 0; i < n; ++i)
      if (row_of[i] != kNoIndex) out[row_of[i]] += per_event[i];
    return out;
  }
  template <class T>
  std::vector<T> total_sums(const std::vector<T>& per_event) const {
    return rolled_up(self_sums(per_event));
  }
  // Per-row values with each row's added into its ancestors' (rows come before their children).
  template <class T>
  std::vector<T> rolled_up(std::vector<T> per_row) const {
    for (size_t r = rows.size(); r-- > 0;)
      if (rows[r].parent != kNoIndex && r < per_row.size()) per_row[rows[r].parent] += per_row[r];
    return per_row;
  }
};

ModuleView module_view(const Trace& trace, const LaunchLinks& links);

// For quantities that are not events (allocator samples: Trace::memory): the module row running at
// each of `times_ns` (sorted ascending), on any host thread: the row of the innermost host op or
// module call that holds the time (the latest started, where threads overlap), so that a moment in
// a backward op is its forward's module. kNoIndex where none does. O((events + times) log events).
std::vector<uint32_t> module_rows_at(const Trace& trace, const ModuleView& view,
                                     const std::vector<int64_t>& times_ns);

}  // namespace gpuprof
