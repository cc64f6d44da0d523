// Writing a Trace as Kineto-style Chrome-trace JSON that the PyTorch profiler's readers accept
// (Perfetto, chrome://tracing, Holistic Trace Analysis, gpuprof's own importer).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// A trace read in windows of steps (python/gpuprof/analysis/windowed.py) written as one Chrome trace,
// a window at a time (memory: the window being added). `header`, the windowed read's scan of the
// file (its devices, metadata and GPU samples whole), gives what precedes the events and the GPU
// power counters; add() writes what a window owns: its events without kContextFlag (with their flow
// arrows), its memory samples in [own_from_ns, own_to_ns) and the critical path of its steps that
// start there; close() names every window's lanes and ends the file. The entries are those
// export_chrome_trace writes for the whole trace, in another order, except the Est. SM efficiency
// counter tracks (each level a running sum over the whole trace's kernels), left out. Throws
// TraceExportError when it cannot write.
class WindowedChromeTrace {
 public:
  WindowedChromeTrace(const std::string& path, const Trace& header);
  ~WindowedChromeTrace();
  void add(const Trace& window, int64_t own_from_ns, int64_t own_to_ns);
  // The "GPU <device> Utilization" counter track from the whole trace's GPU timeline buckets,
  // merged from the windows (python/gpuprof/analysis/window_views.py): each bucket's (start ns,
  // utilization %), then 0 at `end_ns`.
  void utilization(int device, const std::vector<std::pair<int64_t, double>>& buckets, int64_t end_ns);
  void close();

 private:
  struct Writer;
  std::unique_ptr<Writer> out_;
};

}  // namespace gpuprof
