// The import driver (import_driver.h): one thread, or two for the halves of a large text, and
// what a finished (or failed) import reports. The threads' protocol: the second thread reads its
// half into a Trace of its own; the first stops at the split point only when it is exactly there
// and the second thread read its half whole, and then appends that half as if it had read it.
#include "import_driver.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "../core/thread_start.h"
#include "compiled_launches.h"
#include "json_sax.h"
#include "kineto_handler.h"
#include "split_point.h"

namespace gpuprof::kineto {

namespace {

// Publishes one stream's progress to opts.progress while it is read: the bytes it has read since it
// last told, and the traceEvents entries its parse has counted meanwhile (stats is filled on the
// thread that refills the stream, the one that calls this). Lives as long as the stream reads.
class ProgressPublisher {
 public:
  ProgressPublisher(io::TextStream& in, const ImportStats& stats, const ImportOptions& opts, bool second_half)
      : in_(in), stats_(stats), progress_(opts.progress) {
    if (progress_ == nullptr) return;
    bytes_to_ = second_half ? &progress_->second_bytes : &progress_->bytes;
    events_to_ = second_half ? &progress_->second_events : &progress_->events;
    in_.set_progress([this](uint64_t at) { publish(at); });
  }
  ~ProgressPublisher() {
    if (progress_ != nullptr) in_.set_progress(nullptr);
  }
  ProgressPublisher(const ProgressPublisher&) = delete;
  ProgressPublisher& operator=(const ProgressPublisher&) = delete;
  // The entries parsed since the last chunk: a parse that ends (or stops at the split) tells them.
  void flush() { publish(bytes_); }

