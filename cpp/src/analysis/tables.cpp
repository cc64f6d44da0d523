#include "gpuprof/analysis/tables.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <iterator>
#include <map>
#include <tuple>
#include <unordered_map>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/occupancy.h"
#include "gpuprof/analysis/tensor_cores.h"

namespace gpuprof {

namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(0, p.size()) == p;
}

// The host side of a copy decides whether it could be asynchronous: pinned, or pageable (staged
// through a driver buffer, and synchronous with the host).
const char* host_memory_name(const CopyInfo& c) {
  MemoryKind host = MemoryKind::Unknown;
  if (c.kind == CopyKind::HtoD) host = c.src;
  else if (c.kind == CopyKind::DtoH) host = c.dst;
  if (host == MemoryKind::Pageable) return "pageable";
  if (host == MemoryKind::Pinned) return "pinned";
  return "";
}

// Weighted means of rows merged into one: the rows' own means weighted by their total time.
struct WeightedMean {
  double sum = 0.0, weight = 0.0;
  void add(double mean, int64_t total_ns) {
    if (mean < 0.0) return;   // not known for that row
    sum += mean * double(total_ns);
    weight += double(total_ns);
  }
  double value() const { return weight > 0.0 ? sum / weight : -1.0; }
};

// The table's kMaxNameRows - 1 heaviest rows (it is sorted), and one row for the rest, made by
// `merge(other, row)` over them from a row with only zeros, named by `name(other, count)`.
template <class Row, class Merge, class Name>
void cap_rows(std::vector<Row>& rows, Merge merge, Name name) {
  if (rows.size() <= kMaxNameRows) return;
  const size_t keep = kMaxNameRows - 1;
  Row other;
  for (size_t i = keep; i < rows.size(); ++i) merge(other, rows[i]);
  name(other, rows.size() - keep);
  rows.resize(keep);
  rows.push_back(std::move(other));
}

// An operator row's sums by name and shapes ids (shapes 0: none), before any name is copied.
struct OperatorSums {
  uint32_t name = 0, shapes = 0;
  int64_t calls = 0, host_self_ns = 0, host_total_ns = 0, device_self_ns = 0, device_total_ns = 0;
  int64_t tc_self_ns = 0, tc_total_ns = 0;
  int64_t flops = 0, flop_bytes = 0;   // FLOPs counted at these calls; bytes -1: a call's unknown
  FlopClass flop_class = FlopClass::None;
  void add(const OperatorSums& o) {
    calls += o.calls;
    host_self_ns += o.host_self_ns;
    host_total_ns += o.host_total_ns;
    device_self_ns += o.device_self_ns;
    device_total_ns += o.device_total_ns;
    tc_self_ns += o.tc_self_ns;
    tc_total_ns += o.tc_total_ns;
    flops += o.flops;   // FLOPs: rows of different classes (the capped tail) make an Other row
    flop_bytes = o.flop_bytes < 0 || flop_bytes < 0 ? -1 : flop_bytes + o.flop_bytes;
    if (o.flop_class != FlopClass::None && flop_class != o.flop_class)
      flop_class = flop_class == FlopClass::None ? o.flop_class : FlopClass::Other;
  }
};

