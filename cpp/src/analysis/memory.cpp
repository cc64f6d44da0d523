// The memory view (docs/metrics.md, "Memory"). Definitions and their sources:
// - attribution of a record to an operator: the TensorBoard plugin's memory view (the innermost
//   node of the thread's op tree that contains the record; records whose innermost node is not an
//   operator are left out, those in operators inside it count in its inclusive figures);
// - allocations matched to frees by device and address, as the plugin's memory events table did;
// - temporary: freed before the outermost operator that made it returns, as torch's memory
//   profiler's TEMPORARY (allocated and freed within one top-level op);
// - parameters, gradients, optimizer state: the storages a live session saw in those roles.
#include "gpuprof/analysis/memory.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>

#include "gpuprof/analysis/tables.h"
#include "run_sort.h"

namespace gpuprof {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// The host events that shape a thread's op tree in the plugin: operators, python functions (module
// ranges among them) and step markers; of the user ranges only the DataLoader's, the optimizer
// steps and collectives (runtime calls hang off operators, they are not nodes). A record inside any
// other user range belongs to the node around the range.
bool is_tree_node(const Trace& t, const Event& e) {
  if (e.device >= 0 || e.dur_ns < 0) return false;
  if (e.kind == EventKind::UserRange) {
    const std::string& name = t.name_of(e);
    return is_dataloader_name(name) || starts_with(name, "Optimizer.step") || is_communication_op_name(name);
  }
  return e.kind == EventKind::HostOp || e.kind == EventKind::PythonFunction || e.kind == EventKind::StepMarker;
}

// Where each record sits on its thread: the innermost node containing it, the outermost and the
// innermost enclosing operators, the innermost module. `parent` gives each node's enclosing node.
struct Attribution {
  uint32_t node = kNoIndex;
  uint32_t outer_op = kNoIndex;
  uint32_t module = kNoIndex;
  uint32_t optimizer = kNoIndex;   // the optimizer step range around it (Optimizer.step#...)
};

struct Attributions {
  std::vector<Attribution> of_sample;   // by index into Trace::memory
  // Over the events: each tree node's enclosing node, and the node it is one with (itself, or, by the
  // plugin's rule after torch.profiler's, a same-name operator whose only child it is: one call
  // recorded twice, merged into the outer one).
  std::vector<uint32_t> parent, merged_into;
};

Attributions attribute(const Trace& t, bool nodes_anyway = false) {
  Attributions a;
  a.of_sample.resize(t.memory.size());
  if (t.memory.empty() && !nodes_anyway) return a;
  const uint32_t n_events = static_cast<uint32_t>(t.events.size());
  a.parent.assign(n_events, kNoIndex);
  a.merged_into.resize(n_events);
  for (uint32_t i = 0; i < n_events; ++i) a.merged_into[i] = i;
  std::unordered_map<uint32_t, std::vector<uint32_t>> nodes_by_tid;
  for (uint32_t i = 0; i < n_events; ++i)
    if (is_tree_node(t, t.events[i])) nodes_by_tid[t.events[i].tid].push_back(i);
  std::vector<uint32_t> children(n_events, 0);
  for (auto& [tid, nodes] : nodes_by_tid) {
    // Parents before children: by start, the longer first at equal starts.
    sort_runs(nodes, [&](uint32_t x, uint32_t y) {
      const Event &ex = t.events[x], &ey = t.events[y];
      if (ex.start_ns != ey.start_ns) return ex.start_ns < ey.start_ns;
      if (ex.dur_ns != ey.dur_ns) return ex.dur_ns > ey.dur_ns;
      return x < y;
    });
    std::vector<uint32_t> stack;
    for (uint32_t n : nodes) {
      while (!stack.empty() && t.events[stack.back()].end_ns() <= t.events[n].start_ns) stack.pop_back();
      if (!stack.empty()) {
        a.parent[n] = stack.back();
        ++children[stack.back()];
      }
      stack.push_back(n);
    }
  }
  for (auto& [tid, nodes] : nodes_by_tid)
    for (uint32_t n : nodes) {
      const uint32_t p = a.parent[n];
      if (p != kNoIndex && children[p] == 1 && t.events[p].kind == EventKind::HostOp &&
          t.events[n].kind == EventKind::HostOp && t.events[p].name == t.events[n].name)
        a.merged_into[n] = a.merged_into[p];
    }

  std::unordered_map<uint32_t, std::vector<uint32_t>> samples_by_tid;
  for (uint32_t i = 0; i < t.memory.size(); ++i) samples_by_tid[t.memory[i].tid].push_back(i);
  std::vector<uint8_t> op_flag(t.strings.size(), 2), module_flag(t.strings.size(), 2);
  auto is_op = [&](uint32_t i) {
    uint8_t& f = op_flag[t.events[i].name];
    if (f == 2) f = is_memory_operator(t, t.events[i]) ? 1 : 0;
    return t.events[i].kind == EventKind::HostOp && f == 1;
  };
  auto is_module = [&](uint32_t i) {
    uint8_t& f = module_flag[t.events[i].name];
    if (f == 2) f = is_module_range(t, t.events[i]) ? 1 : 0;
    return f == 1;
  };
  auto is_optimizer_step = [&](uint32_t i) { return starts_with(t.name_of(t.events[i]), "Optimizer.step"); };
  struct Open {
    uint32_t node, outer_op, module, optimizer;
  };
  for (auto& [tid, samples] : samples_by_tid) {
    std::stable_sort(samples.begin(), samples.end(),
                     [&](uint32_t x, uint32_t y) { return t.memory[x].ts_ns < t.memory[y].ts_ns; });
    auto found = nodes_by_tid.find(tid);
    if (found == nodes_by_tid.end()) continue;
    const std::vector<uint32_t>& nodes = found->second;
    std::vector<Open> stack;
    size_t next = 0;
    auto pop_ended = [&](int64_t ts) {
      while (!stack.empty() && t.events[stack.back().node].end_ns() <= ts) stack.pop_back();
    };
    for (uint32_t s : samples) {
      const int64_t ts = t.memory[s].ts_ns;
      while (next < nodes.size() && t.events[nodes[next]].start_ns <= ts) {
        const uint32_t n = nodes[next++];
        pop_ended(t.events[n].start_ns);
        Open o{n, kNoIndex, kNoIndex, kNoIndex};
        if (!stack.empty()) {
          o.outer_op = stack.back().outer_op;
          o.module = stack.back().module;
          o.optimizer = stack.back().optimizer;
        }
        if (o.outer_op == kNoIndex && is_op(n)) o.outer_op = n;
        if (is_module(n)) o.module = n;
        if (o.optimizer == kNoIndex && is_optimizer_step(n)) o.optimizer = n;
        stack.push_back(o);
      }
      pop_ended(ts);   // a node ending at ts does not contain a record at ts
      if (!stack.empty()) {
        // Ancestors that ended before this record was made are below it only when the tree is not
        // properly nested (traces can hold such ranges): the top is still the innermost.
        // What it inherits from them holds only if it contains the record: a range that overhangs
        // its parent's end (a python function on the optimizer step's edge) must not carry the
        // step, or its outermost operator, into the next step's forward.
        const Open& top = stack.back();
        auto holding = [&](uint32_t e) { return e != kNoIndex && t.events[e].end_ns() > ts ? e : kNoIndex; };
        uint32_t outer_op = holding(top.outer_op);
        if (outer_op == kNoIndex && top.outer_op != kNoIndex)
          for (const Open& o : stack)   // the outermost operator still open at the record
            if (t.events[o.node].end_ns() > ts && is_op(o.node)) {
              outer_op = o.node;
              break;
            }
        uint32_t module = holding(top.module);
        if (module == kNoIndex && top.module != kNoIndex)
          for (auto o = stack.rbegin(); o != stack.rend(); ++o)   // the innermost module still open
            if (t.events[o->node].end_ns() > ts && is_module(o->node)) {
              module = o->node;
              break;
            }
        a.of_sample[s] = {a.merged_into[top.node], outer_op, module, holding(top.optimizer)};
      }
    }
  }
  return a;
}

}  // namespace

