// The per-step views of the detail tables (tables.h): which op calls repeat a step's pattern, each
// step's events by kind, a step's timeline, and each step's memory.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "gpuprof/analysis/memory.h"
#include "gpuprof/analysis/tables.h"

namespace gpuprof {

std::vector<uint8_t> repeated_op_calls(const Trace& t, const LaunchLinks& links) {
  const size_t n = t.events.size();
  std::vector<uint32_t> child_ops(n, 0);
  for (uint32_t i = 0; i < n; ++i)
    if (t.events[i].kind == EventKind::HostOp && links.parent_op[i] != kNoIndex) ++child_ops[links.parent_op[i]];
  std::vector<uint8_t> repeated(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    if (t.events[i].kind != EventKind::HostOp) continue;
    const uint32_t parent = links.parent_op[i];
    repeated[i] = parent != kNoIndex && child_ops[parent] == 1 && t.events[parent].name == t.events[i].name;
  }
  return repeated;
}

std::vector<StepEventTables> step_event_tables(const Trace& t,
                                               const std::vector<std::pair<int64_t, int64_t>>& steps, size_t top,
                                               const std::vector<uint8_t>* given) {
  std::vector<StepEventTables> out(steps.size());
  if (steps.empty()) return out;
  const bool use_given = given != nullptr && given->size() == t.events.size();
  const std::vector<uint8_t> computed =
      use_given ? std::vector<uint8_t>() : repeated_op_calls(t, link_launches(t));
  const std::vector<uint8_t>& repeated = use_given ? *given : computed;
  std::vector<int64_t> starts;
  starts.reserve(steps.size());
  for (const auto& s : steps) starts.push_back(s.first);
  // Per step, name id -> (calls, total); kernels and operators apart.
  std::vector<std::unordered_map<uint32_t, std::pair<int64_t, int64_t>>> kernels(steps.size()), ops(steps.size());
  std::vector<int8_t> torch_range(t.strings.size(), -1);   // each op name checked once
  auto is_torch_range = [&](const Event& e) {
    if (e.name >= torch_range.size()) return false;
    if (torch_range[e.name] < 0) torch_range[e.name] = is_torch_range_op_name(t.name_of(e)) ? 1 : 0;
    return torch_range[e.name] == 1;
  };
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    const bool kernel = e.kind == EventKind::Kernel;
    if (!kernel && !(e.kind == EventKind::HostOp && !repeated[i] && !is_torch_range(e))) continue;
    // The step an event belongs to: the last one starting at or before it, if it has not ended.
    const auto it = std::upper_bound(starts.begin(), starts.end(), e.start_ns);
    if (it == starts.begin()) continue;
    const size_t k = size_t(it - starts.begin()) - 1;
    if (e.start_ns >= steps[k].second) continue;
    auto& acc = (kernel ? kernels : ops)[k][e.name];
    ++acc.first;
    acc.second += e.dur_ns;
    ++(kernel ? out[k].kernel_calls : out[k].operator_calls);
  }
  auto tops = [&](const std::unordered_map<uint32_t, std::pair<int64_t, int64_t>>& by_name) {
    // The top rows by their ids, then their names: a step of a million distinct names copies five.
    std::vector<std::pair<uint32_t, std::pair<int64_t, int64_t>>> ids(by_name.begin(), by_name.end());
    const auto heavier = [&](const auto& a, const auto& b) {
      if (a.second.second != b.second.second) return a.second.second > b.second.second;
      return t.strings.at(a.first) < t.strings.at(b.first);
    };
    const size_t n = std::min(top, ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), heavier);
    std::vector<NameTotal> rows;
    rows.reserve(n);
    for (size_t i = 0; i < n; ++i)
      rows.push_back({display_name(t.strings.at(ids[i].first)), ids[i].second.first, ids[i].second.second});
    return rows;
  };
  for (size_t k = 0; k < steps.size(); ++k) {
    out[k].kernels = tops(kernels[k]);
    out[k].operators = tops(ops[k]);
  }
  return out;
}

