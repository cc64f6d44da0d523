// The SAX handler that turns Kineto's JSON into a Trace: json_sax.h calls it for every key and
// value; it fills one pending event field by field (with the vocabulary of kineto_vocabulary.h)
// and turns it into Trace records when the event's object closes, and keeps the top-level
// metadata and deviceProperties. It knows nothing of files or threads: the driver
// (import_driver.cpp) runs it over a stream, once, or twice for the halves of a split import.
// The handler itself is private to kineto_handler.cpp, with the reader's instantiation over it,
// so that the compiler sees every caller of its methods (the per-token calls are inlined there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/core/trace.h"
#include "gpuprof/io/kineto_import.h"
#include "json_sax.h"
#include "split_point.h"
#include "text_stream.h"

namespace gpuprof::kineto {

// What a parse gave beside the Trace and the stats it filled.
struct ParseResult {
  io::JsonResult json;             // the reader's result (JsonError::Stopped: the handler stopped it)
  bool saw_events = false;         // the text has a traceEvents list
  std::string abort_reason;        // why the handler stopped the parse, "" when it did not
  int64_t event_index = -1;        // the traceEvents entry the parse ended in, -1 when not inside it
  int unit_ns = 0;                 // ns per unit of ts/dur: 0 until known, then 1000 (us) or 1 (ns)
  int64_t host_pid = -1;           // the profiled process (first host event's pid), -1 when none
  uint64_t invalid_utf8 = 0;       // strings whose invalid UTF-8 bytes were replaced
  bool stopped_at_split = false;   // stopped at the split point, to take the second thread's half
  // Each event's vote on the time unit (1 ns, 0 us, -1 none) while the unit was undecided: for a
  // second half, what lets the first thread tell the unit a one-thread read would decide.
  std::vector<int8_t> unit_votes;
};

// Parses the whole text into `trace` and `stats`. With `split`, asks it at each event's end
// whether the second thread's start is reached (split_point.h).
ParseResult parse_text(io::TextStream& in, Trace& trace, ImportStats& stats, const ImportOptions& opts,
                       SplitPoint* split);

// A split import's second half: the rest of traceEvents, from between two of its events in
// `{"traceEvents": [`, to the end of the text.
ParseResult parse_rest_of_events(io::TextStream& in, Trace& trace, ImportStats& stats, const ImportOptions& opts);

}  // namespace gpuprof::kineto
