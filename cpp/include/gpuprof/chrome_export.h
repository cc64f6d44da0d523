// Writing a Trace as Kineto-style Chrome-trace JSON that the PyTorch profiler's readers accept
// (Perfetto, chrome://tracing, Holistic Trace Analysis, gpuprof's own importer).
#pragma once

#include <stdexcept>
#include <string>

#include "gpuprof/trace.h"

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

}  // namespace gpuprof
