// analyse_tables (gpuprof/analysis/tables.h): every analysis a report shows, on two threads. The
// breakdown and the launch links go first, one on each thread; then the tables, a list whose next
// entry whichever thread is free takes, the heaviest first, so that the two threads end together.
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpuprof/analysis/tables.h"
#include "table_pieces.h"

namespace gpuprof {

namespace {

// Every name the tables show longer than kMaxNameBytes becomes its display_name, and long_names
// refers to its full text once: by its id in the trace's strings (no second copy of a name of
// megabytes), or, for a string that is not one of them, by the text itself.
void shorten_long_names(const Trace& t, AnalysisTables& a) {
  std::unordered_map<std::string, bool> kept;   // display names already in long_names
  const auto shorten = [&](std::string& s) {
    if (s.size() <= kMaxNameBytes) return;
    std::string shown = display_name(s);
    if (kept.emplace(shown, true).second) {
      AnalysisTables::LongName n{shown, t.strings.find(s), {}};
      if (n.id == kNoIndex) n.full = std::move(s);
      a.long_names.push_back(std::move(n));
    }
    s = std::move(shown);
  };
  for (DeviceSummary& r : a.devices) shorten(r.name);
  for (KernelRow& r : a.kernels) shorten(r.name);
  for (KernelOpRow& r : a.kernel_ops) {
    shorten(r.kernel);
    shorten(r.op);
  }
  for (OperatorRow& r : a.operators) shorten(r.name);
  for (OperatorRow& r : a.operators_by_shape) {
    shorten(r.name);
    shorten(r.input_shapes);
  }
  for (RooflineRow& r : a.roofline) {   // FLOPs: the operators' rows, as shown there
    shorten(r.name);
    shorten(r.input_shapes);
  }
  for (RangeRow& r : a.ranges) shorten(r.name);
  for (LaunchStatsRow& r : a.launch_stats) shorten(r.name);
  for (OpLaunchDelayRow& r : a.op_launch_delay) {
    shorten(r.op);
    shorten(r.kernels);
  }
  for (KernelSequenceRow& r : a.kernel_sequences) {
    shorten(r.op);
    shorten(r.kernels);
  }
  for (CudaGraphRow& r : a.cuda_graphs) shorten(r.launched_from);
  for (SyncRow& r : a.syncs) {
    shorten(r.name);
    shorten(r.op);
  }
  MemoryView& m = a.memory_view;
  for (MemoryOpRow& r : m.ops) shorten(r.name);
  for (std::vector<MemoryMoment>* moments : {&m.peaks, &m.ends})
    for (MemoryMoment& p : *moments)
      for (std::vector<MemoryOwner>* owners : {&p.top_ops, &p.top_modules})
        for (MemoryOwner& o : *owners) shorten(o.name);
  for (MemoryGrowth& g : m.growth)
    for (std::vector<MemoryOwner>* owners : {&g.ops, &g.modules})
      for (MemoryOwner& o : *owners) shorten(o.name);
}

}  // namespace

AnalysisTables analyse_tables(const Trace& t, const BreakdownOptions& options,
                              const std::vector<ProcessGroupInfo>& process_groups) {
  AnalysisTables a;
  std::vector<uint32_t> outer_first;   // host_ops_outer_first, sorted once for all who need it
  int64_t launched_before = 0;         // HTA's scope for its six tables (last_step_start)
  const std::function<void()> first[2] = {[&] {
                                            a.steps = compute_breakdown(t, options);
                                            a.plausibility = check_plausibility(t);
                                          },
                                          [&] {
                                            a.links = link_launches(t);
                                            outer_first = host_ops_outer_first(t);
                                            launched_before = last_step_start(t);
                                          }};
  constexpr int kSteps = TablePiece::kSteps, kLinks = TablePiece::kLinks;
  // In the order of their time on the 2M-event trace (docs/performance.md), the heaviest first.
  const std::vector<TablePiece> tables = {
      {kLinks,
       [&] {   // FLOPs, the modules (with their FLOPs) and the operator tables that count them
         a.flops = count_flops(t, a.links, &outer_first);
         a.modules = module_view(t, a.links);
         if (!a.modules.rows.empty() && !a.flops.ops.empty()) {   // each module's, its children's included
           std::vector<int64_t> per_event(t.events.size(), 0);
           for (const CountedOp& c : a.flops.ops) per_event[c.event] += c.flops;
           const std::vector<int64_t> sums = a.modules.total_sums(per_event);
           for (size_t r = 0; r < a.modules.rows.size(); ++r) a.modules.rows[r].flops = sums[r];
         }
         a.repeated_ops = repeated_op_calls(t, a.links);
         OperatorTables operators = operator_tables(t, a.links, &a.flops, &outer_first, &a.repeated_ops);
         a.operators = std::move(operators.by_name);
         // FLOPs: each (name, shapes) row on the roofline (its bytes and intensity are per shape);
         // the by-shape table is the report's only where shapes were recorded beyond the FLOP
         // capture's.
         a.roofline = roofline_rows(operators.by_shape.empty() ? a.operators : operators.by_shape);
         if (operators.shapes_recorded) a.operators_by_shape = std::move(operators.by_shape);
       }},
      {kSteps | kLinks, [&] { a.critical_path = critical_paths(t, a.links, a.steps); }},
      {kSteps | kLinks, [&] { a.devices = summarize_devices(t, own_steps_window(t, a.steps), a.links); }},
      {kSteps,
       [&] {
         a.memory_view = memory_view(t, a.steps);
         a.memory = step_memory_table(t, a.steps, a.memory_view.devices);
       }},
      {kLinks, [&] { a.launch_stats = launch_stats_table(t, a.links, launched_before); }},
      {kLinks, [&] { a.queue_length = queue_length_table(t, a.links, launched_before); }},
      {kLinks,
       [&] {
         a.kernel_sequences = kernel_sequence_table(t, a.links, launched_before, kMinKernelSequence, &outer_first);
       }},
      {kLinks, [&] { a.op_launch_delay = op_launch_delay_table(t, a.links, launched_before); }},
      {kLinks, [&] { a.kernel_ops = kernel_op_table(t, a.links); }},
      {kLinks, [&] { a.idle_time = idle_time_table(t, a.links, launched_before); }},
      {kSteps | kLinks, [&] { a.collectives = collective_table(t, a.links, a.steps, process_groups); }},
      {0, [&] { a.ranges = range_table(t); }},
      {kLinks, [&] { a.cuda_graphs = cuda_graph_table(t, a.links); }},
      {0, [&] { a.kernels = kernel_table(t); }},
      {kLinks, [&] { a.syncs = sync_table(t, a.links); }},
      {kLinks, [&] { a.copy_bandwidth = copy_bandwidth_table(t, a.links, launched_before); }},
      {0, [&] { a.copies = copy_table(t); }},
  };
  run_pieces(first, tables);
  a.step_flops = step_flops(t, a.flops, a.steps);
  name_memory_modules(t, a.modules, a.memory_view);   // both views are done
  cap_memory_ops(a.memory_view.ops, kMaxNameRows);
  shorten_long_names(t, a);
  return a;
}

}  // namespace gpuprof