StepTimeline step_timeline(const Trace& t, int64_t start_ns, int64_t end_ns, size_t cap,
                           const std::vector<uint32_t>* module_of) {
  std::vector<int8_t> module_call(t.strings.size(), -1);   // each python function's name checked once
  auto is_module_call = [&](const Event& e) {
    if (e.kind != EventKind::PythonFunction || e.name >= module_call.size()) return false;
    if (module_call[e.name] < 0) {
      std::string_view segment, type;
      module_call[e.name] = parse_module_call_name(t.name_of(e), &segment, &type) ? 1 : 0;
    }
    return module_call[e.name] == 1;
  };
  auto drawn = [&](const Event& e) {
    const EventKind k = e.kind;
    return k == EventKind::HostOp || k == EventKind::UserRange || k == EventKind::Sync || k == EventKind::Kernel ||
           k == EventKind::Memcpy || k == EventKind::Memset || k == EventKind::InputStage || is_module_call(e);
  };
  std::vector<uint32_t> picked;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.start_ns >= start_ns && e.start_ns < end_ns && drawn(e)) picked.push_back(i);
  }
  StepTimeline out;
  out.total = static_cast<int64_t>(picked.size());
  if (picked.size() > cap) {
    // Device work first, then the longest events; ties in stored order. A total order, so the
    // first `cap` after nth_element are the same events a full sort would keep (their order is
    // the stored one again below).
    std::nth_element(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(cap), picked.end(),
                     [&](uint32_t a, uint32_t b) {
                       const Event& ea = t.events[a];
                       const Event& eb = t.events[b];
                       if (ea.on_device() != eb.on_device()) return ea.on_device();
                       if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;
                       return a < b;
                     });
    picked.resize(cap);
    std::sort(picked.begin(), picked.end());
  }
  std::stable_sort(picked.begin(), picked.end(), [&](uint32_t a, uint32_t b) {
    const Event& ea = t.events[a];
    const Event& eb = t.events[b];
    return ea.start_ns != eb.start_ns ? ea.start_ns < eb.start_ns : ea.dur_ns > eb.dur_ns;
  });
  std::unordered_map<uint64_t, uint32_t> lane_index;   // (on device, device, thread or stream) -> lane
  std::unordered_map<uint32_t, uint32_t> name_index;   // trace string id -> index in names
  std::unordered_map<uint64_t, Category> category_of;   // (name id, kind) -> category
  out.events.reserve(picked.size());
  for (uint32_t i : picked) {
    const Event& e = t.events[i];
    // A host lane is its thread alone (its module calls a lane beside it); a device lane its GPU
    // and stream; a DataLoader worker's lane its process (the main process's input stages share
    // their thread's lane).
    const bool module = e.kind == EventKind::PythonFunction;
    const bool worker = e.kind == EventKind::InputStage && e.device >= 0;
    const uint64_t lane_key = e.on_device() ? (uint64_t(1) << 48) | (uint64_t(uint16_t(e.device)) << 32) | e.tid
                              : module      ? (uint64_t(2) << 48) | e.tid
                              : worker      ? (uint64_t(3) << 48) | e.tid
                                            : uint64_t(e.tid);
    auto [lit, new_lane] = lane_index.emplace(lane_key, static_cast<uint32_t>(out.lanes.size()));
    if (new_lane)
      out.lanes.push_back(e.on_device() ? "GPU " + std::to_string(e.device) + " stream " + std::to_string(e.tid)
                          : module      ? "modules, host thread " + std::to_string(e.tid)
                          : worker      ? "DataLoader worker " + std::to_string(e.device) + " (pid " +
                                              std::to_string(e.tid) + ")"
                                        : "host thread " + std::to_string(e.tid));
    auto [nit, new_name] = name_index.emplace(e.name, static_cast<uint32_t>(out.names.size()));
    if (new_name) out.names.push_back(display_name(t.name_of(e)));
    TimelineEvent r;
    r.lane = lit->second;
    r.name = nit->second;
    r.offset_ns = e.start_ns - start_ns;
    r.dur_ns = e.dur_ns;
    r.kind = e.kind;
    if (module_of != nullptr && i < module_of->size()) r.module = (*module_of)[i];
    // Classified once per (name, kind): the name rules scan the name (kernel names run to
    // hundreds of characters), and a step holds thousands of calls of a few dozen names.
    auto [cit, new_class] = category_of.emplace((uint64_t(e.name) << 8) | uint64_t(e.kind), Category::CpuExec);
    if (new_class) {
      if (e.kind == EventKind::Sync) cit->second = Category::Runtime;
      else if (module) cit->second = Category::Other;   // a module call: in no category of the breakdown
      else if (e.kind == EventKind::InputStage) cit->second = Category::DataLoader;
      else if (!event_category(t, e, &cit->second)) cit->second = Category::CpuExec;   // a step marker
    }
    r.category = cit->second;
    out.events.push_back(r);
    auto c =
        std::find_if(out.counts.begin(), out.counts.end(), [&](const auto& kc) { return kc.first == e.kind; });
    if (c == out.counts.end()) out.counts.emplace_back(e.kind, 1);
    else ++c->second;
  }
  return out;
}