 private:
  void publish(uint64_t at) {
    if (progress_ == nullptr) return;
    if (at > bytes_) bytes_to_->fetch_add(at - bytes_, std::memory_order_relaxed);
    if (stats_.records > events_) events_to_->fetch_add(stats_.records - events_, std::memory_order_relaxed);
    bytes_ = std::max(bytes_, at);
    events_ = std::max(events_, stats_.records);
  }
  io::TextStream& in_;
  const ImportStats& stats_;
  ImportProgress* progress_;
  std::atomic<uint64_t>* bytes_to_ = nullptr;
  std::atomic<uint64_t>* events_to_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t events_ = 0;
};

// ---- the second thread -------------------------------------------------------------------------

// The second thread's result: what it read from the split point to the end of the text.
struct SecondHalf {
  Trace trace;
  ImportStats stats;
  bool ok = false;   // read to the end with no error of any kind
  int unit_ns = 0;
  std::vector<int8_t> unit_votes;   // its events' votes on the unit while it was voting
  int64_t host_pid = -1;
  uint64_t invalid_utf8 = 0;
  uint64_t text_bytes = 0;
};

void read_second_half(const SplitSource& src, const ImportOptions& opts, const std::atomic<bool>* stop,
                      std::function<void(uint64_t)> found, SecondHalf* out) {
  try {
    std::unique_ptr<io::TextStream> in = src.open(stop, std::move(found));
    ImportOptions half_opts = opts;
    half_opts.max_events = second_half_max_events(opts.max_events);
    if (src.text_bytes > src.at) reserve_for_text(out->trace, src.text_bytes - src.at, half_opts);
    ProgressPublisher progress(*in, out->stats, opts, true);
    const ParseResult r = parse_rest_of_events(*in, out->trace, out->stats, half_opts);
    progress.flush();
    if (!r.json || !in->error().empty() || !r.abort_reason.empty()) return;
    out->unit_ns = r.unit_ns;
    out->unit_votes = r.unit_votes;
    out->host_pid = r.host_pid;
    out->invalid_utf8 = r.invalid_utf8;
    out->text_bytes = in->bytes_delivered();
    out->ok = true;
  } catch (...) {
    // Anything unusual (memory, threads): the first thread reads this half itself.
  }
}

// Appends the second half to the first: names and input shapes re-interned in order of first use
// (the ids the one thread would have given), kernel and copy indices moved past the first half's.
void append_second_half(Trace& t, ImportStats& s, SecondHalf& h) {
  std::vector<uint32_t> ids(h.trace.strings.size(), kNoIndex);
  const uint32_t kernels0 = static_cast<uint32_t>(t.kernels.size());
  const uint32_t copies0 = static_cast<uint32_t>(t.copies.size());
  const uint32_t events0 = static_cast<uint32_t>(t.events.size());
  auto reintern = [&](uint32_t h_id) {
    uint32_t& id = ids[h_id];
    if (id == kNoIndex) id = t.strings.intern(h.trace.strings.at(h_id));
    return id;
  };
  auto args = h.trace.op_args.begin();   // FLOPs: the host ops' types and concrete inputs
  t.events.reserve(t.events.size() + h.trace.events.size());
  t.op_args.reserve(t.op_args.size() + h.trace.op_args.size());
  for (uint32_t j = 0; j < h.trace.events.size(); ++j) {
    Event e = h.trace.events[j];
    e.name = reintern(e.name);
    if (e.aux != kNoIndex) {
      if (e.kind == EventKind::HostOp && e.aux < ids.size()) {   // input shapes: a string, after the name
        e.aux = reintern(e.aux);
      } else if (e.kind == EventKind::Kernel) e.aux += kernels0;
      else if (e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) e.aux += copies0;
    }
    if (args != h.trace.op_args.end() && args->event == j) {   // interned after the shapes, as one pass does
      OpArgs a = *args++;
      a.event = events0 + j;
      if (a.types != 0) a.types = reintern(a.types);
      if (a.concrete != 0) a.concrete = reintern(a.concrete);
      t.op_args.push_back(a);
    }
    t.events.push_back(e);
  }
  t.kernels.insert(t.kernels.end(), h.trace.kernels.begin(), h.trace.kernels.end());
  t.copies.insert(t.copies.end(), h.trace.copies.begin(), h.trace.copies.end());
  t.memory.insert(t.memory.end(), h.trace.memory.begin(), h.trace.memory.end());
  t.collectives.insert(t.collectives.end(), h.trace.collectives.begin(), h.trace.collectives.end());
  merge_compiled_launches(t.compiled_launches, h.trace.compiled_launches);
  t.devices.insert(t.devices.end(), h.trace.devices.begin(), h.trace.devices.end());
  t.gpu_samples.insert(t.gpu_samples.end(), h.trace.gpu_samples.begin(), h.trace.gpu_samples.end());
  for (auto& [k, v] : h.trace.metadata) t.metadata[k] = v;   // later keys win, as in one pass
  t.skipped_events += h.trace.skipped_events;
  s.records += h.stats.records;
  s.ignored_records += h.stats.ignored_records;
  for (const auto& [reason, n] : h.stats.skipped_by_reason) s.skipped_by_reason[reason] += n;
}

// What the first thread of a split import waits for from the second (where it starts, its end):
// told the moment it happens, and asking `interrupted` (a Ctrl-C) every 50 ms meanwhile.
class SecondThreadSignal {
 public:
  // After the state the waiter's condition reads has changed.
  void notify() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  // True once done() holds; false when `interrupted` (asked without the lock: Python's check takes
  // the GIL) said so first.
  template <class Done>
  bool wait(Done done, const std::function<bool()>& interrupted) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, std::chrono::milliseconds(50), done)) return true;
      }
      if (interrupted && interrupted()) return false;
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// The import.* metadata of a finished import, and the host's pid (`host_pid`, -1: none seen).
void add_import_metadata(Trace& trace, const ImportStats& stats, int64_t host_pid, uint64_t invalid_utf8) {
  trace.metadata["import.format"] = "kineto-chrome-trace";
  // The same key a live session fills: the exporter writes host rows under this pid.
  if (host_pid >= 0 && !trace.metadata.count("pid")) trace.metadata["pid"] = std::to_string(host_pid);
  trace.metadata["import.time_unit"] = stats.timestamps_ns ? "ns" : "us";
  trace.metadata["import.json_bytes"] = std::to_string(stats.json_bytes);
  trace.metadata["import.records"] = std::to_string(stats.records);
  trace.metadata["import.ignored_records"] = std::to_string(stats.ignored_records);
  if (invalid_utf8 > 0) trace.metadata["import.invalid_utf8_strings"] = std::to_string(invalid_utf8);
  for (const auto& [reason, count] : stats.skipped_by_reason)
    trace.metadata["import.skipped." + reason] = std::to_string(count);
}

}  // namespace