bool is_memory_operator(const Trace& t, const Event& e) {
  if (e.kind != EventKind::HostOp) return false;
  const std::string& name = t.name_of(e);
  return name != "DataParallel.forward" && name != "DistributedDataParallel.forward" &&
         !starts_with(name, "Optimizer.") && !is_dataloader_name(name);
}

bool is_module_range(const Trace& t, const Event& e) { return starts_with(t.name_of(e), "nn.Module: "); }

namespace {

std::vector<DeviceMemory> device_memory(const Trace& t, const Attributions& attr) {
  std::map<int, DeviceMemory> by_device;
  for (uint32_t i = 0; i < t.memory.size(); ++i) {
    const MemorySample& m = t.memory[i];
    if (m.device < -1) continue;
    DeviceMemory& d = by_device[m.device];
    d.device = m.device;
    d.samples.push_back(i);
  }
  std::vector<DeviceMemory> out;
  for (auto& [device, d] : by_device) {
    std::stable_sort(d.samples.begin(), d.samples.end(),
                     [&](uint32_t x, uint32_t y) { return t.memory[x].ts_ns < t.memory[y].ts_ns; });
    const size_t n = d.samples.size();
    bool recorded = false, addressed = false;
    for (uint32_t s : d.samples) {
      recorded |= t.memory[s].total_allocated >= 0;
      addressed |= t.memory[s].addr != 0 && t.memory[s].bytes_delta != 0;
    }
    // Blocks: each allocation until the next free of its address. An allocation at an address
    // that is still open proves the block there was freed unheard (on a thread with no reporter):
    // it ends there, and a level rebuilt from blocks drops by its size.
    std::vector<int64_t> adjust(n, 0);
    std::unordered_map<uint64_t, uint32_t> open;
    std::unordered_map<uint64_t, std::vector<uint32_t>> blocks_at;   // addr -> blocks in time order
    std::unordered_map<uint64_t, std::vector<size_t>> allocs_at;     // addr -> sample positions of allocations
    for (size_t i = 0; i < n; ++i) {
      const MemorySample& m = t.memory[d.samples[i]];
      if (m.addr == 0 || m.bytes_delta == 0) continue;
      if (m.bytes_delta > 0) {
        allocs_at[m.addr].push_back(i);
        auto it = open.find(m.addr);
        if (it != open.end()) {
          d.blocks[it->second].free_ns = m.ts_ns;
          adjust[i] -= d.blocks[it->second].bytes;
        }
        MemoryBlock b;
        b.addr = m.addr;
        b.bytes = m.bytes_delta;
        b.alloc_ns = m.ts_ns;
        const Attribution& at = attr.of_sample[d.samples[i]];
        if (at.node != kNoIndex && is_memory_operator(t, t.events[at.node])) b.op = at.node;
        b.node = at.node;
        b.outer_op = at.outer_op;
        b.module = at.module;
        if (at.optimizer != kNoIndex) {
          b.in_optimizer_step = true;
          b.scope_end_ns = t.events[at.optimizer].end_ns();
        } else if (at.outer_op != kNoIndex) {
          b.scope_end_ns = t.events[at.outer_op].end_ns();
        }
        open[m.addr] = static_cast<uint32_t>(d.blocks.size());
        blocks_at[m.addr].push_back(static_cast<uint32_t>(d.blocks.size()));
        d.blocks.push_back(b);
      } else {
        auto it = open.find(m.addr);
        if (it != open.end()) {
          d.blocks[it->second].free_ns = m.ts_ns;
          open.erase(it);
        } else {   // allocated before the trace
          MemoryBlock b;
          b.addr = m.addr;
          b.bytes = -m.bytes_delta;
          b.free_ns = m.ts_ns;
          blocks_at[m.addr].push_back(static_cast<uint32_t>(d.blocks.size()));
          d.blocks.push_back(b);
        }
      }
    }
    // Known storages: the block live at their address when they were seen takes their role; one
    // that no block holds was allocated before the trace (or unheard) and lives until the next
    // allocation at its address.
    for (const KnownStorage& k : t.storages) {
      if (k.device != device || k.addr == 0) continue;
      bool found = false;
      uint32_t last_before = kNoIndex;
      for (uint32_t bi : blocks_at[k.addr]) {
        MemoryBlock& b = d.blocks[bi];
        if (b.live_at(k.ts_ns)) {
          if (b.role < 0) b.role = static_cast<int8_t>(k.role);
          found = true;
          break;
        }
        if (b.free_ns <= k.ts_ns && (last_before == kNoIndex || b.free_ns > d.blocks[last_before].free_ns))
          last_before = bi;
      }
      if (found) continue;
      MemoryBlock b;
      b.addr = k.addr;
      b.bytes = k.bytes;
      b.role = static_cast<int8_t>(k.role);
      if (last_before != kNoIndex) b.alloc_ns = d.blocks[last_before].free_ns;   // allocated unheard
      for (size_t i : allocs_at[k.addr])
        if (t.memory[d.samples[i]].ts_ns > k.ts_ns) {
          b.free_ns = t.memory[d.samples[i]].ts_ns;
          if (b.before_trace()) adjust[i] -= b.bytes;
          break;
        }
      blocks_at[k.addr].push_back(static_cast<uint32_t>(d.blocks.size()));
      d.blocks.push_back(b);
    }
    std::stable_sort(d.blocks.begin(), d.blocks.end(),
                     [](const MemoryBlock& x, const MemoryBlock& y) { return x.alloc_ns < y.alloc_ns; });

    d.allocated.resize(n);
    d.reserved.assign(n, -1);
    if (recorded) {
      d.level_source = "recorded";
      int64_t level = 0;
      for (size_t i = 0; i < n; ++i) {
        const MemorySample& m = t.memory[d.samples[i]];
        level = m.total_allocated >= 0 ? m.total_allocated : level + m.bytes_delta;
        d.allocated[i] = level;
        d.reserved[i] = m.total_reserved;
      }
    } else {
      // The running sum of sizes; from blocks, on top of what was live before the trace began.
      int64_t base = 0;
      if (addressed) {
        d.level_source = "blocks";
        for (const MemoryBlock& b : d.blocks)
          if (b.before_trace()) base += b.bytes;
      } else {
        d.level_source = "rebuilt";
      }
      int64_t running = base, lowest = 0;
      for (size_t i = 0; i < n; ++i) {
        running += t.memory[d.samples[i]].bytes_delta + adjust[i];
        d.allocated[i] = running;
        lowest = std::min(lowest, running);
      }
      for (int64_t& v : d.allocated) v -= lowest;
    }
    out.push_back(std::move(d));
  }
  return out;
}

// The step whose host range holds ts (its device-extended range when no host range does); -1.
int64_t step_at(const BreakdownResult& steps, int64_t ts) {
  for (const StepBreakdown& s : steps.steps)
    if (s.host_end_ns > s.host_start_ns && s.host_start_ns <= ts && ts < s.host_end_ns) return s.step;
  for (const StepBreakdown& s : steps.steps)
    if (s.start_ns <= ts && ts < s.end_ns) return s.step;
  return -1;
}

std::vector<MemoryOwner> top_owners(const std::unordered_map<uint32_t, MemoryOwner>& by_name, size_t top) {
  std::vector<MemoryOwner> rows;
  for (const auto& [name, o] : by_name) rows.push_back(o);
  std::sort(rows.begin(), rows.end(), [](const MemoryOwner& a, const MemoryOwner& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  if (rows.size() > top) rows.resize(top);
  return rows;
}

void add_owner(const Trace& t, std::unordered_map<uint32_t, MemoryOwner>& into, uint32_t event, int64_t bytes) {
  const uint32_t name = event == kNoIndex ? kNoIndex : t.events[event].name;
  MemoryOwner& o = into[name];
  if (o.count == 0) o.name = name == kNoIndex ? std::string() : t.strings.at(name);
  o.bytes += bytes;
  o.count += 1;
}

// Each block made in the trace and live at ts: what the owners at a moment count.
template <class F>
void each_live_made(const DeviceMemory& d, int64_t ts, F f) {
  for (const MemoryBlock& b : d.blocks) {
    if (b.alloc_ns > ts) break;   // blocks are in allocation order
    if (b.live_at(ts) && !b.before_trace()) f(b);
  }
}

// Each block a growth's owners count: made in one of its windows and live at its last step's end,
// neither a parameter, a gradient nor optimizer state.
template <class F>
void each_survivor(const DeviceMemory& d, const MemoryGrowth& g, F f) {
  for (const auto& [from, to] : g.survivor_windows) {
    auto first = std::lower_bound(d.blocks.begin(), d.blocks.end(), from,
                                  [](const MemoryBlock& b, int64_t ts) { return b.alloc_ns < ts; });
    for (auto it = first; it != d.blocks.end() && it->alloc_ns < to; ++it)
      if (it->role < 0 && it->free_ns > g.last_end_ns) f(*it);
  }
}

MemoryMoment moment(const Trace& t, const DeviceMemory& d, size_t at, const BreakdownResult& steps, size_t top) {
  MemoryMoment m;
  m.device = d.device;
  m.ts_ns = t.memory[d.samples[at]].ts_ns;
  m.step = step_at(steps, m.ts_ns);
  m.bytes = d.allocated[at];
  m.reserved_bytes = d.reserved[at];
  MemoryComposition& c = m.composition;
  std::unordered_map<uint32_t, MemoryOwner> ops;
  int64_t classified = 0;
  for (const MemoryBlock& b : d.blocks) {
    if (b.alloc_ns > m.ts_ns) break;   // blocks are in allocation order
    if (!b.live_at(m.ts_ns)) continue;
    int64_t* into = &c.unknown;
    switch (b.role) {
      case static_cast<int8_t>(StorageRole::Parameter): into = &c.parameters; break;
      case static_cast<int8_t>(StorageRole::Gradient): into = &c.gradients; break;
      case static_cast<int8_t>(StorageRole::OptimizerState): into = &c.optimizer_state; break;
      default:
        if (b.before_trace() || b.scope_end_ns == kBeforeTrace) break;
        if (b.free_ns <= b.scope_end_ns) into = &c.temporary;
        else if (!b.in_optimizer_step) into = &c.activations;
    }
    if (into != &c.unknown) {
      *into += b.bytes;
      classified += b.bytes;
    }
    if (!b.before_trace()) add_owner(t, ops, b.outer_op, b.bytes);
  }
  c.unknown = std::max<int64_t>(0, m.bytes - classified);
  m.top_ops = top_owners(ops, top);
  return m;
}

// The level at the end of each step (the last record at or before it) after the first step.
MemoryGrowth growth(const Trace& t, const DeviceMemory& d, const BreakdownResult& steps, size_t top) {
  MemoryGrowth g;
  g.device = d.device;
  auto end_of = [](const StepBreakdown& s) { return s.host_end_ns > s.host_start_ns ? s.host_end_ns : s.end_ns; };
  auto start_of = [](const StepBreakdown& s) {
    return s.host_end_ns > s.host_start_ns ? s.host_start_ns : s.start_ns;
  };
  std::vector<const StepBreakdown*> counted;
  for (size_t k = 1; k < steps.steps.size(); ++k) {
    const StepBreakdown& s = steps.steps[k];
    const int64_t end = end_of(s);
    auto it = std::upper_bound(d.samples.begin(), d.samples.end(), end,
                               [&](int64_t ts, uint32_t i) { return ts < t.memory[i].ts_ns; });
    if (it == d.samples.begin()) continue;
    g.steps.push_back(s.step);
    g.end_bytes.push_back(d.allocated[size_t(it - d.samples.begin()) - 1]);
    counted.push_back(&s);
  }
  const size_t n = g.end_bytes.size();
  if (n < 2) return g;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += double(g.steps[i]);
    my += double(g.end_bytes[i]);
  }
  mx /= double(n);
  my /= double(n);
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (double(g.steps[i]) - mx) * (double(g.steps[i]) - mx);
    sxy += (double(g.steps[i]) - mx) * (double(g.end_bytes[i]) - my);
  }
  g.bytes_per_step = sxx > 0 ? sxy / sxx : 0.0;
  for (size_t i = 1; i < n; ++i) g.rising += g.end_bytes[i] > g.end_bytes[i - 1] ? 1 : 0;
  g.flagged = int(n) >= kGrowthMinLevels && g.bytes_per_step >= kGrowthMinBytesPerStep &&
              double(g.rising) >= kGrowthMinRisingShare * double(n - 1);
  // What the counted steps but the last left live at the end of the last one (the last step's own
  // allocations are live at its end by nature).
  g.last_end_ns = end_of(*counted.back());
  for (size_t k = 0; k + 1 < counted.size(); ++k)
    g.survivor_windows.emplace_back(start_of(*counted[k]), end_of(*counted[k]));
  std::unordered_map<uint32_t, MemoryOwner> ops;
  each_survivor(d, g, [&](const MemoryBlock& b) { add_owner(t, ops, b.outer_op, b.bytes); });
  g.steps_counted = int64_t(counted.size()) - 1;
  g.ops = top_owners(ops, top);
  return g;
}

std::vector<MemoryOpRow> memory_op_table(const Trace& t, const Attributions& attr) {
  struct Totals {
    int64_t increase = 0, alloc_count = 0, alloc_bytes = 0;
    int64_t self_increase = 0, self_alloc_count = 0, self_alloc_bytes = 0;
  };
  // (operator name, device) -> totals
  std::map<std::pair<uint32_t, int>, Totals> by_key;
  std::vector<int8_t> op_name(t.strings.size(), -1);
  auto is_op = [&](uint32_t i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::HostOp) return false;
    if (op_name[e.name] < 0) op_name[e.name] = is_memory_operator(t, e) ? 1 : 0;
    return op_name[e.name] == 1;
  };
  for (uint32_t s = 0; s < t.memory.size(); ++s) {
    const MemorySample& m = t.memory[s];
    const uint32_t node = attr.of_sample[s].node;
    // a window's context: counted in the window that owns it
    if (node == kNoIndex || !is_op(node) || m.device < -1 || (m.flags & kContextFlag)) continue;
    const int64_t alloc = m.bytes_delta > 0 ? m.bytes_delta : 0;
    const int64_t count = m.bytes_delta > 0 ? 1 : 0;
    Totals& self = by_key[{t.events[node].name, m.device}];
    self.self_increase += m.bytes_delta;
    self.self_alloc_bytes += alloc;
    self.self_alloc_count += count;
    for (uint32_t n = node; n != kNoIndex; n = attr.parent[n]) {
      if (attr.merged_into[n] != n || !is_op(n)) continue;   // a merged node counts in the one it is
      Totals& inc = by_key[{t.events[n].name, m.device}];
      inc.increase += m.bytes_delta;
      inc.alloc_bytes += alloc;
      inc.alloc_count += count;
    }
  }
  std::unordered_map<uint32_t, int64_t> calls;
  if (!by_key.empty())
    for (uint32_t i = 0; i < t.events.size(); ++i)
      if (is_op(i) && attr.merged_into[i] == i && !(t.events[i].flags & kContextFlag)) ++calls[t.events[i].name];
  std::vector<MemoryOpRow> rows;
  for (const auto& [key, v] : by_key) {
    if (!(v.increase || v.alloc_count || v.alloc_bytes || v.self_increase || v.self_alloc_count ||
          v.self_alloc_bytes))
      continue;
    MemoryOpRow r;
    r.name = t.strings.at(key.first);
    r.device = key.second;
    r.calls = calls[key.first];
    r.size_increase_bytes = v.increase;
    r.self_size_increase_bytes = v.self_increase;
    r.alloc_count = v.alloc_count;
    r.self_alloc_count = v.self_alloc_count;
    r.alloc_bytes = v.alloc_bytes;
    r.self_alloc_bytes = v.self_alloc_bytes;
    rows.push_back(std::move(r));
  }
  // GPUs first, then the host; in each, the largest self increase first (the plugin's default order).
  std::sort(rows.begin(), rows.end(), [](const MemoryOpRow& a, const MemoryOpRow& b) {
    if ((a.device < 0) != (b.device < 0)) return a.device >= 0;
    if (a.device != b.device) return a.device < b.device;
    if (a.self_size_increase_bytes != b.self_size_increase_bytes)
      return a.self_size_increase_bytes > b.self_size_increase_bytes;
    return a.name < b.name;
  });
  return rows;
}

}  // namespace