// The rows of `sums`, largest host total first (ties by name, then shapes), capped as every name
// table is: past kMaxNameRows, the tail summed into one "other names (N)" row. Only the rows kept
// copy their names.
std::vector<OperatorRow> operator_rows(const Trace& t, std::vector<OperatorSums>& sums) {
  std::sort(sums.begin(), sums.end(), [&](const OperatorSums& a, const OperatorSums& b) {
    if (a.host_total_ns != b.host_total_ns) return a.host_total_ns > b.host_total_ns;
    if (a.name != b.name) return t.strings.at(a.name) < t.strings.at(b.name);
    return t.strings.at(a.shapes) < t.strings.at(b.shapes);
  });
  const size_t named = sums.size() <= kMaxNameRows ? sums.size() : kMaxNameRows - 1;
  OperatorSums other;
  for (size_t k = named; k < sums.size(); ++k) other.add(sums[k]);
  std::vector<OperatorRow> rows;
  rows.reserve(std::min(sums.size(), kMaxNameRows));
  auto row_of = [](const OperatorSums& r) {
    OperatorRow row;
    row.calls = r.calls;
    row.host_self_ns = r.host_self_ns;
    row.host_total_ns = r.host_total_ns;
    row.device_self_ns = r.device_self_ns;
    row.device_total_ns = r.device_total_ns;
    row.tc_self_ns = r.tc_self_ns;
    row.tc_total_ns = r.tc_total_ns;
    row.flops = r.flops;
    row.flop_bytes = r.flop_bytes;
    row.flop_class = r.flop_class;
    return row;
  };
  for (size_t k = 0; k < named; ++k) {
    OperatorRow row = row_of(sums[k]);
    row.name = t.strings.at(sums[k].name);
    row.input_shapes = t.strings.at(sums[k].shapes);
    row.tc_eligible = is_tensor_core_eligible_op(row.name);
    rows.push_back(std::move(row));
  }
  if (named < sums.size()) {
    rows.push_back(row_of(other));
    rows.back().name = other_names(sums.size() - named);
  }
  return rows;
}

}  // namespace

std::string display_name(const std::string& full) {
  if (full.size() <= kMaxNameBytes) return full;
  uint64_t hash = 1469598103934665603ULL;   // FNV-1a: the same name, the same text, in every report
  for (const char c : full) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  char note[80];
  std::snprintf(note, sizeof note, "... [%zu bytes, #%016llx]", full.size(),
                static_cast<unsigned long long>(hash));
  size_t cut = kMaxNameBytes - sizeof note;
  while (cut > 0 && (static_cast<unsigned char>(full[cut]) & 0xC0) == 0x80) --cut;   // not inside a character
  return full.substr(0, cut) + note;
}

std::string other_names(size_t rows) { return "other names (" + std::to_string(rows) + ")"; }

