// Runs one import over a text stream: the handler (kineto_handler.h) from the start, and, for a
// large text, a second thread over its second half, from an event boundary near the middle; the
// halves are joined only when the first thread gets to that boundary and finds it exact, so the
// result is the one-thread result by construction (docs/analyze.md). Also the errors an import
// ends with and the import.* metadata. Which texts are split, and where their second half comes
// from, is planned by the caller (kineto_import.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gpuprof/core/trace.h"
#include "gpuprof/io/kineto_import.h"
#include "text_stream.h"

namespace gpuprof::kineto {

struct SplitSource {
  // Text offset just after the '}' the second half starts behind. For a gzip file only the
  // earliest it can be (`at_is_earliest`): the second thread finds it and tells it to `found`.
  uint64_t at = UINT64_MAX;
  bool at_is_earliest = false;
  // The text from there on, as a stream that ends early once *stop is set.
  std::function<std::unique_ptr<io::TextStream>(const std::atomic<bool>* stop,
                                                std::function<void(uint64_t)> found)>
      open;
};

// Just after the '}' of "}", white space, ",", white space, "{" in `window` (what lies between two
// events of traceEvents), or -1.
int64_t event_boundary(std::string_view window);

constexpr size_t kBoundaryWindow = io::TextStream::kBoundaryWindow;   // bytes searched for an event boundary

// Reads `in` into a Trace (`label` names it in errors); with `split`, on two threads.
// Throws TraceImportError.
Trace run_import(io::TextStream& in, const std::string& label, const ImportOptions& opts, ImportStats* stats_out,
                 const SplitSource* split = nullptr);

}  // namespace gpuprof::kineto