std::vector<DeviceMemory> device_memory(const Trace& t, bool attributed) {
  if (attributed) return device_memory(t, attribute(t));
  Attributions none;
  none.of_sample.resize(t.memory.size());
  return device_memory(t, none);
}

std::vector<MemoryOpRow> memory_op_table(const Trace& t) { return memory_op_table(t, attribute(t)); }

std::vector<std::pair<std::string, int64_t>> owned_memory_op_calls(const Trace& t) {
  const Attributions attr = attribute(t, /*nodes_anyway=*/true);
  std::map<uint32_t, int64_t> by_name;
  std::vector<int8_t> op_name(t.strings.size(), -1);
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::HostOp || (e.flags & kContextFlag) || attr.merged_into[i] != i) continue;
    if (op_name[e.name] < 0) op_name[e.name] = is_memory_operator(t, e) ? 1 : 0;
    if (op_name[e.name] == 1) ++by_name[e.name];
  }
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, n] : by_name) out.emplace_back(t.strings.at(name), n);
  return out;
}

MemoryView memory_view(const Trace& t, const BreakdownResult& steps, size_t top) {
  MemoryView v;
  if (t.memory.empty()) return v;
  const Attributions attr = attribute(t);
  v.ops = memory_op_table(t, attr);
  v.devices = device_memory(t, attr);
  for (const DeviceMemory& d : v.devices) {
    if (d.samples.empty()) continue;
    if (d.level_source != "rebuilt") {
      size_t peak = 0;
      for (size_t i = 1; i < d.allocated.size(); ++i)
        if (d.allocated[i] > d.allocated[peak]) peak = i;
      v.peaks.push_back(moment(t, d, peak, steps, top));
      v.ends.push_back(moment(t, d, d.samples.size() - 1, steps, top));
    }
    MemoryGrowth g = growth(t, d, steps, top);
    if (!g.end_bytes.empty()) v.growth.push_back(std::move(g));
  }
  return v;
}

