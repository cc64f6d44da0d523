// The top level of a one-process Chrome trace around its traceEvents (chrome_json.h).
#include "chrome_json.h"

namespace gpuprof::chrome_json {

// What comes before traceEvents' entries, up to its opening bracket.
void write_header(JsonWriter& w, const Trace& t) {
  w.StartObject();
  key(w, "schemaVersion");
  w.Int(1);

  key(w, "deviceProperties");
  w.StartArray();
  for (const DeviceProps& d : t.devices) {
    w.StartObject();
    key(w, "id");
    w.Int(d.id);
    key(w, "name");
    str(w, d.name);
    key(w, "totalGlobalMem");
    w.Int64(d.total_global_mem);
    key(w, "computeMajor");
    w.Int(d.compute_major);
    key(w, "computeMinor");
    w.Int(d.compute_minor);
    key(w, "maxThreadsPerBlock");
    w.Int(d.max_threads_per_block);
    key(w, "maxThreadsPerMultiprocessor");
    w.Int(d.max_threads_per_sm);
    key(w, "regsPerBlock");
    w.Int(d.regs_per_block);
    key(w, "regsPerMultiprocessor");
    w.Int(d.regs_per_sm);
    key(w, "warpSize");
    w.Int(d.warp_size);
    key(w, "sharedMemPerBlock");
    w.Int64(d.shared_mem_per_block);
    key(w, "sharedMemPerMultiprocessor");
    w.Int64(d.shared_mem_per_sm);
    key(w, "numSms");
    w.Int(d.num_sms);
    key(w, "sharedMemPerBlockOptin");
    w.Int64(d.shared_mem_per_block_optin);
    if (d.max_blocks_per_sm > 0) {
      key(w, "maxBlocksPerMultiprocessor");
      w.Int(d.max_blocks_per_sm);
    }
    w.EndObject();
  }
  w.EndArray();

  // An imported trace's distributedInfo goes back as it came (it is kept as JSON text).
  auto dist = t.metadata.find("distributedInfo");
  if (dist != t.metadata.end() && !dist->second.empty() && dist->second[0] == '{') {
    key(w, "distributedInfo");
    w.RawValue(dist->second.data(), dist->second.size());
  }
  key(w, "gpuprofMetadata");
  w.StartObject();
  for (const auto& [k, v] : t.metadata) {
    if (k == "distributedInfo") continue;
    str(w, k);
    str(w, v);
  }
  w.EndObject();

  // NVML samples (docs/metrics.md, "Energy")
  // Kineto's format has no place for them: they go in a key of their own, which gpuprof's importer
  // reads back exactly (integers: ns, mW, mJ), so a re-read trace keeps its energy per step. A field
  // the device did not report is left out.
  if (!t.gpu_samples.empty()) {
    key(w, "gpuprofGpuSamples");
    w.StartArray();
    for (const GpuSample& s : t.gpu_samples) {
      w.StartObject();
      key(w, "ts_ns");
      w.Int64(s.ts_ns);
      key(w, "device");
      w.Int(s.device);
      known(w, "gpu_util_pct", s.gpu_util_pct);
      known(w, "mem_util_pct", s.mem_util_pct);
      known(w, "memory_used_bytes", s.memory_used_bytes);
      known(w, "power_mw", s.power_mw);
      known(w, "sm_clock_mhz", s.sm_clock_mhz);
      known(w, "temperature_c", s.temperature_c);
      known(w, "energy_mj", s.energy_mj);
      w.EndObject();
    }
    w.EndArray();
  }

  key(w, "traceEvents");
  w.StartArray();
}

// What comes after traceEvents' entries, from its closing bracket.
void write_footer(JsonWriter& w) {
  w.EndArray();
  key(w, "displayTimeUnit");
  w.String("ms");
  key(w, "traceName");
  w.String("gpuprof");
  w.EndObject();
}

}  // namespace gpuprof::chrome_json