int64_t event_boundary(std::string_view w) {
  const auto after_space = [&](size_t j) {
    while (j < w.size() && (w[j] == ' ' || w[j] == '\n' || w[j] == '\r' || w[j] == '\t')) ++j;
    return j;
  };
  for (size_t i = w.find('}'); i != std::string_view::npos; i = w.find('}', i + 1)) {
    const size_t comma = after_space(i + 1);
    if (comma >= w.size() || w[comma] != ',') continue;
    const size_t open = after_space(comma + 1);
    if (open < w.size() && w[open] == '{') return static_cast<int64_t>(i + 1);
  }
  return -1;
}

void reserve_for_text(Trace& t, uint64_t text_bytes, const ImportOptions& opts) {
  if (opts.windowed || opts.scan_steps || text_bytes == 0) return;
  if (opts.max_bytes != 0) text_bytes = std::min(text_bytes, opts.max_bytes);
  uint64_t events = text_bytes / kTextBytesPerEventAtLeast;
  if (opts.max_events != 0) events = std::min<uint64_t>(events, opts.max_events);
  events = std::min<uint64_t>(events, UINT32_MAX);   // event indices are 32-bit
  try {
    t.events.reserve(size_t(events));
    t.kernels.reserve(size_t(events / 2));   // a kernel mostly comes with its launch call; more grow
  } catch (const std::exception&) {
    // Not enough address space for the guess: the arrays grow as they are filled instead.
  }
}