void name_memory_modules(const Trace& t, const ModuleView& modules, MemoryView& v, size_t top) {
  if (modules.rows.empty() || modules.row_of.size() != t.events.size()) return;
  // A block's row: that of the innermost event around its allocation; where that event has none (a
  // step marker, a range outside every module), the module call around it.
  auto row_of_block = [&](const MemoryBlock& b) {
    uint32_t row = b.node != kNoIndex ? modules.row_of[b.node] : kNoIndex;
    if (row == kNoIndex && b.module != kNoIndex) row = modules.row_of[b.module];
    return row;
  };
  auto owners = [&](auto each) {
    std::unordered_map<uint32_t, MemoryOwner> by_row;
    each([&](const MemoryBlock& b) {
      const uint32_t row = row_of_block(b);
      if (row == kNoIndex) return;
      MemoryOwner& o = by_row[row];
      if (o.count == 0) o.name = modules.rows[row].path;
      o.bytes += b.bytes;
      o.count += 1;
    });
    return top_owners(by_row, top);
  };
  auto device = [&](int id) -> const DeviceMemory* {
    for (const DeviceMemory& d : v.devices)
      if (d.device == id) return &d;
    return nullptr;
  };
  for (std::vector<MemoryMoment>* moments : {&v.peaks, &v.ends})
    for (MemoryMoment& m : *moments)
      if (const DeviceMemory* d = device(m.device))
        m.top_modules = owners([&](auto f) { each_live_made(*d, m.ts_ns, f); });
  for (MemoryGrowth& g : v.growth)
    if (const DeviceMemory* d = device(g.device)) g.modules = owners([&](auto f) { each_survivor(*d, g, f); });
}

