// Kineto Chrome-trace import, the public entry points (gpuprof/io/kineto_import.h): opening the file
// or text, and planning a split read (is the text large enough, may the process use the CPUs, is it
// plain or gzip, where its second half starts). The pieces they put together:
//   decimal.h            number parsing (exact timestamps)
//   kineto_vocabulary.*  Kineto's categories, keys and copy names -> event kinds
//   kineto_handler.*     the SAX handler that builds the Trace's records
//   import_driver.*      one import, on one thread or two (split_point.h: where the two meet)
//   text_stream.*, json_sax.h   the streamed (plain or gzip) text and the JSON reader
#include "gpuprof/io/kineto_import.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>

#include "decimal.h"
#include "import_driver.h"
#include "text_stream.h"

namespace gpuprof {

TraceImportError::TraceImportError(const std::string& path_, const std::string& message, int64_t byte_offset_,
                                   int64_t event_index_)
    : std::runtime_error(path_ + ": " + message),
      path(path_),
      byte_offset(byte_offset_),
      event_index(event_index_) {}

bool parse_scaled_decimal(std::string_view text, int scale_exp, int64_t* out) {
  return io::scaled_decimal(text, scale_exp, out);
}

namespace {

using kineto::event_boundary;
using kineto::kBoundaryWindow;
using kineto::run_import;
using kineto::SplitSource;

// A stream that ends early (as "interrupted") once *stop is set: the second half's.
std::unique_ptr<io::TextStream> stoppable(std::unique_ptr<io::TextStream> in, const std::atomic<bool>* stop) {
  in->set_interrupt_check([stop] { return stop->load(); });
  return in;
}

int usable_cpus(const ImportOptions& opts) {
  if (opts.cpus > 0) return int(opts.cpus);
  cpu_set_t cpus;
  return sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
}

// The fewest bytes of JSON an event that is kept can take (`{"ph":"i","ts":1}` and a comma): a
// text of N bytes keeps at most N / kMinEventBytes events.
constexpr uint64_t kMinEventBytes = 16;

// `exact_bytes`: the text's length is known exactly (a plain file, a text in memory), not read
// from a gzip trailer, which holds it modulo 4 GiB. An event cap the text cannot reach leaves the
// split on. A gzip file splits under any cap: its second half keeps at most half the cap
// (kineto::second_half_max_events), and the halves are joined only when together they keep no
// more than the cap, so the two hold at most one and a half times the cap while they read.
bool split_wanted(uint64_t text_bytes, const ImportOptions& opts, bool exact_bytes) {
  if (opts.split_min_bytes == 0 || text_bytes < opts.split_min_bytes || opts.max_bytes != 0) return false;
  if (opts.scan_steps || opts.windowed) return false;
  if (opts.max_events != 0 && exact_bytes && text_bytes / kMinEventBytes >= opts.max_events) return false;
  return usable_cpus(opts) >= 2;
}

// Where a gzip file's second thread starts, as a share of its text: past the middle, since that
// thread inflates the text before its start again. With I and P the seconds to inflate and to parse
// the whole text, the first thread takes f (I + P), the second I + (1 - f) P; they finish together at
// f = (I + P) / (I + 2 P): 0.57 with ISA-L, which inflates about five times faster than the
// parser reads (docs/performance.md). With zlib (I about P / 2) it is 0.6: 4/7 is near both.
constexpr uint64_t kGzipFirstShareNum = 4, kGzipFirstShareDen = 7;

// The second half of a large file, from an event boundary near the middle of its text, read by a
// second thread with its own stream. A plain file: the boundary is looked for now and the stream
// starts there. A gzip file: its last member's trailer gives the text's length (modulo 4 GiB; a
// wrong length only moves the split, or leaves the first thread reading alone); the second
// thread's stream inflates the file from its start on a thread of its own, throws the first half
// away and looks for the boundary after it. Nothing for pipes and FIFOs (read once) or small texts.
// `*text_bytes`: a regular file's text length (a gzip file's from its trailer), else 0.
bool plan_file_split(const std::string& path, const ImportOptions& opts, SplitSource* src, uint64_t* text_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  bool planned = false;
  struct stat st{};
  unsigned char magic[2] = {0, 0};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, magic, 2, 0) == 2) {
    const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
    unsigned char isize[4] = {0, 0, 0, 0};
    if (gzip && st.st_size >= 18 && ::pread(fd, isize, 4, st.st_size - 4) == 4) {
      *text_bytes =
          uint64_t(isize[0]) | uint64_t(isize[1]) << 8 | uint64_t(isize[2]) << 16 | uint64_t(isize[3]) << 24;
      if (split_wanted(*text_bytes, opts, false) && usable_cpus(opts) >= int(opts.gzip_split_cpus)) {
        src->at = *text_bytes / kGzipFirstShareDen * kGzipFirstShareNum;
        src->text_bytes = *text_bytes;
        src->at_is_earliest = true;
        src->open = [path, tokens = opts.max_token_bytes, from = src->at](const std::atomic<bool>* stop,
                                                                          std::function<void(uint64_t)> found) {
          io::TextStream::GzipFrom g;
          g.from = from;
          g.boundary = event_boundary;
          g.found = std::move(found);
          g.stop = [stop] { return stop->load(); };
          return std::make_unique<io::TextStream>(path, tokens, std::move(g));
        };
        planned = true;
      }
    } else if (!gzip && (*text_bytes = uint64_t(st.st_size), split_wanted(*text_bytes, opts, true))) {
      std::string window(kBoundaryWindow, '\0');
      const off_t middle = st.st_size / 2;
      const ssize_t got = ::pread(fd, window.data(), window.size(), middle);
      const int64_t i = got > 0 ? event_boundary(std::string_view(window.data(), size_t(got))) : -1;
      if (i >= 0) {
        src->at = uint64_t(middle) + uint64_t(i);
        src->text_bytes = *text_bytes;
        src->open = [path, tokens = opts.max_token_bytes, at = src->at](const std::atomic<bool>* stop,
                                                                        std::function<void(uint64_t)>) {
          return stoppable(std::make_unique<io::TextStream>(path, 0, tokens, at), stop);
        };
        planned = true;
      }
    }
  }
  ::close(fd);
  return planned;
}

}  // namespace