std::vector<StepMemoryRow> step_memory_table(const Trace& t, const BreakdownResult& steps) {
  return step_memory_table(t, steps, device_memory(t, /*attributed=*/false));
}

std::vector<StepMemoryRow> step_memory_table(const Trace& t, const BreakdownResult& steps,
                                             const std::vector<DeviceMemory>& devices) {
  // Levels recorded by the allocator, or rebuilt from its blocks; sizes alone (old Kineto traces)
  // give no level to take a peak of.
  std::map<int, const DeviceMemory*> by_device;
  for (const DeviceMemory& d : devices)
    if (d.level_source != "rebuilt") by_device[d.device] = &d;
  if (!t.host_memory.empty()) by_device.try_emplace(-1, nullptr);
  std::vector<const HostMemorySample*> rss;
  for (const HostMemorySample& h : t.host_memory) rss.push_back(&h);
  auto earlier = [](const auto* a, const auto* b) { return a->ts_ns < b->ts_ns; };
  std::stable_sort(rss.begin(), rss.end(), earlier);

  std::vector<StepMemoryRow> rows;
  for (auto& [device, d] : by_device) {
    const DeviceProps* props = device >= 0 ? t.device(device) : nullptr;
    for (const StepBreakdown& s : steps.steps) {
      StepMemoryRow r;
      r.step = s.step;
      r.start_ns = s.start_ns;
      r.device = device;
      r.capacity_bytes = props ? props->total_global_mem : 0;
      if (d != nullptr) {
        auto first = std::lower_bound(d->samples.begin(), d->samples.end(), s.start_ns,
                                      [&](uint32_t i, int64_t ts) { return t.memory[i].ts_ns < ts; });
        // The level the step starts with: one recorded at its start (a boundary reading), else the
        // last one before it.
        size_t i = size_t(first - d->samples.begin());
        const bool at_start = i < d->samples.size() && t.memory[d->samples[i]].ts_ns == s.start_ns;
        if (i > 0 && !at_start) {
          r.peak_allocated_bytes = d->allocated[i - 1];
          r.peak_reserved_bytes = d->reserved[i - 1];
        }
        for (; i < d->samples.size() && t.memory[d->samples[i]].ts_ns < s.end_ns; ++i) {
          r.peak_allocated_bytes = std::max(r.peak_allocated_bytes, d->allocated[i]);
          r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, d->reserved[i]);
        }
      }
      if (device == -1) {
        // RSS is sampled at the boundaries: both ends of the step belong to it.
        auto in = std::lower_bound(rss.begin(), rss.end(), s.start_ns,
                                   [](const HostMemorySample* h, int64_t ts) { return h->ts_ns < ts; });
        for (; in != rss.end() && (*in)->ts_ns <= s.end_ns; ++in)
          r.peak_rss_bytes = std::max(r.peak_rss_bytes, (*in)->rss_bytes);
      }
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace gpuprof