Trace run_import(io::TextStream& in, const std::string& label, const ImportOptions& opts, ImportStats* stats_out,
                 const SplitSource* split, uint64_t expected_text_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  ImportStats stats;
  stats.compressed = in.compressed();
  Trace trace;
  reserve_for_text(trace, expected_text_bytes, opts);   // the whole text's: the second half is appended to it
  if (!in.error().empty() && in.bytes_delivered() == 0 && in.at_end()) throw TraceImportError(label, in.error());
  // A large text: a second thread reads from an event boundary near the middle while this one
  // reads up to it (SplitPoint). The thread is stopped and joined on every way out.
  SecondHalf half;
  SplitPoint point;   // before the thread: the thread may tell it where it starts until joined
  SecondThreadSignal signal;
  std::atomic<bool> stop_second{false}, second_done{false};
  std::thread second;
  struct Joiner {
    std::thread& t;
    std::atomic<bool>& stop;
    ~Joiner() {
      if (t.joinable()) {
        stop = true;
        t.join();
      }
    }
  } joiner{second, stop_second};
  if (split != nullptr) {
    try {
      point.at.store(split->at, std::memory_order_release);
      point.settled.store(!split->at_is_earliest, std::memory_order_release);
      second = std::thread([&] {
        prepare_thread_for_exceptions();
        read_second_half(
            *split, opts, &stop_second,
            [&point, &signal](uint64_t at) {
              point.at.store(at, std::memory_order_release);
              point.settled.store(true, std::memory_order_release);
              signal.notify();
            },
            &half);
        second_done = true;
        signal.notify();
      });
    } catch (const std::system_error&) {
      // no thread to be had: one thread reads it all
    }
    if (second.joinable()) {
      // At the earliest place of a gzip file's split: wait until the second thread has found where
      // it starts (it inflates faster than this thread parses, so it is mostly there already), or
      // has stopped without finding one. A Ctrl-C meanwhile is seen within 50 ms.
      point.settle = [&] {
        signal.wait([&] { return point.settled.load(std::memory_order_acquire) || second_done.load(); },
                    opts.interrupted);
        if (!point.settled.load(std::memory_order_acquire)) point.at.store(UINT64_MAX);
      };
      const auto decide = [&](bool here, int* unit, const UnitVote& first) {
        if (!here) {   // the guess was not an event boundary: read on alone
          stop_second = true;
          return AtSplit::ReadOn;
        }
        // Wait for the second half; a Ctrl-C meanwhile is seen within 50 ms, as between chunks.
        if (!signal.wait([&] { return second_done.load(); }, opts.interrupted)) return AtSplit::Interrupted;
        second.join();
        // Past the cap together (the first thread's events still held for the unit vote counted
        // as kept): one thread would have stopped at the cap, so it reads on and does.
        const uint64_t kept = trace.events.size() + (*unit == 0 ? first.held : 0) + half.trace.events.size();
        if (!half.ok || (opts.max_events != 0 && kept > opts.max_events)) {
          half.trace = Trace();   // its memory, before this thread reads that half itself
          return AtSplit::ReadOn;
        }
        if (*unit == 0) {
          // This thread is still voting: the one-thread read would go on voting with the second
          // half's first events, whose votes the second thread kept.
          UnitVote vote = first;
          for (const int8_t v : half.unit_votes)
            if (vote.add(v)) break;
          *unit = vote.unit_ns();
        }
        // The second half's times were converted in its own unit: joined only when it is the same.
        return *unit == half.unit_ns ? AtSplit::TakeSecondHalf : AtSplit::ReadOn;
      };
      point.arrive = [&, decide](bool here, int* unit, const UnitVote& first) {
        const AtSplit next = decide(here, unit, first);
        // Reading on alone, this thread counts the second half itself: the second's count goes.
        if (next == AtSplit::ReadOn && opts.progress != nullptr)
          opts.progress->second_dropped.store(true, std::memory_order_relaxed);
        return next;
      };
    }
  }

  ProgressPublisher progress(in, stats, opts, false);
  const ParseResult parsed = parse_text(in, trace, stats, opts, second.joinable() ? &point : nullptr);
  progress.flush();
  const io::JsonResult& ok = parsed.json;
  const bool halves = parsed.stopped_at_split;
  const uint64_t text_bytes = halves ? point.at.load() + half.text_bytes : in.bytes_delivered();
  if (!ok && !halves) {
    const int64_t idx = parsed.event_index;
    const std::string where = idx >= 0 ? " (in traceEvents[" + std::to_string(idx) + "])" : "";
    if (!in.error().empty())
      throw TraceImportError(
          label, in.error() + " after " + std::to_string(in.error_offset()) + " bytes of JSON text" + where,
          in.error_offset(), idx);
    const int64_t at = static_cast<int64_t>(ok.offset);
    if (!parsed.abort_reason.empty())
      throw TraceImportError(label, parsed.abort_reason + " at byte " + std::to_string(at) + where, at, idx);
    // The reader takes a NUL byte for the end of the text: one that is not the end is binary data
    // (a file of zeros, a sparse file's hole), which deserves its own words.
    const bool nul_byte = in.Peek() == '\0' && !in.at_end();
    if (ok.error == io::JsonError::Empty && !nul_byte)
      throw TraceImportError(label, "the file is empty (or only white space): not a trace", 0, -1);
    std::string msg = std::string("invalid JSON at byte ") + std::to_string(at) + where + ": " +
                      (nul_byte ? "a NUL byte (binary data, or a hole in a sparse file: not JSON text)"
                                : io::json_error_text(ok.error));
    if (in.at_end() && uint64_t(at) >= text_bytes)
      msg += " (the text ends early: was the file cut off while being written or copied?)";
    throw TraceImportError(label, msg, at, idx);
  }
  // The text parsed, yet reading past its end failed: most often a gzip member whose CRC-32 or
  // length does not match its text (a damaged file whose JSON happens to be whole).
  if (!in.error().empty() && !halves)
    throw TraceImportError(label,
                           in.error() + " after " + std::to_string(in.error_offset()) + " bytes of JSON text",
                           in.error_offset(), -1);
  if (!parsed.saw_events)
    throw TraceImportError(label, "no traceEvents list: this JSON is not a Chrome/Kineto trace", -1, -1);

  int64_t host_pid = parsed.host_pid;
  uint64_t invalid_utf8 = parsed.invalid_utf8;
  int unit_ns = parsed.unit_ns;
  if (halves) {
    append_second_half(trace, stats, half);
    if (host_pid < 0) host_pid = half.host_pid;
    invalid_utf8 += half.invalid_utf8;
    stats.split = true;
  }
  stats.json_bytes = text_bytes;
  stats.timestamps_ns = unit_ns == 1;
  stats.decompress_parse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  add_import_metadata(trace, stats, host_pid, invalid_utf8);
  if (stats_out != nullptr) *stats_out = stats;
  return trace;
}

}  // namespace gpuprof::kineto