// The table's order, by device then self increase, is kept for the rows shown.
void cap_memory_ops(std::vector<MemoryOpRow>& rows, size_t max_rows) {
  std::map<int, size_t> per_device;
  for (const MemoryOpRow& r : rows) ++per_device[r.device];
  bool over = false;
  for (const auto& [device, n] : per_device) over = over || n > max_rows;
  if (!over) return;
  std::vector<MemoryOpRow> out;
  size_t begin = 0;
  while (begin < rows.size()) {   // rows are grouped by device
    size_t end = begin;
    while (end < rows.size() && rows[end].device == rows[begin].device) ++end;
    std::vector<MemoryOpRow> group(std::make_move_iterator(rows.begin() + begin),
                                   std::make_move_iterator(rows.begin() + end));
    if (group.size() > max_rows) {
      std::vector<size_t> order(group.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return group[x].alloc_bytes != group[y].alloc_bytes
                   ? group[x].alloc_bytes > group[y].alloc_bytes
                   : group[x].self_alloc_bytes > group[y].self_alloc_bytes;
      });
      std::vector<uint8_t> keep(group.size(), 0);
      for (size_t i = 0; i < max_rows - 1; ++i) keep[order[i]] = 1;
      MemoryOpRow other;
      other.device = group.front().device;
      std::vector<MemoryOpRow> kept;
      for (size_t i = 0; i < group.size(); ++i) {
        if (keep[i]) {
          kept.push_back(std::move(group[i]));
          continue;
        }
        const MemoryOpRow& r = group[i];
        other.calls += r.calls;
        other.size_increase_bytes += r.size_increase_bytes;
        other.self_size_increase_bytes += r.self_size_increase_bytes;
        other.alloc_count += r.alloc_count;
        other.self_alloc_count += r.self_alloc_count;
        other.alloc_bytes += r.alloc_bytes;
        other.self_alloc_bytes += r.self_alloc_bytes;
      }
      other.name = other_names(group.size() - kept.size());
      kept.push_back(std::move(other));
      group = std::move(kept);
    }
    for (MemoryOpRow& r : group) out.push_back(std::move(r));
    begin = end;
  }
  rows = std::move(out);
}

}  // namespace gpuprof
