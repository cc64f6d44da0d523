// Reading PyTorch-profiler (Kineto) Chrome-trace files into a Trace.
// Plain C++: no Python, no torch. docs/analyze.md documents the dialects, skips and errors.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof {

// A file we could not read as a trace. what() names the file and where it went wrong; the fields
// repeat it for tools.
class TraceImportError : public std::runtime_error {
 public:
  TraceImportError(const std::string& path, const std::string& message, int64_t byte_offset = -1,
                   int64_t event_index = -1);
  std::string path;
  int64_t byte_offset;   // in the uncompressed JSON text, -1 when not known
  int64_t event_index;   // index in traceEvents, -1 when not inside it
};

// How far an import has got, for a progress display that polls it from another thread while the
// import runs: bytes of the file read (compressed bytes for gzip; the text's bytes for memory) and
// traceEvents entries parsed, updated about every MiB. A split import's second thread counts apart,
// and its count is dropped when the first thread reads on alone instead of taking its half.
struct ImportProgress {
  std::atomic<uint64_t> bytes{0};    // the first (or only) thread's
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> second_bytes{0};   // the second thread's, while its half may be taken
  std::atomic<uint64_t> second_events{0};
  std::atomic<bool> second_dropped{false};
  uint64_t total_bytes() const { return bytes.load(std::memory_order_relaxed) + second(second_bytes); }
  uint64_t total_events() const { return events.load(std::memory_order_relaxed) + second(second_events); }

 private:
  uint64_t second(const std::atomic<uint64_t>& n) const {
    return second_dropped.load(std::memory_order_relaxed) ? 0 : n.load(std::memory_order_relaxed);
  }
};

struct ImportOptions {
  // Refuse a file whose (uncompressed) JSON text is longer than this; 0 = no limit. The text is
  // streamed, never held, so memory grows with the events kept, not with the file size.
  uint64_t max_bytes = 0;
  // Refuse a trace with more kept events than this; 0 = no limit (about 48 bytes per kept event).
  uint64_t max_events = 0;
  // The longest single JSON string or number accepted (Kineto's are a few KiB): it bounds the
  // memory a file made of one huge value can take, and such a file fails when the limit is reached
  // (Python passes $GPUPROF_MAX_TOKEN_MIB).
  uint64_t max_token_bytes = uint64_t(64) << 20;
  // Asked about every MiB of text; true stops the import with a TraceImportError "interrupted".
  std::function<bool()> interrupted;
  // Where to publish how far the import has got (nullptr: nowhere); must outlive the import.
  ImportProgress* progress = nullptr;
  // A file or text of at least this many bytes of JSON is parsed by two threads when the process
  // may use two CPUs: one from the start, one from an event boundary near the middle; the first
  // checks the boundary when it gets there and takes the second's events only if that thread
  // read them exactly as it would have (else it reads on alone). The result is the same Trace,
  // stats and errors either way. For a gzip file the second thread's stream inflates the file
  // from its start itself (the text before its start, 4/7 of the text, thrown away), so the file
  // is inflated about one and a half times, on two more threads; under a max_events cap the second
  // half keeps at most half of it (one and a half times the cap at most, while both read). 0:
  // always one thread. Not with max_bytes, nor for a plain text with a max_events it could exceed,
  // nor for pipes and FIFOs.
  uint64_t split_min_bytes = uint64_t(4) << 20;
  // A gzip file is read that way only when the process may use at least this many CPUs: on two,
  // its four threads share them, and the inflater (ISA-L: about five times the parser's speed)
  // idles most of the time on one thread (docs/performance.md).
  uint32_t gzip_split_cpus = 2;
  // The CPUs the import may count on; 0: those the process may run on (its affinity). A caller
  // running several imports at once gives each its share (Python passes $GPUPROF_IMPORT_CPUS,
  // which a folder's worker processes set: python/gpuprof/analyze.py).
  uint32_t cpus = 0;
  // Windowed analysis (docs/design.md, "Memory"): a trace too large for the memory budget is read
  // in several imports, each keeping one time window of it. Pass 1 (`scan_steps`) keeps only the
  // step markers and counts every other event in ImportStats::start_histogram. A window import
  // (`windowed`) keeps the events overlapping [keep_from_ns, keep_to_ns) (step markers and memory
  // samples only when they start in it); those that do not start in [own_from_ns, own_to_ns) are
  // the window's context, kept for the step boundaries and the launch links around it, and carry
  // kContextFlag: the name-keyed tables count them in the window that owns them. Both read the
  // text on one thread.
  bool scan_steps = false;
  bool windowed = false;
  int64_t keep_from_ns = INT64_MIN;
  int64_t own_from_ns = INT64_MIN;
  int64_t own_to_ns = INT64_MAX;
  int64_t keep_to_ns = INT64_MAX;
};

