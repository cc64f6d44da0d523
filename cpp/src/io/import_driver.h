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
  // The whole text's length as far as the caller knows it (0: not known): the second half reserves
  // room for its share of the events from it (reserve_for_text).
  uint64_t text_bytes = 0;
  // Text offset just after the '}' the second half starts behind. For a gzip file only the
  // earliest it can be (`at_is_earliest`): the second thread finds it and tells it to `found`.
  uint64_t at = UINT64_MAX;
  bool at_is_earliest = false;
  // The text from there on, as a stream that ends early once *stop is set.
  std::function<std::unique_ptr<io::TextStream>(const std::atomic<bool>* stop,
                                                std::function<void(uint64_t)> found)>
      open;
};

// The second thread's event cap under the import's `max_events` (0: none): half of it, rounded up.
// A second half with more reads as failed, and the first thread reads it itself; the halves are
// joined only when together they keep no more than max_events, so one thread's result holds.
constexpr uint64_t second_half_max_events(uint64_t max_events) { return max_events - max_events / 2; }

// Just after the '}' of "}", white space, ",", white space, "{" in `window` (what lies between two
// events of traceEvents), or -1.
int64_t event_boundary(std::string_view window);

constexpr size_t kBoundaryWindow = io::TextStream::kBoundaryWindow;   // bytes searched for an event boundary

// The fewest bytes of JSON text a kept event takes in the traces gpuprof reads (Kineto's own: 340
// to 600 bytes an event in the stored samples; the synthetic 2M-event trace: 232).
constexpr uint64_t kTextBytesPerEventAtLeast = 200;

// Reserves room in `t` for the events (and kernels) a text of `text_bytes` can hold at
// kTextBytesPerEventAtLeast, so that its arrays are not moved and touched again as they grow: an
// untouched reservation is address space, not memory. Nothing for a windowed or step-scanning
// import (they keep a part), an unknown length (0), or when `max_bytes` or `max_events` bound less.
void reserve_for_text(Trace& t, uint64_t text_bytes, const ImportOptions& opts);

// Reads `in` into a Trace (`label` names it in errors); with `split`, on two threads.
// `expected_text_bytes`: the text's length as far as the caller knows it (0: not known;
// reserve_for_text).
// Throws TraceImportError.
Trace run_import(io::TextStream& in, const std::string& label, const ImportOptions& opts, ImportStats* stats_out,
                 const SplitSource* split = nullptr, uint64_t expected_text_bytes = 0);

}  // namespace gpuprof::kineto
