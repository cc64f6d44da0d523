// Windowed analysis's one pass that routes a trace's events to its windows' spill files
// (gpuprof/io/kineto_import.h: spill_windows). Each traceEvents entry's text is copied whole; only
// its top-level "ts" and "dur" are read, to find the windows it overlaps. The rest of the top-level
// object (deviceProperties, distributedInfo, ...) is held and written after every file's events.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "decimal.h"
#include "gpuprof/io/kineto_import.h"
#include "text_stream.h"

namespace gpuprof {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

class Spiller {
 public:
  Spiller(io::TextStream& in, const std::string& label, int unit_ns, const std::vector<SpillWindow>& windows,
          uint64_t max_token_bytes)
      : in_(in), label_(label), unit_ns_(unit_ns), windows_(windows), max_token_(max_token_bytes) {}

  SpillStats run() {
    for (const SpillWindow& w : windows_) {
      File f(std::fopen(w.path.c_str(), "wb"));
      if (!f) fail_io(w.path);
      std::setvbuf(f.get(), nullptr, _IOFBF, 1 << 16);
      put(f.get(), "{\"traceEvents\":[\n");
      files_.push_back(std::move(f));
    }
    first_.assign(windows_.size(), true);
    ws();
    expect('{');
    ws();
    if (in_.Peek() == '}') {
      in_.Take();
    } else {
      for (;;) {
        std::string key;
        raw_string(&key);
        ws();
        expect(':');
        ws();
        if (key == "\"traceEvents\"" && in_.Peek() == '[') {
          in_.Take();
          events();
        } else {
          members_ += ',';
          members_ += key;
          members_ += ':';
          raw_value(&members_, 0);
          grow_check(members_);
        }
        ws();
        const char c = in_.Take();
        if (c == '}') break;
        if (c != ',') fail("expected ',' or '}' in the top-level object");
        ws();
      }
    }
    ws();
    if (in_.Peek() != '\0' || !in_.at_end()) fail("text after the top-level object");
    if (!in_.error().empty()) fail(in_.error());
    for (size_t k = 0; k < files_.size(); ++k) {
      put(files_[k].get(), "\n]");
      put(files_[k].get(), members_);
      put(files_[k].get(), "}\n");
      if (std::fclose(files_[k].release()) != 0) fail_io(windows_[k].path);
    }
    stats_.json_bytes = in_.Tell();
    return stats_;
  }

 private:
  void fail(const std::string& why) {
    if (!in_.error().empty()) throw TraceImportError(label_, in_.error(), in_.error_offset());
    throw TraceImportError(label_, why, int64_t(in_.Tell()));
  }
  void fail_io(const std::string& path) {
    throw TraceImportError(label_, "cannot write the window file " + path + ": " + std::strerror(errno) +
                                       " (set TMPDIR to a folder with room for the trace's JSON text)");
  }
  void put(std::FILE* f, std::string_view s) {
    if (std::fwrite(s.data(), 1, s.size(), f) != s.size()) fail_io("(a window file)");
  }
  void ws() {
    while (is_space(in_.Peek())) in_.Take();
  }
  void expect(char c) {
    if (in_.Peek() != c) fail(std::string("expected '") + c + "'");
    in_.Take();
  }
  // One event's text, and the top-level keys besides traceEvents together, are held whole: each at
  // most the longest JSON value accepted.
  void grow_check(const std::string& s) {
    if (s.size() > max_token_)
      fail("an event or the top-level keys longer than the longest JSON value accepted (GPUPROF_MAX_TOKEN_MIB)");
  }
  // A string, its quotes and escapes as written, appended to *out.
  void raw_string(std::string* out) {
    if (in_.Peek() != '"') fail("expected a string");
    out->push_back(in_.Take());
    for (;;) {
      const char c = in_.Take();
      if (c == '\0') fail("the text ends inside a string");
      out->push_back(c);
      if (c == '"') return;
      if (c == '\\') {
        const char e = in_.Take();
        if (e == '\0') fail("the text ends inside a string");
        out->push_back(e);
      }
      if ((out->size() & 0xFFFF) == 0) grow_check(*out);
    }
  }
  // Any JSON value as written (not checked beyond its brackets and strings), appended to *out.
  // `depth` counts the brackets open around it.
  void raw_value(std::string* out, int depth) {
    ws();
    const char c = in_.Peek();
    if (c == '"') return raw_string(out);
    if (c == '{' || c == '[') {
      if (depth > 256) fail("values nested more than 256 deep");
      out->push_back(in_.Take());
      const char close = c == '{' ? '}' : ']';
      ws();
      if (in_.Peek() == close) {
        out->push_back(in_.Take());
        return;
      }
      for (;;) {
        if (c == '{') {
          ws();
          raw_string(out);
          ws();
          expect(':');
          out->push_back(':');
        }
        raw_value(out, depth + 1);
        grow_check(*out);
        ws();
        const char n = in_.Take();
        out->push_back(n);
        if (n == close) return;
        if (n != ',') fail("expected ',' or a closing bracket");
      }
    }
    // A number, true, false or null: up to the next structural character or space.
    size_t n = 0;
    while (in_.Peek() != ',' && in_.Peek() != '}' && in_.Peek() != ']' && !is_space(in_.Peek())) {
      if (in_.Peek() == '\0') fail("the text ends inside a value");
      out->push_back(in_.Take());
      if (++n > 4096) fail("a number or literal longer than 4096 bytes");
    }
    if (n == 0) fail("expected a value");
  }