std::vector<KernelRow> kernel_table(const Trace& t) {
  struct Acc {
    KernelRow row;
    double blocks_weighted = 0.0, blocks_weight = 0.0;
    double occ_weighted = 0.0, occ_weight = 0.0;
  };
  std::unordered_map<uint32_t, Acc> by_name;
  for (const Event& e : t.events) {
    if (e.kind != EventKind::Kernel || (e.flags & kContextFlag))
      continue;   // a window's context: counted where owned
    Acc& a = by_name[e.name];
    KernelRow& r = a.row;
    if (r.calls == 0) {
      r.name = t.name_of(e);
      r.tensor_cores = is_tensor_core_kernel(r.name);
      r.min_ns = r.max_ns = e.dur_ns;
    }
    ++r.calls;
    r.total_ns += e.dur_ns;
    r.min_ns = std::min(r.min_ns, e.dur_ns);
    r.max_ns = std::max(r.max_ns, e.dur_ns);
    if (e.aux >= t.kernels.size()) continue;
    const KernelInfo& k = t.kernels[e.aux];
    const DeviceProps* d = t.device(e.device);
    double blocks_per_sm = k.blocks_per_sm;
    if (d != nullptr && d->num_sms > 0 && k.blocks() > 0) blocks_per_sm = double(k.blocks()) / d->num_sms;
    // Weighted by duration, as the old plugin did, so a kernel's long calls count for more.
    const double w = double(std::max<int64_t>(e.dur_ns, 0));
    if (blocks_per_sm >= 0.0) {
      a.blocks_weighted += blocks_per_sm * w;
      a.blocks_weight += w;
    }
    const double occ = kernel_occupancy_pct(d, k);
    if (occ >= 0.0) {
      a.occ_weighted += occ * w;
      a.occ_weight += w;
    }
  }
  std::vector<KernelRow> rows;
  rows.reserve(by_name.size());
  for (auto& [id, a] : by_name) {
    if (a.blocks_weight > 0.0) a.row.mean_blocks_per_sm = a.blocks_weighted / a.blocks_weight;
    if (a.occ_weight > 0.0) a.row.mean_occupancy_pct = a.occ_weighted / a.occ_weight;
    rows.push_back(std::move(a.row));
  }
  std::sort(rows.begin(), rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  WeightedMean blocks, occupancy;
  cap_rows(
      rows,
      [&](KernelRow& o, const KernelRow& r) {
        o.min_ns = o.calls == 0 ? r.min_ns : std::min(o.min_ns, r.min_ns);
        o.max_ns = std::max(o.max_ns, r.max_ns);
        o.calls += r.calls;
        o.total_ns += r.total_ns;
        blocks.add(r.mean_blocks_per_sm, r.total_ns);
        occupancy.add(r.mean_occupancy_pct, r.total_ns);
      },
      [&](KernelRow& o, size_t n) {
        o.name = other_names(n);
        o.mean_blocks_per_sm = blocks.value();
        o.mean_occupancy_pct = occupancy.value();
      });
  return rows;
}

OperatorTables operator_tables(const Trace& t, const LaunchLinks& links, const FlopCounts* flops,
                               const std::vector<uint32_t>* outer_first,
                               const std::vector<uint8_t>* repeated_ops) {
  const size_t n = t.events.size();
  const std::vector<uint32_t> sorted = outer_first ? std::vector<uint32_t>() : host_ops_outer_first(t);
  const std::vector<uint32_t>& ops = outer_first ? *outer_first : sorted;
  // The sums below are kept per host op, by its place in `ops` (a host op's rank), not per event:
  // fewer and smaller arrays to clear and fill than one per event of each.
  const uint32_t m = static_cast<uint32_t>(ops.size());
  std::vector<uint32_t> rank(n, kNoIndex);
  for (uint32_t k = 0; k < m; ++k) rank[ops[k]] = k;
  const auto rank_of = [&](uint32_t event) { return event < n ? rank[event] : kNoIndex; };
  // FLOPs: each op's counted op, if any.
  std::vector<uint32_t> counted_at;
  if (flops != nullptr && !flops->ops.empty()) {
    counted_at.assign(m, kNoIndex);
    for (uint32_t c = 0; c < flops->ops.size(); ++c) {
      const uint32_t k = rank_of(flops->ops[c].event);
      if (k != kNoIndex) counted_at[k] = c;
    }
  }
  std::vector<int64_t> device_self_ns(m, 0), device_total_ns(m, 0), runtime_ns(m, 0);
  std::vector<int64_t> tc_self_ns(m, 0), tc_total_ns(m, 0);   // tensor-core kernels' time
  std::vector<int8_t> tc_by_name(t.strings.size(), -1);       // each kernel name classified once
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    // The runtime calls an op makes itself (cudaLaunchKernel, cudaMemcpyAsync...) are not its own
    // host work: torch's key_averages and the plugin take them out of its self time.
    const bool runtime = e.kind == EventKind::Runtime;
    if (!e.on_device() && !runtime) continue;
    const uint32_t op = rank_of(links.launching_op(i));
    if (op == kNoIndex) continue;
    (runtime ? runtime_ns : device_self_ns)[op] += e.dur_ns;
    if (e.kind == EventKind::Kernel && e.name < tc_by_name.size()) {
      if (tc_by_name[e.name] < 0) tc_by_name[e.name] = is_tensor_core_kernel(t.name_of(e)) ? 1 : 0;
      if (tc_by_name[e.name] == 1) tc_self_ns[op] += e.dur_ns;
    }
  }
  // Inner ops come after their parents, so a reverse walk finishes each op before its parent.
  for (uint32_t k = m; k-- > 0;) {
    device_total_ns[k] += device_self_ns[k];
    tc_total_ns[k] += tc_self_ns[k];
    const uint32_t parent = rank_of(links.parent_op[ops[k]]);
    if (parent == kNoIndex) continue;
    device_total_ns[parent] += device_total_ns[k];
    tc_total_ns[parent] += tc_total_ns[k];
  }

  // torch.profiler's rule for same-name nesting (key_averages, which users compare against): an
  // op whose parent has the same name and has no other child op is the same call seen twice (an
  // autograd-level and a kernel-level RecordFunction, e.g. aten::add_ in aten::add_). It is not
  // counted; its parent keeps its children's time and its device work (docs/metrics.md).
  const std::vector<uint8_t> own_repeated =
      repeated_ops && repeated_ops->size() == n ? std::vector<uint8_t>() : repeated_op_calls(t, links);
  const std::vector<uint8_t>& repeated = own_repeated.empty() ? *repeated_ops : own_repeated;
  std::vector<uint32_t> keep_as(m, kNoIndex);   // the counted op (rank) an op's time belongs to
  // counted_child_ns: the host time of an op's counted children ops and of its runtime calls.
  std::vector<int64_t> counted_child_ns(m, 0), counted_device_self_ns(m, 0), counted_tc_self_ns(m, 0);
  for (uint32_t k = 0; k < m; ++k) {   // outer first: a parent is resolved before its children
    const uint32_t i = ops[k];
    const uint32_t parent = rank_of(links.parent_op[i]);
    const bool dup = repeated[i] != 0 && parent != kNoIndex;
    keep_as[k] = dup ? keep_as[parent] : k;
    counted_device_self_ns[keep_as[k]] += device_self_ns[k];
    counted_tc_self_ns[keep_as[k]] += tc_self_ns[k];
    counted_child_ns[keep_as[k]] += runtime_ns[k];
    if (!dup && parent != kNoIndex) counted_child_ns[keep_as[parent]] += t.events[i].dur_ns;
  }

  // Sums per (name id, shapes id) in numbers only; names are copied for the rows kept: a trace of
  // a million distinct names copies a few thousand. The by-name sums add up each name's.
  std::vector<OperatorSums> by_shape;
  std::unordered_map<uint64_t, uint32_t> index;   // (name id << 32 | shapes id) -> by_shape
  std::vector<uint32_t> row_without_shapes(t.strings.size(), kNoIndex);   // name id -> by_shape
  std::vector<int8_t> torch_range(t.strings.size(), -1);   // each op name checked once
  bool shapes_recorded = false;
  bool shapes_beyond_capture = false;                        // FLOPs: shapes on other ops than its
  std::vector<int8_t> captured_only(t.strings.size(), -1);   // each op name checked once
  for (uint32_t k = 0; k < m; ++k) {
    if (keep_as[k] != k) continue;
    const Event& e = t.events[ops[k]];
    if (e.flags & kContextFlag) continue;   // a window's context: counted in the window that owns it
    if (e.name < torch_range.size()) {
      if (torch_range[e.name] < 0) torch_range[e.name] = is_torch_range_op_name(t.name_of(e)) ? 1 : 0;
      if (torch_range[e.name] == 1) continue;   // a range, not an operator (range_table)
    }
    const uint32_t shapes = e.aux < t.strings.size() ? e.aux : 0;
    shapes_recorded = shapes_recorded || shapes != 0;
    if (shapes != 0 && !shapes_beyond_capture && e.name < captured_only.size()) {
      // FLOPs: live sessions record the matrix-class ops' shapes without record_shapes (the FLOP
      // capture); shapes on any other op mean they were recorded for every op.
      if (captured_only[e.name] < 0) captured_only[e.name] = flop_class_of(t.name_of(e)) == FlopClass::Matmul;
      shapes_beyond_capture = captured_only[e.name] == 0;
    }
    // Without shapes (most traces), the row is found by the name's slot; with them, by the hash.
    uint32_t row = kNoIndex;
    if (shapes == 0 && e.name < row_without_shapes.size()) {
      row = row_without_shapes[e.name];
      if (row == kNoIndex) row = row_without_shapes[e.name] = uint32_t(by_shape.size());
    } else {
      row = index.emplace((uint64_t(e.name) << 32) | shapes, uint32_t(by_shape.size())).first->second;
    }
    if (row == by_shape.size()) by_shape.push_back({e.name, shapes});
    OperatorSums& r = by_shape[row];
    ++r.calls;
    r.host_total_ns += e.dur_ns;
    r.host_self_ns += std::max<int64_t>(e.dur_ns - counted_child_ns[k], 0);
    r.device_self_ns += counted_device_self_ns[k];
    r.device_total_ns += device_total_ns[k];
    r.tc_self_ns += counted_tc_self_ns[k];
    r.tc_total_ns += tc_total_ns[k];
    if (!counted_at.empty() && counted_at[k] != kNoIndex) {   // FLOPs
      const CountedOp& c = flops->ops[counted_at[k]];
      r.flops += c.flops;
      r.flop_bytes = c.bytes < 0 || r.flop_bytes < 0 ? -1 : r.flop_bytes + c.bytes;
      if (c.cls != FlopClass::None) r.flop_class = c.cls;
    }
  }
  index = {};
  OperatorTables out;
  if (!shapes_recorded) {   // one row per name already: by_shape would repeat it
    out.by_name = operator_rows(t, by_shape);
    return out;
  }
  std::vector<OperatorSums> by_name;
  std::unordered_map<uint32_t, uint32_t> name_index;   // name id -> by_name
  for (const OperatorSums& r : by_shape) {
    const auto [it, added] = name_index.emplace(r.name, uint32_t(by_name.size()));
    if (added) by_name.push_back({r.name, 0});
    by_name[it->second].add(r);
  }
  out.by_name = operator_rows(t, by_name);
  out.by_shape = operator_rows(t, by_shape);
  out.shapes_recorded = shapes_beyond_capture;
  return out;
}

