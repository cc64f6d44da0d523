#include "gpuprof/analysis/step_journal.h"

#include <utility>

#include "chrome_json.h"
#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/flops.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"

namespace gpuprof {

std::string StepSummarizer::next() {
  collect::drain_new(cursor_, trace_);
  last_events_ = trace_.events.size();
  if (cursor_.epoch != epoch_) {   // a new span: nothing is carried into it
    epoch_ = cursor_.epoch;
    carried_memory_.clear();
    carried_host_.clear();
  }
  // The levels carried in go first (the samples are sorted by time), then this call's own.
  std::vector<MemorySample> memory = carried_memory_;
  memory.insert(memory.end(), trace_.memory.begin(), trace_.memory.end());
  trace_.memory.swap(memory);
  std::vector<HostMemorySample> host = carried_host_;
  host.insert(host.end(), trace_.host_memory.begin(), trace_.host_memory.end());
  trace_.host_memory.swap(host);

  BreakdownOptions options;
  options.drop_incomplete_last_step = false;   // the step is complete: its marker was recorded
  const BreakdownResult steps = compute_breakdown(trace_, options);
  const LaunchLinks links = link_launches(trace_);
  const std::vector<uint32_t> outer_first = host_ops_outer_first(trace_);
  const FlopCounts flops = count_flops(trace_, links, &outer_first);
  const std::vector<OperatorRow> operators = operator_table(trace_, links, &flops, &outer_first);
  const std::vector<StepMemoryRow> step_memory = step_memory_table(trace_, steps);
  const std::vector<StepFlops> step_flop_rows = step_flops(trace_, flops, steps);

  std::string out;
  {
    chrome_json::BlockSink sink(&out);
    chrome_json::JsonWriter w(sink);
    auto key = [&](const char* k) { w.Key(k, std::strlen(k)); };
    w.StartObject();
    key("steps");
    w.StartArray();
    for (const StepBreakdown& s : steps.steps) {
      w.StartObject();
      key("step");
      w.Int64(s.step);
      key("start_ns");
      w.Int64(s.start_ns);
      key("end_ns");
      w.Int64(s.end_ns);
      for (int c = 0; c < kNumCategories; ++c) {
        const std::string k = std::string(category_key(Category(c))) + "_ns";
        w.Key(k.data(), k.size());
        w.Int64(s.ns[size_t(c)]);
      }
      // The step's FLOPs, as the live report's native pass gives them (its per-step rows).
      StepFlops f;
      f.step = s.step;
      for (const StepFlops& r : step_flop_rows)
        if (r.step == s.step) f = r;
      const std::pair<const char*, int64_t> counts[] = {
          {"flops", f.total},
          {"matmul_flops", f.matmul},
          {"other_flops", f.other},
          {"matmul_forward_flops", f.matmul_forward},
          {"forward_flops", f.forward},
          {"backward_flops", f.backward},
          {"recompute_flops", f.recompute},
          {"other_calls", f.other_calls},
          {"uncounted_calls", f.uncounted_calls},
          {"uncounted_matmul_calls", f.uncounted_matmul_calls},
      };
      key("flop_counts");
      w.StartObject();
      key("step");
      w.Int64(s.step);
      for (const auto& [k, v] : counts) {
        key(k);
        w.Int64(v);
      }
      key("backward_ran");
      w.Int(f.backward_ran ? 1 : 0);
      key("matmul_flops_by_dtype");
      w.StartObject();
      for (int d = 0; d < kNumFlopDtypes; ++d)
        if (f.matmul_by_dtype[size_t(d)] != 0) {
          key(flop_dtype_key(static_cast<FlopDtype>(d)));
          w.Int64(f.matmul_by_dtype[size_t(d)]);
        }
      w.EndObject();
      w.EndObject();
      key("memory");
      w.StartArray();
      for (const StepMemoryRow& m : step_memory) {
        if (m.step != s.step) continue;
        w.StartArray();
        w.Int(m.device);
        w.Int64(m.peak_allocated_bytes);
        w.Int64(m.peak_reserved_bytes);
        w.Int64(m.capacity_bytes);
        w.Int64(m.peak_rss_bytes);
        w.EndArray();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    key("operators");
    w.StartArray();
    for (const OperatorRow& r : operators) {
      w.StartArray();
      w.String(r.name.data(), r.name.size());
      w.Int64(r.calls);
      w.Int64(r.host_self_ns);
      w.Int64(r.host_total_ns);
      w.Int64(r.device_self_ns);
      w.Int64(r.device_total_ns);
      w.Int64(r.tc_self_ns);
      w.Int64(r.tc_total_ns);
      w.Int64(r.flops);
      w.EndArray();
    }
    w.EndArray();
    key("counted_calls");
    w.Uint64(flops.ops.size());
    key("uncounted_calls");
    w.Uint64(flops.uncounted.size());
    key("events");
    w.Uint64(trace_.events.size());
    key("dropped");
    w.Uint64(collect::stats().dropped);
    w.EndObject();
    sink.close();
  }

  // What the next call carries in: each device's last allocator level, the last RSS sample.
  std::vector<MemorySample> last;
  for (const MemorySample& m : trace_.memory) {
    bool seen = false;
    for (MemorySample& l : last)
      if (l.device == m.device) {
        l = m;
        seen = true;
      }
    if (!seen) last.push_back(m);
  }
  carried_memory_.swap(last);
  if (!trace_.host_memory.empty()) carried_host_.assign(1, trace_.host_memory.back());
  return out;
}

}  // namespace gpuprof