  // The traceEvents list, entry by entry: each copied to the windows it overlaps.
  void events() {
    ws();
    if (in_.Peek() == ']') {
      in_.Take();
      return;
    }
    for (;;) {
      ws();
      event_.clear();
      ts_.clear();
      dur_.clear();
      if (in_.Peek() == '{') {
        in_.Take();
        event_.push_back('{');
        ws();
        if (in_.Peek() == '}') {
          event_.push_back(in_.Take());
        } else {
          for (;;) {
            ws();
            const size_t key_at = event_.size();
            raw_string(&event_);
            const std::string_view key(event_.data() + key_at, event_.size() - key_at);
            const bool is_ts = key == "\"ts\"", is_dur = key == "\"dur\"";
            ws();
            expect(':');
            event_.push_back(':');
            ws();
            const size_t value_at = event_.size();
            raw_value(&event_, 1);
            if (is_ts) ts_.assign(event_, value_at, std::string::npos);
            if (is_dur) dur_.assign(event_, value_at, std::string::npos);
            ws();
            const char n = in_.Take();
            event_.push_back(n);
            if (n == '}') break;
            if (n != ',') fail("expected ',' or '}' in an event");
          }
        }
      } else {
        raw_value(&event_, 1);
      }
      route();
      ws();
      const char n = in_.Take();
      if (n == ']') return;
      if (n != ',') fail("expected ',' or ']' in traceEvents");
    }
  }

  // A number written as a string ("ts": "12.5") reads as the number.
  bool time_of(std::string_view text, int64_t* out) const {
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
    return io::scaled_decimal(text, unit_ns_ == 1 ? 0 : 3, out);
  }

  void route() {
    ++stats_.records;
    int64_t start = 0, dur = 0;
    const bool timed = !ts_.empty() && time_of(ts_, &start);
    if (!dur_.empty() && (!time_of(dur_, &dur) || dur < 0)) dur = 0;
    if (!timed) {   // no usable time: the first window reads it (and counts why it is skipped)
      write(0);
      return;
    }
    // One microsecond either side: the window's import applies the exact bounds.
    const int64_t slack = 1000;
    const int64_t lo = start > INT64_MIN + slack ? start - slack : INT64_MIN;
    int64_t hi = 0;   // the end plus the slack, or the end of time where that does not fit
    if (__builtin_add_overflow(start, dur, &hi) || __builtin_add_overflow(hi, slack, &hi)) hi = INT64_MAX;
    size_t sent = 0;
    for (size_t k = 0; k < windows_.size(); ++k) {
      const SpillWindow& w = windows_[k];
      if (w.keep_to_ns <= lo || w.keep_from_ns > hi) continue;
      write(k);
      ++sent;
    }
    if (sent > 1) stats_.copies += sent - 1;
    if (sent == 0) ++stats_.unrouted;
  }

  void write(size_t k) {
    std::FILE* f = files_[k].get();
    if (!first_[k]) put(f, ",\n");
    first_[k] = false;
    put(f, event_);
  }

  io::TextStream& in_;
  const std::string& label_;
  const int unit_ns_;
  const std::vector<SpillWindow>& windows_;
  const uint64_t max_token_;
  std::vector<File> files_;
  std::vector<bool> first_;
  std::string members_, event_, ts_, dur_;
  SpillStats stats_;
};

}  // namespace

SpillStats spill_windows(const std::string& path, int unit_ns, const std::vector<SpillWindow>& windows,
                         const ImportOptions& opts) {
  if (windows.empty()) return {};
  io::TextStream in(path, 0, opts.max_token_bytes);
  if (opts.interrupted) in.set_interrupt_check(opts.interrupted);
  if (!in.error().empty()) throw TraceImportError(path, in.error(), in.error_offset());
  // The bytes of the file read so far (compressed bytes for gzip), for a progress line.
  if (opts.progress != nullptr)
    in.set_progress([p = opts.progress](uint64_t at) { p->bytes.store(at, std::memory_order_relaxed); });
  Spiller s(in, path, unit_ns, windows, opts.max_token_bytes);
  return s.run();
}

SpillStats spill_windows_json(std::string_view json, const std::string& label, int unit_ns,
                              const std::vector<SpillWindow>& windows, const ImportOptions& opts) {
  if (windows.empty()) return {};
  io::TextStream in(json, 0, opts.max_token_bytes);
  if (!in.error().empty()) throw TraceImportError(label, in.error(), in.error_offset());
  Spiller s(in, label, unit_ns, windows, opts.max_token_bytes);
  return s.run();
}

}  // namespace gpuprof