std::vector<OperatorRow> operator_table(const Trace& t, const LaunchLinks& links, const FlopCounts* flops,
                                        const std::vector<uint32_t>* outer_first) {
  return operator_tables(t, links, flops, outer_first).by_name;
}

bool is_torch_range_op_name(std::string_view name) {
  return is_dataloader_name(name) || starts_with(name, "Optimizer.") || name == "DataParallel.forward" ||
         name == "DistributedDataParallel.forward";
}

std::vector<KernelOpRow> kernel_op_table(const Trace& t, const LaunchLinks& links) {
  struct Acc {
    KernelOpRow row;
    double blocks_weighted = 0.0, blocks_weight = 0.0;
    double occ_weighted = 0.0, occ_weight = 0.0;
  };
  // (kernel name id, op name id, grid, block, registers, shared memory) -> row
  using Key = std::tuple<uint32_t, uint32_t, std::array<int32_t, 6>, int32_t, int64_t>;
  struct KeyHash {   // FNV-1a over the fields
    size_t operator()(const Key& k) const {
      uint64_t h = (uint64_t(std::get<0>(k)) << 32) ^ std::get<1>(k);
      for (int32_t v : std::get<2>(k)) h = (h ^ uint32_t(v)) * 1099511628211ull;
      return size_t((h ^ uint32_t(std::get<3>(k)) ^ (uint64_t(std::get<4>(k)) << 24)) * 1099511628211ull);
    }
  };
  std::unordered_map<Key, uint32_t, KeyHash> number_of;   // each key's accumulator (a hash per kernel)
  std::vector<Acc> accs;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (e.kind != EventKind::Kernel || (e.flags & kContextFlag)) continue;
    const KernelInfo* k = e.aux < t.kernels.size() ? &t.kernels[e.aux] : nullptr;
    const uint32_t op = links.launching_op(i);
    const uint32_t op_name = op == kNoIndex ? 0 : t.events[op].name;
    std::array<int32_t, 6> dims{};
    int32_t registers = -1;
    int64_t shared = -1;
    if (k != nullptr) {
      for (int d = 0; d < 3; ++d) {
        dims[d] = k->grid[d];
        dims[3 + d] = k->block[d];
      }
      registers = k->registers_per_thread;
      shared = k->shared_mem_bytes;
    }
    const auto [at, added] =
        number_of.try_emplace({e.name, op_name, dims, registers, shared}, uint32_t(accs.size()));
    if (added) accs.emplace_back();
    Acc& a = accs[at->second];
    KernelOpRow& r = a.row;
    if (r.calls == 0) {
      r.kernel = t.name_of(e);
      r.op = t.strings.at(op_name);
      for (int d = 0; d < 3; ++d) {
        r.grid[d] = dims[d];
        r.block[d] = dims[3 + d];
      }
      r.registers_per_thread = registers;
      r.shared_memory_bytes = shared;
      r.min_ns = r.max_ns = e.dur_ns;
    }
    ++r.calls;
    r.total_ns += e.dur_ns;
    r.min_ns = std::min(r.min_ns, e.dur_ns);
    r.max_ns = std::max(r.max_ns, e.dur_ns);
    if (k == nullptr) continue;
    const DeviceProps* d = t.device(e.device);
    double blocks_per_sm = k->blocks_per_sm;
    if (d != nullptr && d->num_sms > 0 && k->blocks() > 0) blocks_per_sm = double(k->blocks()) / d->num_sms;
    const double w = double(std::max<int64_t>(e.dur_ns, 0));
    if (blocks_per_sm >= 0.0) {
      a.blocks_weighted += blocks_per_sm * w;
      a.blocks_weight += w;
    }
    const double occ = kernel_occupancy_pct(d, *k);
    if (occ >= 0.0) {
      a.occ_weighted += occ * w;
      a.occ_weight += w;
    }
  }
  const std::map<Key, uint32_t> in_order(number_of.begin(), number_of.end());   // rows by key
  std::vector<KernelOpRow> rows;
  rows.reserve(accs.size());
  for (const auto& [key, k] : in_order) {
    Acc& a = accs[k];
    if (a.blocks_weight > 0.0) a.row.blocks_per_sm = a.blocks_weighted / a.blocks_weight;
    if (a.occ_weight > 0.0) a.row.occupancy_pct = a.occ_weighted / a.occ_weight;
    rows.push_back(std::move(a.row));
  }
  // Largest first; ties by name, operator, then the map's order of configurations.
  std::stable_sort(rows.begin(), rows.end(), [](const KernelOpRow& a, const KernelOpRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.kernel != b.kernel ? a.kernel < b.kernel : a.op < b.op;
  });
  WeightedMean blocks, occupancy;
  cap_rows(
      rows,
      [&](KernelOpRow& o, const KernelOpRow& r) {
        o.min_ns = o.calls == 0 ? r.min_ns : std::min(o.min_ns, r.min_ns);
        o.max_ns = std::max(o.max_ns, r.max_ns);
        o.calls += r.calls;
        o.total_ns += r.total_ns;
        blocks.add(r.blocks_per_sm, r.total_ns);
        occupancy.add(r.occupancy_pct, r.total_ns);
      },
      [&](KernelOpRow& o, size_t n) {
        o.kernel = other_names(n);
        o.blocks_per_sm = blocks.value();
        o.occupancy_pct = occupancy.value();
      });
  return rows;
}

