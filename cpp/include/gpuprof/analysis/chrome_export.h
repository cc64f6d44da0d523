// Writing a Trace as Kineto-style Chrome-trace JSON that the PyTorch profiler's readers accept
// (Perfetto, chrome://tracing, Holistic Trace Analysis, gpuprof's own importer).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpuprof/core/trace.h"

namespace gpuprof {

class TraceExportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `trace` to `path`, gzip-compressed when the path ends in ".gz". Complete events carry
// Kineto's `cat` names and args, launches are linked to their kernels by `ac2g` flow events, and
// step markers are `ProfilerStep#N` user annotations. Throws TraceExportError when it cannot write.
void export_chrome_trace(const Trace& trace, const std::string& path);

// The same JSON text, in memory.
std::string export_chrome_json(const Trace& trace);

// Several ranks' traces in one Chrome trace, written one trace at a time (memory: the trace being
// added): each rank is one process (pid = its rank, named `label`, sorted by rank) whose threads are
// its host threads and its device lanes ("GPU d stream s"), every timestamp shifted by `offset_ns`
// onto the reference rank's clock; flow ids carry the rank, so they stay unique. `metadata_json`, a
// JSON object, is written first as "gpuprofMerged" (folder scans recognise the file by it); close()
// ends the file. Throws TraceExportError when it cannot write.
class MergedChromeTrace {
 public:
  MergedChromeTrace(const std::string& path, const std::string& metadata_json);
  ~MergedChromeTrace();
  void add(const Trace& trace, int64_t rank, int64_t offset_ns, const std::string& label);
  void close();

 private:
  struct Writer;
  std::unique_ptr<Writer> out_;
};

}  // namespace gpuprof