// How the import went, beyond the Trace itself.
struct ImportStats {
  uint64_t json_bytes = 0;        // uncompressed JSON text length
  uint64_t records = 0;           // entries of traceEvents
  uint64_t ignored_records = 0;   // understood and not needed: metadata, flows, counters, instants
  std::map<std::string, uint64_t> skipped_by_reason;   // unusable records (sum = trace.skipped_events)
  bool compressed = false;
  bool timestamps_ns = false;     // ts/dur were nanoseconds (magnitude rule), not microseconds
  double decompress_parse_s = 0;  // wall time of the streaming read (inflate + JSON + building)
  bool split = false;             // two threads read the text, each one half (split_min_bytes)
  // Windowed reads (ImportOptions::scan_steps, windowed): the events left out (outside the window,
  // or not a step marker in a scan) and the kept events that are the window's context.
  uint64_t outside_window = 0;
  uint64_t context_events = 0;
  // A scan's count of the events it left out by start time: bucket (start_ns >> shift) -> events,
  // at most kMaxHistogramBuckets buckets (the shift grows as the trace's time span needs).
  static constexpr size_t kMaxHistogramBuckets = size_t(1) << 16;
  int histogram_shift = 20;
  std::map<int64_t, uint64_t> start_histogram;
};

// Reads a `.json` or gzip-compressed (`.json.gz`, detected by its magic bytes) Kineto trace.
// Throws TraceImportError for what cannot be read; unusable events are skipped and counted.
Trace import_kineto_trace(const std::string& path, const ImportOptions& options = {},
                          ImportStats* stats = nullptr);

// The same, from JSON text in memory (for tests and fuzzing); `label` names it in errors.
Trace import_kineto_json(std::string_view json, const std::string& label, const ImportOptions& options = {},
                         ImportStats* stats = nullptr);

// Windowed analysis's linear read (docs/design.md, "Memory"): one pass over the trace at `path`
// that copies each traceEvents entry's text, unparsed but for its "ts" and "dur" (in `unit_ns` ns
// per unit: 1000 for microseconds, 1 for nanoseconds, as the scan decided), to the file of every
// window whose kept time [keep_from_ns, keep_to_ns) it overlaps, a microsecond either side (the
// window's import then keeps exactly its own: ImportOptions::windowed). An entry without a usable
// ts goes to the first window. Each file is a trace: its events, then the rest of the top-level
// object (deviceProperties, distributedInfo...). Throws TraceImportError for text that is not a JSON
// object or a file that cannot be written.
struct SpillWindow {
  int64_t keep_from_ns = INT64_MIN;
  int64_t keep_to_ns = INT64_MAX;
  std::string path;
};
struct SpillStats {
  uint64_t json_bytes = 0;
  uint64_t records = 0;    // traceEvents entries
  uint64_t copies = 0;     // entries written to more than one window: the extra copies
  uint64_t unrouted = 0;   // entries in no window's time
};
SpillStats spill_windows(const std::string& path, int unit_ns, const std::vector<SpillWindow>& windows,
                         const ImportOptions& options = {});
// The same, from JSON text in memory (for tests and fuzzing); `label` names it in errors.
SpillStats spill_windows_json(std::string_view json, const std::string& label, int unit_ns,
                              const std::vector<SpillWindow>& windows, const ImportOptions& options = {});

// Exact decimal-to-integer conversion used for timestamps: `text` is a JSON number, the result is
// its value times 10^scale_exp, rounded half away from zero. False when it is not a number or does
// not fit in int64 (e.g. "1623142623460111.5", 3 -> 1623142623460111500).
bool parse_scaled_decimal(std::string_view text, int scale_exp, int64_t* out);

}  // namespace gpuprof