std::vector<RangeRow> range_table(const Trace& t) {
  // Backward ops, on any thread: an optimizer stepped with a closure (Lightning) runs the forward
  // and backward inside its range, and the range's own work starts when the last of them ends.
  std::vector<std::pair<int64_t, int64_t>> backward;   // (start, end)
  for (const Event& e : t.events)
    if (e.kind == EventKind::HostOp && starts_with(t.name_of(e), "autograd::engine::evaluate_function"))
      backward.emplace_back(e.start_ns, e.start_ns + e.dur_ns);
  std::sort(backward.begin(), backward.end());
  std::map<uint32_t, RangeRow> by_name;
  std::vector<int8_t> torch_range(t.strings.size(), -1);   // each op name checked once
  for (const Event& e : t.events) {
    if (e.kind == EventKind::HostOp && e.name < torch_range.size()) {
      // An old trace's op that is one of torch's own ranges (the operator tables leave it out).
      if (torch_range[e.name] < 0) torch_range[e.name] = is_torch_range_op_name(t.name_of(e)) ? 1 : 0;
      if (torch_range[e.name] == 0) continue;
    } else if (e.kind != EventKind::UserRange) {
      continue;
    }
    const std::string& name = t.name_of(e);
    if (is_step_marker_name(name) || (e.flags & kContextFlag)) continue;
    RangeRow& r = by_name[e.name];
    if (r.calls == 0) r.name = name;
    ++r.calls;
    r.host_total_ns += e.dur_ns;
    const int64_t end = e.start_ns + e.dur_ns;
    int64_t closure_end = e.start_ns;
    for (auto it = std::lower_bound(backward.begin(), backward.end(), std::make_pair(e.start_ns, int64_t(0)));
         it != backward.end() && it->first < end; ++it)
      if (it->second <= end) closure_end = std::max(closure_end, it->second);
    r.closure_ns += closure_end - e.start_ns;
  }
  std::vector<RangeRow> rows;
  for (auto& [id, r] : by_name) rows.push_back(std::move(r));
  std::sort(rows.begin(), rows.end(), [](const RangeRow& a, const RangeRow& b) {
    return a.host_total_ns != b.host_total_ns ? a.host_total_ns > b.host_total_ns : a.name < b.name;
  });
  cap_rows(
      rows,
      [](RangeRow& o, const RangeRow& r) {
        o.calls += r.calls;
        o.host_total_ns += r.host_total_ns;
        o.closure_ns += r.closure_ns;
      },
      [](RangeRow& o, size_t n) { o.name = other_names(n); });
  return rows;
}