Trace import_kineto_trace(const std::string& path, const ImportOptions& options, ImportStats* stats) {
  SplitSource split;
  uint64_t text_bytes = 0;
  const bool halves = plan_file_split(path, options, &split, &text_bytes);
  io::TextStream in(path, options.max_bytes, options.max_token_bytes);
  if (options.interrupted) in.set_interrupt_check(options.interrupted);
  return run_import(in, path, options, stats, halves ? &split : nullptr, text_bytes);
}

Trace import_kineto_json(std::string_view json, const std::string& label, const ImportOptions& options,
                         ImportStats* stats) {
  SplitSource split;
  bool halves = false;
  if (split_wanted(json.size(), options, true)) {
    const size_t middle = json.size() / 2;
    const int64_t i = event_boundary(json.substr(middle, kBoundaryWindow));
    if (i >= 0) {
      split.at = middle + uint64_t(i);
      split.text_bytes = json.size();
      split.open = [json, tokens = options.max_token_bytes, at = split.at](const std::atomic<bool>* stop,
                                                                           std::function<void(uint64_t)>) {
        return stoppable(std::make_unique<io::TextStream>(json.substr(at), 0, tokens), stop);
      };
      halves = true;
    }
  }
  io::TextStream in(json, options.max_bytes, options.max_token_bytes);
  if (options.interrupted) in.set_interrupt_check(options.interrupted);
  return run_import(in, label, options, stats, halves ? &split : nullptr, json.size());
}

}  // namespace gpuprof
