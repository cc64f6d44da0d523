// One text holding everything an import produces (events with their name ids, kernel and copy
// details, memory samples, devices, metadata, skip counts, stats) or the error it throws: two
// imports are the same exactly when their dumps are. Used by the importer's tests and its fuzzer.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "gpuprof/io/kineto_import.h"

namespace gpuprof::test_support {

// `import(stats)` is one import (of a text or a file) returning its Trace.
template <class Import>
std::string dump_of(Import import, ImportStats* stats_out) {
  std::ostringstream o;
  try {
    ImportStats st;
    const Trace t = import(&st);
    if (stats_out != nullptr) *stats_out = st;
    o << "records " << st.records << " ignored " << st.ignored_records << " bytes " << st.json_bytes << " ns "
      << st.timestamps_ns << " skipped " << t.skipped_events << "\n";
    for (const auto& [reason, n] : st.skipped_by_reason) o << "skip " << reason << " " << n << "\n";
    for (const Event& e : t.events) {
      o << "ev " << e.name << " '" << t.strings.at(e.name) << "' " << int(e.kind) << " " << e.start_ns << " "
        << e.dur_ns << " " << e.correlation << " " << e.external_id << " " << e.tid << " " << e.device << " "
        << int(e.flags);
      if (e.kind == EventKind::Kernel && e.aux < t.kernels.size()) {
        const KernelInfo& k = t.kernels[e.aux];
        o << " k " << e.aux << " " << k.grid[0] << "," << k.grid[1] << "," << k.grid[2] << " " << k.block[0] << ","
          << k.block[1] << "," << k.block[2] << " " << k.registers_per_thread << " " << k.shared_mem_bytes << " "
          << k.blocks_per_sm << " " << k.warps_per_sm << " " << k.est_occupancy_pct;
      } else if ((e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) && e.aux < t.copies.size()) {
        const CopyInfo& c = t.copies[e.aux];
        o << " c " << e.aux << " " << c.bytes << " " << int(c.kind) << " " << int(c.src) << " " << int(c.dst);
      } else if (e.kind == EventKind::HostOp && e.aux < t.strings.size()) {
        o << " shapes " << e.aux << " '" << t.strings.at(e.aux) << "'";
      } else {
        o << " aux " << e.aux;
      }
      o << "\n";
    }
    for (const OpArgs& a : t.op_args)   // FLOPs: types, concrete inputs, the flops arg, by event
      o << "args " << a.event << " " << a.types << " '" << t.strings.at(a.types) << "' " << a.concrete << " '"
        << t.strings.at(a.concrete) << "' " << a.trace_flops << "\n";
    for (const CompiledLaunch& c : t.compiled_launches)
      o << "launch '" << c.name << "' '" << c.backend << "' '" << c.file << "' '" << c.hash << "' '" << c.grid
        << "' " << c.launches << "\n";
    for (const MemorySample& m : t.memory)
      o << "mem " << m.ts_ns << " " << m.bytes_delta << " " << m.total_allocated << " " << m.total_reserved << " "
        << m.device << " " << m.addr << " " << m.tid << "\n";
    for (const DeviceProps& d : t.devices)
      o << "dev " << d.id << " '" << d.name << "' " << d.total_global_mem << " " << d.compute_major << "."
        << d.compute_minor << " " << d.num_sms << " " << d.shared_mem_per_sm << "\n";
    for (const auto& [k, v] : t.metadata) o << "meta '" << k << "' = '" << v << "'\n";
    o << "strings " << t.strings.size() << "\n";
  } catch (const TraceImportError& e) {
    o << "error " << e.what() << " at " << e.byte_offset << " event " << e.event_index << "\n";
  }
  return o.str();
}

inline std::string dump_import(std::string_view json, const ImportOptions& opts,
                               ImportStats* stats_out = nullptr) {
  return dump_of([&](ImportStats* st) { return import_kineto_json(json, "input.json", opts, st); }, stats_out);
}

inline std::string dump_import_file(const std::string& path, const ImportOptions& opts,
                                    ImportStats* stats_out = nullptr) {
  return dump_of([&](ImportStats* st) { return import_kineto_trace(path, opts, st); }, stats_out);
}

}  // namespace gpuprof::test_support