std::vector<CopyRow> copy_table(const Trace& t) {
  std::map<std::pair<std::string, std::string>, CopyRow> by_key;
  for (const Event& e : t.events) {
    if ((e.kind != EventKind::Memcpy && e.kind != EventKind::Memset) || (e.flags & kContextFlag)) continue;
    const CopyInfo* c = e.aux < t.copies.size() ? &t.copies[e.aux] : nullptr;
    std::string kind = e.kind == EventKind::Memset ? "Memset" : copy_kind_key(c ? c->kind : CopyKind::Unknown);
    std::string host = (e.kind == EventKind::Memcpy && c) ? host_memory_name(*c) : "";
    CopyRow& r = by_key[{kind, host}];
    if (r.count == 0) {
      r.kind = kind;
      r.host_memory = host;
    }
    ++r.count;
    r.bytes += c ? c->bytes : 0;
    r.total_ns += e.dur_ns;
  }
  std::vector<CopyRow> rows;
  for (auto& [key, r] : by_key) rows.push_back(std::move(r));
  std::sort(rows.begin(), rows.end(), [](const CopyRow& a, const CopyRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.kind != b.kind ? a.kind < b.kind : a.host_memory < b.host_memory;
  });
  return rows;
}

bool is_host_blocking_call(const Trace& t, const Event& e) {
  const std::string& name = t.name_of(e);
  if (e.kind == EventKind::Sync) {
    // A stream waiting on an event blocks that stream, not the host.
    return name.find("Wait") == std::string::npos && name.find("wait") == std::string::npos;
  }
  if (e.kind != EventKind::Runtime && e.kind != EventKind::Driver) return false;
  // Explicit synchronisation, and the copies that are synchronous with the host by definition
  // (the non-Async cudaMemcpy family; the driver's cuMemcpy without Async).
  static const std::string_view kBlocking[] = {"cudaDeviceSynchronize",
                                               "cudaStreamSynchronize",
                                               "cudaEventSynchronize",
                                               "cudaThreadSynchronize",
                                               "cudaMemcpy",
                                               "cudaMemcpy2D",
                                               "cudaMemcpy3D",
                                               "cudaMemcpyToSymbol",
                                               "cudaMemcpyFromSymbol",
                                               "cudaMemcpyPeer",
                                               "cuCtxSynchronize",
                                               "cuStreamSynchronize",
                                               "cuEventSynchronize",
                                               "cuMemcpy",
                                               "cuMemcpyHtoD_v2",
                                               "cuMemcpyDtoH_v2",
                                               "cuMemcpyDtoD_v2",
                                               "cuMemcpy2D_v2",
                                               "cuMemcpy3D_v2",
                                               "hipDeviceSynchronize",
                                               "hipStreamSynchronize",
                                               "hipEventSynchronize",
                                               "hipMemcpy",
                                               "hipMemcpyWithStream",
                                               "hipMemcpy2D",
                                               "hipMemcpyToSymbol",
                                               "hipMemcpyFromSymbol"};
  for (std::string_view b : kBlocking) {
    // CUPTI names carry a version suffix in some traces (cudaMemcpy_v3020).
    if (name == b || (starts_with(name, b) && name.size() > b.size() + 2 && name.compare(b.size(), 2, "_v") == 0))
      return true;
  }
  return false;
}

std::vector<SyncRow> sync_table(const Trace& t, const LaunchLinks& links) {
  std::map<std::pair<uint32_t, uint32_t>, SyncRow> by_key;   // (call name id, op name id)
  // The answer depends on the name and on whether the record is a CUPTI sync: asked once per
  // (name, sync or not), not per event (a trace has a few dozen runtime-call names).
  std::vector<int8_t> known(t.strings.size() * 2, -1);
  auto blocking = [&](const Event& e) {
    if (e.kind != EventKind::Sync && e.kind != EventKind::Runtime && e.kind != EventKind::Driver) return false;
    const size_t k = size_t(e.name) * 2 + (e.kind == EventKind::Sync ? 1 : 0);
    if (k >= known.size()) return is_host_blocking_call(t, e);
    if (known[k] < 0) known[k] = is_host_blocking_call(t, e) ? 1 : 0;
    return known[k] == 1;
  };
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!blocking(e) || (e.flags & kContextFlag)) continue;   // a window's context: counted where owned
    // A CUPTI sync record of a call we already count is the same wait seen twice.
    if (e.kind == EventKind::Sync && links.runtime_of[i] != kNoIndex && blocking(t.events[links.runtime_of[i]]))
      continue;
    const uint32_t op = links.launching_op(i);
    const uint32_t top = op == kNoIndex ? kNoIndex : links.top_op[op];
    const uint32_t op_name = top == kNoIndex ? 0 : t.events[top].name;
    SyncRow& r = by_key[{e.name, op_name}];
    if (r.count == 0) {
      r.name = t.name_of(e);
      r.op = t.strings.at(op_name);
    }
    ++r.count;
    r.total_ns += e.dur_ns;
  }
  std::vector<SyncRow> rows;
  for (auto& [key, r] : by_key) rows.push_back(std::move(r));
  std::sort(rows.begin(), rows.end(), [](const SyncRow& a, const SyncRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.name != b.name ? a.name < b.name : a.op < b.op;
  });
  cap_rows(
      rows,
      [](SyncRow& o, const SyncRow& r) {
        o.count += r.count;
        o.total_ns += r.total_ns;
      },
      [](SyncRow& o, size_t n) { o.name = other_names(n); });
  return rows;
}

}  // namespace gpuprof
