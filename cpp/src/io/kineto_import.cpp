// Kineto Chrome-trace import: our own SAX reader (json_sax.h) over a streamed text (text_stream.h), turned
// into Trace records as each event object closes. Numbers arrive as their raw text so timestamps
// are converted exactly (a double holds 1.6e15 us only to a quarter of a microsecond).
#include "gpuprof/kineto_import.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "gpuprof/breakdown.h"
#include "json_sax.h"
#include "text_stream.h"

namespace gpuprof {

TraceImportError::TraceImportError(const std::string& path_, const std::string& message,
                                   int64_t byte_offset_, int64_t event_index_)
    : std::runtime_error(path_ + ": " + message), path(path_), byte_offset(byte_offset_),
      event_index(event_index_) {}

namespace {

// Eight ASCII digits at once (SWAR): true and their value when all eight bytes are '0'..'9'.
inline bool eight_digits(const char* p, uint64_t* value) {
  uint64_t w;
  std::memcpy(&w, p, 8);   // little-endian: the first digit in the low byte
  if (io::nondigit_flags(w) != 0) return false;
  w -= 0x3030303030303030ULL;
  w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFULL;             // pairs: 2-digit values
  w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFULL;           // quads
  *value = (w * 10000 + (w >> 32)) & 0xFFFFFFFFULL;            // the eight digits
  return true;
}

}  // namespace

bool parse_scaled_decimal(std::string_view text, int scale_exp, int64_t* out) {
  // Fast path for what Kineto writes: up to 16 integer digits (below 9e15, so that the scaled
  // value stays below 9e18 < INT64_MAX) and at most scale_exp (<= 3) decimals.
  {
    size_t i = 0;
    const size_t n = text.size();
    int64_t v = 0;
    uint64_t eight = 0;
    while (i + 8 <= n && i < 16 && eight_digits(text.data() + i, &eight)) {   // timestamps: 16 digits
      v = v * 100000000 + int64_t(eight);
      i += 8;
    }
    while (i < n && i < 17 && text[i] >= '0' && text[i] <= '9') v = v * 10 + (text[i++] - '0');
    if (i > 0 && i <= 16 && v < 9000000000000000LL) {
      int frac = 0;
      if (i < n && text[i] == '.') {
        ++i;
        while (i < n && frac < scale_exp && text[i] >= '0' && text[i] <= '9') {
          v = v * 10 + (text[i++] - '0');
          ++frac;
        }
      }
      if (i == n && (frac > 0 || text.back() != '.')) {
        for (int k = frac; k < scale_exp; ++k) v *= 10;   // < 1e17 * 1e3: fits in int64
        if (scale_exp <= 3) {
          *out = v;
          return true;
        }
      }
    }
  }
  using u128 = unsigned __int128;
  size_t i = 0;
  const size_t n = text.size();
  bool neg = false;
  if (i < n && (text[i] == '-' || text[i] == '+')) neg = text[i++] == '-';
  u128 mant = 0;
  int digits = 0;          // significant digits kept in mant
  int exp10 = 0;           // value = mant * 10^exp10
  bool any_digit = false;
  bool round_up = false;   // first dropped digit >= 5
  bool dropped = false;
  for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
    any_digit = true;
    if (digits < 36) {
      mant = mant * 10 + unsigned(text[i] - '0');
      if (mant != 0) ++digits;
    } else {
      ++exp10;   // integer digits past 36 only scale the value (it then overflows int64 anyway)
    }
  }
  if (i < n && text[i] == '.') {
    ++i;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
      any_digit = true;
      if (digits < 36) {
        mant = mant * 10 + unsigned(text[i] - '0');
        if (mant != 0) ++digits;
        --exp10;
      } else if (!dropped) {
        dropped = true;
        round_up = text[i] >= '5';
      }
    }
  }
  if (!any_digit) return false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < n && (text[i] == '-' || text[i] == '+')) eneg = text[i++] == '-';
    if (i >= n || text[i] < '0' || text[i] > '9') return false;
    int e = 0;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i)
      if (e < 100000) e = e * 10 + (text[i] - '0');
    exp10 += eneg ? -e : e;
  }
  if (i != n) return false;
  if (round_up) ++mant;
  exp10 += scale_exp;
  const u128 limit = neg ? u128(INT64_MAX) + 1 : u128(INT64_MAX);
  if (mant == 0) {
    *out = 0;
    return true;
  }
  if (exp10 >= 0) {
    for (int k = 0; k < exp10; ++k) {
      if (mant > limit / 10) return false;
      mant *= 10;
    }
  } else {
    if (exp10 < -38) {
      mant = 0;
    } else {
      u128 p = 1;
      for (int k = 0; k < -exp10; ++k) p *= 10;
      const u128 q = mant / p, r = mant % p;
      mant = q + (2 * r >= p ? 1 : 0);   // half away from zero (sign applied below)
    }
  }
  if (mant > limit) return false;
  *out = neg ? static_cast<int64_t>(-static_cast<__int128>(mant)) : static_cast<int64_t>(mant);
  return true;
}

namespace {

bool eq_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (x != b[i]) return false;   // b is lower case
  }
  return true;
}

// Kineto's `cat` values, old and new spellings, compared case-insensitively.
enum class Cat : uint8_t {
  None, CpuOp, UserAnnotation, PythonFunction, Runtime, Driver, Kernel, Memcpy, Memset, Sync,
  GpuUserAnnotation, Overhead, Nvtx, Unknown
};

Cat classify_cat(std::string_view c) {
  // string_view names: no strlen per comparison (this runs once per event).
  struct Entry { std::string_view name; Cat cat; };
  static constexpr Entry entries[] = {
      {"cpu_op", Cat::CpuOp},           {"operator", Cat::CpuOp},
      {"user_annotation", Cat::UserAnnotation},
      {"python_function", Cat::PythonFunction},
      {"cuda_runtime", Cat::Runtime},   {"runtime", Cat::Runtime},
      {"cuda_driver", Cat::Driver},     {"kernel", Cat::Kernel},
      {"gpu_memcpy", Cat::Memcpy},      {"memcpy", Cat::Memcpy},
      {"gpu_memset", Cat::Memset},      {"memset", Cat::Memset},
      {"cuda_sync", Cat::Sync},         {"gpu_user_annotation", Cat::GpuUserAnnotation},
      {"overhead", Cat::Overhead},      {"cuda_profiler_range", Cat::Overhead},
      {"nvtx", Cat::Nvtx},   // gpuprof's export of NVTX ranges (Kineto writes none)
  };
  for (const auto& e : entries)
    if (eq_ci(c, e.name)) return e.cat;
  return Cat::Unknown;
}

EventKind kind_of(Cat c) {
  switch (c) {
    case Cat::CpuOp: return EventKind::HostOp;
    case Cat::UserAnnotation: return EventKind::UserRange;
    case Cat::PythonFunction: return EventKind::PythonFunction;
    case Cat::Runtime: return EventKind::Runtime;
    case Cat::Driver: return EventKind::Driver;
    case Cat::Kernel: return EventKind::Kernel;
    case Cat::Memcpy: return EventKind::Memcpy;
    case Cat::Memset: return EventKind::Memset;
    case Cat::Sync: return EventKind::Sync;
    case Cat::GpuUserAnnotation: return EventKind::GpuUserRange;
    case Cat::Overhead: return EventKind::Overhead;
    case Cat::Nvtx: return EventKind::Nvtx;
    default: return EventKind::Other;   // `Trace` spans, unknown categories: kept, never counted
  }
}

bool is_device_kind(EventKind k) {
  return k == EventKind::Kernel || k == EventKind::Memcpy || k == EventKind::Memset ||
         k == EventKind::GpuUserRange || k == EventKind::Sync;
}

// Copy direction and memory kinds from a name like "Memcpy HtoD (Pageable -> Device)".
CopyKind copy_kind_from(std::string_view s) {
  static const std::pair<const char*, CopyKind> kinds[] = {
      {"HtoD", CopyKind::HtoD}, {"DtoH", CopyKind::DtoH}, {"DtoD", CopyKind::DtoD},
      {"HtoH", CopyKind::HtoH}, {"PtoP", CopyKind::PtoP}};
  for (const auto& [text, kind] : kinds)
    if (s.find(text) != std::string_view::npos) return kind;
  return CopyKind::Unknown;
}

MemoryKind memory_kind_from(std::string_view s) {
  static const std::pair<const char*, MemoryKind> kinds[] = {
      {"Pageable", MemoryKind::Pageable}, {"Pinned", MemoryKind::Pinned},
      {"Device", MemoryKind::Device},     {"Managed", MemoryKind::Managed},
      {"Array", MemoryKind::Array}};
  for (const auto& [text, kind] : kinds)
    if (s.find(text) != std::string_view::npos) return kind;
  return MemoryKind::Unknown;   // "Host" (ROCm) does not say pageable or pinned
}

CopyInfo copy_info_from_name(std::string_view name) {
  CopyInfo c;
  c.kind = copy_kind_from(name);
  const size_t open = name.find('('), arrow = name.find("->"), close = name.rfind(')');
  if (open != std::string_view::npos && arrow != std::string_view::npos && arrow > open) {
    c.src = memory_kind_from(name.substr(open + 1, arrow - open - 1));
    const size_t end = close != std::string_view::npos && close > arrow ? close : name.size();
    c.dst = memory_kind_from(name.substr(arrow + 2, end - arrow - 2));
  }
  return c;
}

// Valid UTF-8 is kept as is; each invalid byte becomes U+FFFD so Python can always decode names.
bool sanitize_utf8(std::string_view in, std::string* out) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n && static_cast<unsigned char>(in[i]) < 0x80) ++i;
  if (i == n) return false;
  out->assign(in.data(), i);
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(in[i]);
    int len = 0;
    uint32_t cp = 0;
    if (c < 0x80) { out->push_back(char(c)); ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(in[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    if (ok) ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF);
    if (ok) { out->append(in.data() + i, len); i += len; }
    else { out->append("\xEF\xBF\xBD"); ++i; }
  }
  return true;
}

// A time field: converted to nanoseconds where it is read once the file's time unit is known
// (every event after the first with a nonzero timestamp), else kept as its exact decimal text
// until the unit is decided at the event's end.
struct RawNum {
  std::string text;
  bool present = false;
  bool converted = false;   // `ns` and `ok` hold the conversion; `text` is not kept
  bool ok = false;
  int64_t ns = 0;
};

enum class Field : uint8_t { Ignore, Ph, Cat, Name, Pid, Tid, Ts, Dur, Args };
enum class Arg : uint8_t {
  Ignore, Correlation, ExternalId, Device, Stream, Registers, SharedMem, BlocksPerSm, WarpsPerSm,
  Grid, Block, Occupancy, Bytes, TotalAllocated, TotalReserved, DeviceType, DeviceId
};

// `k` is the literal `lit`: compared as whole machine words loaded from both (a word of a length
// known when compiling is a constant), with no memcmp call: GCC calls memcmp for most of these
// lengths, once per key of every event (1.7% of an import's instructions). Every load is of 2, 4
// or 8 bytes straight into a register; a length in between is two overlapping loads. (Copying 3,
// 5, 6 or 7 bytes into a zeroed word made GCC build the word on the stack and read it back
// whole, a store-forwarding stall on every key: 13% of an import's time.)
template <class W>
inline W load(const char* p) {
  W w;
  std::memcpy(&w, p, sizeof(W));
  return w;
}

template <class W, size_t L>
inline bool same_words(const char* p, const char* lit) {   // L bytes as two overlapping W loads
  return load<W>(p) == load<W>(lit) && load<W>(p + L - sizeof(W)) == load<W>(lit + L - sizeof(W));
}

template <size_t N>
inline bool is(std::string_view k, const char (&lit)[N]) {
  constexpr size_t L = N - 1;
  static_assert(L >= 2, "keys of one byte are not compared this way");
  if (k.size() != L) return false;
  const char* const p = k.data();
  if constexpr (L < 4) {
    return same_words<uint16_t, L>(p, lit);
  } else if constexpr (L < 8) {
    return same_words<uint32_t, L>(p, lit);
  } else {
    // Whole words, then the last 8 bytes (overlapping the previous word when L is not a multiple).
    for (size_t i = 0; i + 8 <= L; i += 8)
      if (load<uint64_t>(p + i) != load<uint64_t>(lit + i)) return false;
    return L % 8 == 0 || load<uint64_t>(p + L - 8) == load<uint64_t>(lit + L - 8);
  }
}

Field field_of(std::string_view k) {
  switch (k.size()) {
    case 2:
      if (is(k, "ph")) return Field::Ph;
      if (is(k, "ts")) return Field::Ts;
      break;
    case 3:
      if (is(k, "cat")) return Field::Cat;
      if (is(k, "pid")) return Field::Pid;
      if (is(k, "tid")) return Field::Tid;
      if (is(k, "dur")) return Field::Dur;
      break;
    case 4:
      if (is(k, "name")) return Field::Name;
      if (is(k, "args")) return Field::Args;
      break;
  }
  return Field::Ignore;
}

Arg arg_of(std::string_view k) {
  // By length first: an event has several args and most are not ours ("Ev Idx", "cbid", ...).
  switch (k.size()) {
    case 4:
      if (is(k, "grid")) return Arg::Grid;
      break;
    case 5:
      if (is(k, "block")) return Arg::Block;
      if (is(k, "bytes") || is(k, "Bytes")) return Arg::Bytes;
      break;
    case 6:
      if (is(k, "device")) return Arg::Device;
      if (is(k, "stream")) return Arg::Stream;
      break;
    case 9:
      if (is(k, "Device Id")) return Arg::DeviceId;
      break;
    case 11:
      if (is(k, "correlation")) return Arg::Correlation;
      if (is(k, "External id") || is(k, "external id")) return Arg::ExternalId;
      if (is(k, "Device Type")) return Arg::DeviceType;
      break;
    case 12:
      if (is(k, "warps per SM")) return Arg::WarpsPerSm;
      break;
    case 13:
      if (is(k, "shared memory")) return Arg::SharedMem;
      if (is(k, "blocks per SM")) return Arg::BlocksPerSm;
      break;
    case 14:
      if (is(k, "Total Reserved")) return Arg::TotalReserved;
      break;
    case 15:
      if (is(k, "Total Allocated")) return Arg::TotalAllocated;
      break;
    case 20:
      if (is(k, "registers per thread")) return Arg::Registers;
      break;
    case 25:
      if (is(k, "est. achieved occupancy %")) return Arg::Occupancy;
      break;
  }
  return Arg::Ignore;
}

// One entry of traceEvents, filled field by field.
struct PendingEvent {
  char ph = 0;
  Cat cat = Cat::None;
  std::string name;
  bool has_name = false;
  int64_t pid = -1;      // numeric pid, -1 when absent or a label
  int64_t tid = -1;
  RawNum ts, dur;
  int64_t correlation = 0, external_id = 0, device = -1, stream = -1;
  int64_t registers = -1, shared_mem = -1, bytes = -1, total_allocated = -1, total_reserved = -1;
  int64_t device_type = -1, device_id = -1;
  double blocks_per_sm = -1, warps_per_sm = -1, occupancy = -1;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  bool has_bytes = false;   // memory samples: a free is a negative Bytes
  bool bad_number = false;

  void reset() {
    // Field by field: the three strings keep their capacity, so no allocation per event.
    ph = 0;
    cat = Cat::None;
    name.clear();
    has_name = false;
    pid = tid = -1;
    ts.present = ts.converted = false;
    dur.present = dur.converted = false;
    correlation = external_id = 0;
    device = stream = registers = shared_mem = bytes = device_type = device_id = -1;
    total_allocated = total_reserved = -1;
    blocks_per_sm = warps_per_sm = occupancy = -1;
    for (int i = 0; i < 3; ++i) grid[i] = block[i] = 0;
    has_bytes = false;
    bad_number = false;
  }
};

bool parse_int(std::string_view s, int64_t* out) { return parse_scaled_decimal(s, 0, out); }

bool parse_double(std::string_view s, double* out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Trailing digits of a tid label ("stream 7" -> 7, "25738" -> 25738); -1 when there are none.
int64_t trailing_number(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && (s[e - 1] == ' ')) --e;
  size_t b = e;
  while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') --b;
  if (b == e || e - b > 18) return -1;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) v = v * 10 + (s[i] - '0');
  return v;
}

// Where the second thread of a split import starts (run_import): just after the '}' of what looks
// like an event. The first thread calls arrive() once, at the first event it closes at or past
// that byte, saying whether it is exactly there, between two events of traceEvents; arrive() says
// whether the first thread reads on alone, stops there and takes the second thread's events, or
// stops because the user interrupted the import while it waited for the second thread.
enum class AtSplit { ReadOn, TakeSecondHalf, Interrupted };
struct SplitPoint {
  // Where the second thread starts. For a gzip file, until the second thread has found that
  // (`settled`), the earliest it can be: the first thread then waits there in settle(), which
  // leaves `at` where the second thread starts, or the largest value when it found no place.
  std::atomic<uint64_t> at{UINT64_MAX};
  std::atomic<bool> settled{true};
  std::function<void()> settle;
  std::function<AtSplit(bool exactly_here)> arrive;

  // Whether the first thread, at text offset `pos` after an event, has got to the second thread's
  // start: if `pos` is past the earliest place and that is not settled yet, it settles it first.
  bool reached(uint64_t pos) {
    if (pos < at.load(std::memory_order_acquire)) return false;
    if (!settled.load(std::memory_order_acquire)) settle();
    return pos >= at.load(std::memory_order_acquire);
  }
};

class KinetoHandler {
 public:
  KinetoHandler(Trace& trace, ImportStats& stats, const ImportOptions& opts, const io::TextStream& in)
      : trace_(trace), stats_(stats), opts_(opts), in_(in) {}

  // ---- the SAX interface ------------------------------------------------------------------------
  bool Null() { return scalar(Scalar::Null, {}); }
  bool Bool(bool b) { return scalar(Scalar::Bool, b ? "true" : "false"); }
  bool RawNumber(std::string_view text, size_t) { return scalar(Scalar::Number, text); }
  bool String(const char* s, size_t n) { return scalar(Scalar::String, {s, n}); }
  bool StartObject() { return open(true); }
  bool EndObject() { return close(); }
  bool StartArray() { return open(false); }
  bool EndArray() { return close(); }

  bool Key(const char* s, size_t n) {
    const std::string_view k(s, n);
    if (capture_depth_ > 0) {
      capture_.key(k);
      return true;
    }
    if (depth_ == 1 && top_is_object_) {
      top_key_ = clean(std::string(k));   // becomes a metadata key: valid UTF-8 like every name
      return true;
    }
    if (in_events_ && depth_ == ev_depth_) {
      field_ = field_of(k);
      return true;
    }
    if (in_events_ && in_args_ && depth_ == ev_depth_ + 1) {
      arg_ = arg_of(k);
      return true;
    }
    if (in_devices_ && depth_ == 3) {
      device_key_.assign(s, n);
      return true;
    }
    return true;
  }

  // ---- results ----------------------------------------------------------------------------------
  bool saw_events() const { return saw_events_; }
  bool top_ok() const { return top_seen_; }
  const std::string& abort_reason() const { return abort_reason_; }
  int64_t event_index() const { return in_events_ ? int64_t(stats_.records) : -1; }
  uint64_t invalid_utf8() const { return invalid_utf8_; }
  bool timestamps_ns() const { return unit_ns_ == 1; }
  int unit_ns() const { return unit_ns_; }
  int64_t host_pid() const { return host_pid_; }
  bool stopped_at_split() const { return stopped_at_split_; }
  void set_split(SplitPoint* split) { split_ = split; }
  // The second thread of a split import reads from between two events of traceEvents, in
  // `{"traceEvents": [`: the state the first thread is in there.
  void start_inside_trace_events() {
    depth_ = 2;
    top_seen_ = top_is_object_ = true;
    top_key_ = "traceEvents";
    in_events_ = saw_events_ = true;
    ev_depth_ = 3;
  }

 private:
  enum class Scalar { Null, Bool, Number, String };

  bool num_text(const std::string& t) { return scalar(Scalar::Number, t); }

  bool fail(std::string reason) {
    abort_reason_ = std::move(reason);
    return false;
  }

  bool open(bool object) {
    ++depth_;
    // Kineto nests at most 5 levels (args holding lists of lists); far deeper input is not a
    // trace, and refusing it bounds the parser's stack, inside captured metadata values too.
    if (depth_ > 64) return fail("JSON nested more than 64 levels deep: not a Kineto trace");
    if (capture_depth_ > 0) {
      ++capture_depth_;
      capture_.start(object);
      return true;
    }
    if (depth_ == 1) {
      top_seen_ = true;
      top_is_object_ = object;
      if (!object) {
        // The Trace Event Format's "JSON Array Format": a bare list of events.
        in_events_ = saw_events_ = true;
        ev_depth_ = 2;
      }
      return true;
    }
    if (depth_ == 2 && top_is_object_) {
      if (top_key_ == "traceEvents" && !object) {
        in_events_ = saw_events_ = true;
        ev_depth_ = 3;
        return true;
      }
      if (top_key_ == "deviceProperties" && !object) {
        in_devices_ = true;
        return true;
      }
      // Any other top-level value is kept as compact JSON in the metadata.
      capture_.clear();
      capture_depth_ = 1;
      capture_.start(object);
      return true;
    }
    if (in_events_) {
      if (depth_ == ev_depth_) {
        if (!object) {
          ++stats_.records;
          skip("not an object");
          return true;
        }
        in_event_ = true;
        ev_.reset();
        field_ = Field::Ignore;
        return true;
      }
      if (in_event_ && depth_ == ev_depth_ + 1 && object && field_ == Field::Args) {
        in_args_ = true;
        arg_ = Arg::Ignore;
        return true;
      }
      if (in_args_ && depth_ == ev_depth_ + 2 && !object && (arg_ == Arg::Grid || arg_ == Arg::Block)) {
        dims_ = arg_ == Arg::Grid ? ev_.grid : ev_.block;
        dim_i_ = 0;
        return true;
      }
      return true;
    }
    if (in_devices_ && depth_ == 3 && object) {
      trace_.devices.emplace_back();
      device_key_.clear();
    }
    return true;
  }

  bool close() {
    if (capture_depth_ > 0) {
      --depth_;
      capture_.end();
      if (--capture_depth_ == 0) trace_.metadata[top_key_] = clean(capture_.text());
      return true;
    }
    if (in_events_) {
      if (depth_ == ev_depth_ && in_event_) {
        in_event_ = false;
        finish_event();
        if (!abort_reason_.empty()) return false;
        if (split_ != nullptr && split_->reached(in_.Tell())) {
          // Exactly at the second thread's start, between two events of {"traceEvents": [...]}?
          const bool here = in_.Tell() == split_->at.load(std::memory_order_relaxed) && ev_depth_ == 3 &&
                            top_is_object_ && capture_depth_ == 0;
          SplitPoint* const split = split_;
          split_ = nullptr;
          const AtSplit next = split->arrive(here);
          if (next == AtSplit::TakeSecondHalf) {
            stopped_at_split_ = true;
            return false;
          }
          if (next == AtSplit::Interrupted) return fail("interrupted");
        }
      } else if (depth_ == ev_depth_ + 1 && in_args_) {
        in_args_ = false;
      } else if (depth_ == ev_depth_ + 2) {
        dims_ = nullptr;
      } else if (depth_ == ev_depth_ - 1) {
        in_events_ = false;
      }
    } else if (in_devices_) {
      if (depth_ == 2) in_devices_ = false;
    }
    --depth_;
    return true;
  }

  bool scalar(Scalar type, std::string_view v) {
    if (capture_depth_ > 0) return capture_scalar(type, v);
    if (depth_ == 0) {
      top_seen_ = true;
      return fail(std::string("the top-level JSON value is a ") +
                  (type == Scalar::String ? "string" : type == Scalar::Number ? "number" : "literal") +
                  ", not an object with a traceEvents list: not a Chrome trace");
    }
    if (depth_ == 1 && top_is_object_) {
      std::string text(v);
      if (type == Scalar::Null) text = "null";
      trace_.metadata[top_key_] = clean(text);
      return true;
    }
    if (in_events_) {
      if (depth_ == ev_depth_ - 1) {   // a number or string where an event object belongs
        ++stats_.records;
        skip("not an object");
        return true;
      }
      if (in_event_ && depth_ == ev_depth_) return event_field(type, v);
      if (in_args_ && depth_ == ev_depth_ + 1) return event_arg(type, v);
      if (dims_ != nullptr && depth_ == ev_depth_ + 2 && type == Scalar::Number) {
        int64_t x;
        if (dim_i_ < 3 && parse_int(v, &x) && x >= 0 && x <= INT32_MAX) dims_[dim_i_] = int32_t(x);
        ++dim_i_;
      }
      return true;
    }
    if (in_devices_ && depth_ == 3 && !trace_.devices.empty()) device_field(type, v);
    return true;
  }

  bool capture_scalar(Scalar type, std::string_view v) {
    switch (type) {
      case Scalar::Null: capture_.null(); break;
      case Scalar::Bool: capture_.boolean(v == "true"); break;
      case Scalar::Number: capture_.raw_number(v); break;
      case Scalar::String: capture_.string(clean(std::string(v))); break;
    }
    return true;
  }

  std::string clean(const std::string& s) {
    std::string fixed;
    if (sanitize_utf8(s, &fixed)) {
      ++invalid_utf8_;
      return fixed;
    }
    return s;
  }

  bool event_field(Scalar type, std::string_view v) {
    switch (field_) {
      case Field::Ph:
        if (type == Scalar::String && !v.empty()) ev_.ph = v[0];
        break;
      case Field::Cat:
        if (type == Scalar::String) ev_.cat = classify_cat(v);
        break;
      case Field::Name:
        if (type == Scalar::String) {
          ev_.name.assign(v.data(), v.size());
          ev_.has_name = true;
        }
        break;
      case Field::Pid:
        if (type == Scalar::Number) {
          if (!parse_int(v, &ev_.pid)) ev_.pid = -1;
        }
        break;
      case Field::Tid:
        if (type == Scalar::Number) {
          if (!parse_int(v, &ev_.tid)) ev_.tid = -1;
        } else if (type == Scalar::String) {
          ev_.tid = trailing_number(v);
        }
        break;
      case Field::Ts:
        if (type == Scalar::Number) keep_time(ev_.ts, v);
        break;
      case Field::Dur:
        if (type == Scalar::Number) keep_time(ev_.dur, v);
        break;
      default: break;
    }
    field_ = Field::Ignore;
    return true;
  }

  bool event_arg(Scalar type, std::string_view v) {
    if (type != Scalar::Number || arg_ == Arg::Ignore) return true;
    auto as_int = [&](int64_t* out) {
      if (!parse_int(v, out)) ev_.bad_number = true;
    };
    auto as_double = [&](double* out) {
      if (!parse_double(v, out)) ev_.bad_number = true;
    };
    switch (arg_) {
      case Arg::Correlation: as_int(&ev_.correlation); break;
      case Arg::ExternalId: as_int(&ev_.external_id); break;
      case Arg::Device: as_int(&ev_.device); break;
      case Arg::Stream: as_int(&ev_.stream); break;
      case Arg::Registers: as_int(&ev_.registers); break;
      case Arg::SharedMem: as_int(&ev_.shared_mem); break;
      case Arg::Bytes:
        as_int(&ev_.bytes);
        ev_.has_bytes = true;
        break;
      case Arg::TotalAllocated: as_int(&ev_.total_allocated); break;
      case Arg::TotalReserved: as_int(&ev_.total_reserved); break;
      case Arg::DeviceType: as_int(&ev_.device_type); break;
      case Arg::DeviceId: as_int(&ev_.device_id); break;
      case Arg::BlocksPerSm: as_double(&ev_.blocks_per_sm); break;
      case Arg::WarpsPerSm: as_double(&ev_.warps_per_sm); break;
      case Arg::Occupancy: as_double(&ev_.occupancy); break;
      default: break;
    }
    arg_ = Arg::Ignore;
    return true;
  }

  void device_field(Scalar type, std::string_view v) {
    DeviceProps& d = trace_.devices.back();
    if (device_key_ == "name") {
      if (type == Scalar::String) d.name = clean(std::string(v));
      return;
    }
    int64_t x = 0;
    if (type != Scalar::Number || !parse_int(v, &x)) return;
    const int xi = x > INT32_MAX || x < INT32_MIN ? 0 : int(x);
    const std::string& k = device_key_;
    if (k == "id") d.id = xi;
    else if (k == "totalGlobalMem") d.total_global_mem = x;
    else if (k == "computeMajor") d.compute_major = xi;
    else if (k == "computeMinor") d.compute_minor = xi;
    else if (k == "maxThreadsPerBlock") d.max_threads_per_block = xi;
    else if (k == "maxThreadsPerMultiprocessor") d.max_threads_per_sm = xi;
    else if (k == "regsPerBlock") d.regs_per_block = xi;
    else if (k == "regsPerMultiprocessor") d.regs_per_sm = xi;
    else if (k == "warpSize") d.warp_size = xi;
    else if (k == "sharedMemPerBlock") d.shared_mem_per_block = x;
    else if (k == "sharedMemPerMultiprocessor" || k == "maxSharedMemoryPerMultiProcessor") d.shared_mem_per_sm = x;
    else if (k == "sharedMemPerBlockOptin") d.shared_mem_per_block_optin = x;
    else if (k == "numSms") d.num_sms = xi;
    else if (k == "maxBlocksPerMultiprocessor") d.max_blocks_per_sm = xi;
  }

  void skip(const char* reason) {
    ++trace_.skipped_events;
    ++stats_.skipped_by_reason[reason];
  }

  // The time unit of the file, decided by the first nonzero timestamp (docs/analyze.md): Kineto
  // and the Chrome format write microseconds; a value of 1e17 or more cannot be microseconds
  // since any epoch we know (that is the year 5138), so the file is in nanoseconds.
  bool to_ns(const RawNum& n, int64_t* out) {
    if (n.converted) {
      *out = n.ns;
      return n.ok;
    }
    if (unit_ns_ == 0) {
      int64_t probe = 0;
      if (!parse_scaled_decimal(n.text, 0, &probe)) return false;
      if (probe == 0) return parse_scaled_decimal(n.text, 3, out);
      unit_ns_ = (probe >= 100000000000000000LL || probe <= -100000000000000000LL) ? 1 : 1000;
    }
    return parse_scaled_decimal(n.text, unit_ns_ == 1 ? 0 : 3, out);
  }

  // A time field as it is read: what to_ns() will give for it (the unit cannot change before the
  // event ends: only an event's end decides it).
  void keep_time(RawNum& n, std::string_view v) {
    n.present = true;
    n.converted = unit_ns_ != 0;
    if (n.converted)
      n.ok = parse_scaled_decimal(v, unit_ns_ == 1 ? 0 : 3, &n.ns);
    else
      n.text.assign(v.data(), v.size());
  }

  uint32_t intern_name() {
    const uint32_t id = trace_.strings.find(ev_.name);
    if (id != kNoIndex) return id;
    std::string fixed;
    if (sanitize_utf8(ev_.name, &fixed)) {
      ++invalid_utf8_;
      return trace_.strings.intern(fixed);
    }
    return trace_.strings.intern(ev_.name);
  }

  void finish_event() {
    ++stats_.records;
    PendingEvent& p = ev_;
    switch (p.ph) {
      case 'X': break;
      case 'i':
      case 'I':
        if (p.name == "[memory]") {
          add_memory_sample();
          return;
        }
        ++stats_.ignored_records;
        return;
      case 'M': case 's': case 't': case 'f': case 'C': case 'b': case 'e': case 'n':
      case 'N': case 'O': case 'D': case 'P': case 'R': case 'c':
        ++stats_.ignored_records;   // metadata, flows, counters, async and object events
        return;
      case 'B': case 'E':
        skip("begin/end pair (ph B/E; Kineto writes complete events)");
        return;
      case 0:
        skip("missing ph");
        return;
      default:
        skip("unknown ph");
        return;
    }
    if (!p.ts.present) return skip("missing ts");
    if (!p.dur.present) return skip("missing dur");
    if (p.bad_number) return skip("number out of 64-bit range");
    int64_t start_ns = 0, dur_ns = 0;
    if (!to_ns(p.ts, &start_ns) || !to_ns(p.dur, &dur_ns)) return skip("time out of range");
    if (dur_ns < 0) return skip("negative dur");
    if (start_ns > INT64_MAX - dur_ns) return skip("time out of range");
    if (opts_.max_events != 0 && trace_.events.size() >= opts_.max_events) {
      abort_reason_ = "more than " + std::to_string(opts_.max_events) +
                      " events (the max_events limit; raise it to read this trace)";
      return;
    }

    EventKind kind = kind_of(p.cat);
    Event e;
    e.name = intern_name();
    if ((kind == EventKind::HostOp || kind == EventKind::UserRange) &&
        is_step_marker_name(trace_.strings.at(e.name)))
      kind = EventKind::StepMarker;
    e.kind = kind;
    e.start_ns = start_ns;
    e.dur_ns = dur_ns;
    e.correlation = p.correlation > 0 ? uint64_t(p.correlation) : 0;
    e.external_id = p.external_id > 0 ? uint64_t(p.external_id) : 0;
    if (is_device_kind(kind)) {
      // New Kineto: pid = device, tid = stream; old: pid 0, tid "stream 7"; args say it exactly.
      int64_t dev = p.device >= 0 ? p.device : (p.pid >= 0 && p.pid < 4096 ? p.pid : 0);
      e.device = static_cast<int16_t>(dev <= INT16_MAX ? dev : 0);
      e.tid = static_cast<uint32_t>(p.stream >= 0 ? p.stream : (p.tid >= 0 ? p.tid : 0));
    } else {
      e.tid = static_cast<uint32_t>(p.tid >= 0 ? p.tid : 0);
      if (host_pid_ < 0 && p.pid >= 0 && kind != EventKind::Other) host_pid_ = p.pid;
    }
    if (kind == EventKind::Kernel) {
      KernelInfo k;
      for (int i = 0; i < 3; ++i) {
        k.grid[i] = p.grid[i];
        k.block[i] = p.block[i];
      }
      k.registers_per_thread = p.registers > INT32_MAX ? -1 : int32_t(p.registers);
      k.shared_mem_bytes = p.shared_mem;
      k.blocks_per_sm = float(p.blocks_per_sm);
      k.warps_per_sm = float(p.warps_per_sm);
      k.est_occupancy_pct = float(p.occupancy);
      e.aux = static_cast<uint32_t>(trace_.kernels.size());
      trace_.kernels.push_back(k);
    } else if (kind == EventKind::Memcpy || kind == EventKind::Memset) {
      // Parsing the name once per distinct name: a trace has a handful of copy names. A set's
      // `bytes` are what it wrote; its name says only the memory it wrote to ("Memset (Device)").
      auto it = copy_by_name_.find(e.name);
      if (it == copy_by_name_.end()) {
        const std::string& name = trace_.strings.at(e.name);
        CopyInfo info;
        if (kind == EventKind::Memcpy) {
          info = copy_info_from_name(name);
        } else {
          const size_t open = name.find('(');
          if (open != std::string::npos) info.dst = memory_kind_from(std::string_view(name).substr(open + 1));
        }
        it = copy_by_name_.emplace(e.name, info).first;
      }
      CopyInfo c = it->second;
      c.bytes = p.has_bytes && p.bytes > 0 ? p.bytes : 0;
      e.aux = static_cast<uint32_t>(trace_.copies.size());
      trace_.copies.push_back(c);
    }
    trace_.events.push_back(e);
  }

  void add_memory_sample() {
    const PendingEvent& p = ev_;
    if (!p.ts.present) return skip("missing ts");
    if (p.bad_number) return skip("number out of 64-bit range");
    MemorySample m;
    if (!to_ns(p.ts, &m.ts_ns)) return skip("time out of range");
    m.bytes_delta = p.has_bytes ? p.bytes : 0;
    m.total_allocated = p.total_allocated;
    m.total_reserved = p.total_reserved;
    // Device Type 0 is the CPU allocator (c10::DeviceType::CPU); the rest name a device index.
    m.device = p.device_type > 0 && p.device_id >= 0 && p.device_id <= INT16_MAX
                   ? static_cast<int16_t>(p.device_id) : int16_t(-1);
    trace_.memory.push_back(m);
  }

  Trace& trace_;
  ImportStats& stats_;
  const ImportOptions& opts_;
  const io::TextStream& in_;
  int depth_ = 0;
  bool top_seen_ = false;
  bool top_is_object_ = false;
  std::string top_key_;
  bool in_events_ = false, saw_events_ = false, in_event_ = false, in_args_ = false;
  int ev_depth_ = 0;
  bool in_devices_ = false;
  std::string device_key_;
  Field field_ = Field::Ignore;
  Arg arg_ = Arg::Ignore;
  int32_t* dims_ = nullptr;
  int dim_i_ = 0;
  PendingEvent ev_;
  int64_t host_pid_ = -1;   // the profiled process (first host event's pid)
  int unit_ns_ = 0;   // ns per unit of ts/dur: 0 until known, then 1000 (us) or 1 (ns)
  std::string abort_reason_;
  uint64_t invalid_utf8_ = 0;
  std::unordered_map<uint32_t, CopyInfo> copy_by_name_;
  // Capture of other top-level values as compact JSON.
  io::JsonWriter capture_;
  int capture_depth_ = 0;
  SplitPoint* split_ = nullptr;
  bool stopped_at_split_ = false;
};

// ---- two threads for a large plain text ---------------------------------------------------------

// The second thread's result: what it read from the split point to the end of the text.
struct SecondHalf {
  Trace trace;
  ImportStats stats;
  bool ok = false;   // read to the end with no error of any kind
  int unit_ns = 0;
  int64_t host_pid = -1;
  uint64_t invalid_utf8 = 0;
  uint64_t text_bytes = 0;
};

struct SplitSource {
  // Text offset just after the '}' the second half starts behind. For a gzip file only the
  // earliest it can be (`at_is_earliest`): the second thread finds it and tells it to `found`.
  uint64_t at = UINT64_MAX;
  bool at_is_earliest = false;
  // The text from there on, as a stream that ends early once *stop is set.
  std::function<std::unique_ptr<io::TextStream>(const std::atomic<bool>* stop,
                                                std::function<void(uint64_t)> found)> open;
};

void read_second_half(const SplitSource& src, const ImportOptions& opts, const std::atomic<bool>* stop,
                      std::function<void(uint64_t)> found, SecondHalf* out) {
  try {
    std::unique_ptr<io::TextStream> in = src.open(stop, std::move(found));
    KinetoHandler h(out->trace, out->stats, opts, *in);
    h.start_inside_trace_events();
    const io::JsonResult r = io::JsonSax<KinetoHandler>(*in, h).parse_rest({1, 0});
    if (!r || !in->error().empty() || !h.abort_reason().empty()) return;
    out->unit_ns = h.unit_ns();
    out->host_pid = h.host_pid();
    out->invalid_utf8 = h.invalid_utf8();
    out->text_bytes = in->bytes_delivered();
    out->ok = true;
  } catch (...) {
    // Anything unusual (memory, threads): the first thread reads this half itself.
  }
}

// Appends the second half to the first: names re-interned in order of first use (the ids the one
// thread would have given), kernel and copy indices moved past the first half's.
void append_second_half(Trace& t, ImportStats& s, SecondHalf& h) {
  std::vector<uint32_t> ids(h.trace.strings.size(), kNoIndex);
  const uint32_t kernels0 = static_cast<uint32_t>(t.kernels.size());
  const uint32_t copies0 = static_cast<uint32_t>(t.copies.size());
  t.events.reserve(t.events.size() + h.trace.events.size());
  for (Event e : h.trace.events) {
    uint32_t& id = ids[e.name];
    if (id == kNoIndex) id = t.strings.intern(h.trace.strings.at(e.name));
    e.name = id;
    if (e.aux != kNoIndex) {
      if (e.kind == EventKind::Kernel) e.aux += kernels0;
      else if (e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) e.aux += copies0;
    }
    t.events.push_back(e);
  }
  t.kernels.insert(t.kernels.end(), h.trace.kernels.begin(), h.trace.kernels.end());
  t.copies.insert(t.copies.end(), h.trace.copies.begin(), h.trace.copies.end());
  t.memory.insert(t.memory.end(), h.trace.memory.begin(), h.trace.memory.end());
  t.devices.insert(t.devices.end(), h.trace.devices.begin(), h.trace.devices.end());
  for (auto& [k, v] : h.trace.metadata) t.metadata[k] = v;   // later keys win, as in one pass
  t.skipped_events += h.trace.skipped_events;
  s.records += h.stats.records;
  s.ignored_records += h.stats.ignored_records;
  for (const auto& [reason, n] : h.stats.skipped_by_reason) s.skipped_by_reason[reason] += n;
}

// Just after the '}' of "}", white space, ",", white space, "{" in `window` (what lies between two
// events of traceEvents), or -1.
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

bool split_wanted(uint64_t text_bytes, const ImportOptions& opts) {
  if (opts.split_min_bytes == 0 || text_bytes < opts.split_min_bytes || opts.max_bytes != 0 ||
      opts.max_events != 0)
    return false;
  return usable_cpus(opts) >= 2;
}

constexpr size_t kBoundaryWindow = io::TextStream::kBoundaryWindow;   // bytes searched for an event boundary

Trace run_import(io::TextStream& in, const std::string& label, const ImportOptions& opts,
                 ImportStats* stats_out, const SplitSource* split = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  ImportStats stats;
  stats.compressed = in.compressed();
  Trace trace;
  if (!in.error().empty() && in.bytes_delivered() == 0 && in.at_end())
    throw TraceImportError(label, in.error());
  KinetoHandler handler(trace, stats, opts, in);

  // A large text: a second thread reads from an event boundary near the middle while this one
  // reads up to it (SplitPoint). The thread is stopped and joined on every way out.
  SecondHalf half;
  SplitPoint point;   // before the thread: the thread may tell it where it starts until joined
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
        read_second_half(*split, opts, &stop_second,
                         [&point](uint64_t at) {
                           point.at.store(at, std::memory_order_release);
                           point.settled.store(true, std::memory_order_release);
                         }, &half);
        second_done = true;
      });
    } catch (const std::system_error&) {
      // no thread to be had: one thread reads it all
    }
    if (second.joinable()) {
      // At the earliest place of a gzip file's split: wait until the second thread has found where
      // it starts (it inflates faster than this thread parses, so it is mostly there already), or
      // has stopped without finding one. A Ctrl-C meanwhile is seen within 50 ms.
      point.settle = [&] {
        for (int polls = 1; !point.settled.load(std::memory_order_acquire); ++polls) {
          if (second_done || (opts.interrupted && polls % 50 == 0 && opts.interrupted())) {
            if (!point.settled.load(std::memory_order_acquire)) point.at.store(UINT64_MAX);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      };
      point.arrive = [&](bool here) {
        if (!here) {   // the guess was not an event boundary: read on alone
          stop_second = true;
          return AtSplit::ReadOn;
        }
        // Wait for the second half; a Ctrl-C meanwhile is seen within 50 ms, as between chunks.
        for (int polls = 1; !second_done; ++polls) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          if (opts.interrupted && polls % 50 == 0 && opts.interrupted()) return AtSplit::Interrupted;
        }
        second.join();
        const int unit = handler.unit_ns();
        const bool same = half.ok && (unit == 0 || half.unit_ns == 0 || unit == half.unit_ns);
        return same ? AtSplit::TakeSecondHalf : AtSplit::ReadOn;
      };
      handler.set_split(&point);
    }
  }

  // The reader keeps its nesting on the heap; the handler stops the parse past 64 levels.
  // In-situ: strings and numbers are handed over where they lie in the stream's chunk (each lies
  // whole in one: text_stream.h), never copied.
  const io::JsonResult ok = io::JsonSax<KinetoHandler>(in, handler).parse();
  const bool halves = handler.stopped_at_split();
  const uint64_t text_bytes = halves ? point.at.load() + half.text_bytes : in.bytes_delivered();
  if (!ok && !halves) {
    const int64_t idx = handler.event_index();
    const std::string where = idx >= 0 ? " (in traceEvents[" + std::to_string(idx) + "])" : "";
    if (!in.error().empty())
      throw TraceImportError(label, in.error() + " after " + std::to_string(in.error_offset()) +
                                        " bytes of JSON text" + where, in.error_offset(), idx);
    const int64_t at = static_cast<int64_t>(ok.offset);
    if (!handler.abort_reason().empty())
      throw TraceImportError(label, handler.abort_reason() + " at byte " + std::to_string(at) + where,
                             at, idx);
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
    throw TraceImportError(label, in.error() + " after " + std::to_string(in.error_offset()) +
                                      " bytes of JSON text", in.error_offset(), -1);
  if (!handler.saw_events())
    throw TraceImportError(label, "no traceEvents list: this JSON is not a Chrome/Kineto trace", -1, -1);

  int64_t host_pid = handler.host_pid();
  uint64_t invalid_utf8 = handler.invalid_utf8();
  int unit_ns = handler.unit_ns();
  if (halves) {
    append_second_half(trace, stats, half);
    if (host_pid < 0) host_pid = half.host_pid;
    invalid_utf8 += half.invalid_utf8;
    if (unit_ns == 0) unit_ns = half.unit_ns;
    stats.split = true;
  }
  stats.json_bytes = text_bytes;
  stats.timestamps_ns = unit_ns == 1;
  stats.decompress_parse_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  if (stats_out != nullptr) *stats_out = stats;
  return trace;
}

}  // namespace

namespace {

// The second half of a large file, from an event boundary near the middle of its text, read by a
// second thread with its own stream. A plain file: the boundary is looked for now and the stream
// starts there. A gzip file: its last member's trailer gives the text's length (modulo 4 GiB; a
// wrong length only moves the split, or leaves the first thread reading alone); the second
// thread's stream inflates the file from its start on a thread of its own, throws the first half
// away and looks for the boundary after it. Nothing for pipes and FIFOs (read once) or small texts.
bool plan_file_split(const std::string& path, const ImportOptions& opts, SplitSource* src) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  bool planned = false;
  struct stat st {};
  unsigned char magic[2] = {0, 0};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, magic, 2, 0) == 2) {
    const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
    unsigned char isize[4] = {0, 0, 0, 0};
    if (gzip && st.st_size >= 18 && ::pread(fd, isize, 4, st.st_size - 4) == 4) {
      const uint64_t text_bytes = uint64_t(isize[0]) | uint64_t(isize[1]) << 8 | uint64_t(isize[2]) << 16 |
                                  uint64_t(isize[3]) << 24;
      if (split_wanted(text_bytes, opts) && usable_cpus(opts) >= int(opts.gzip_split_cpus)) {
        src->at = text_bytes / 2;
        src->at_is_earliest = true;
        src->open = [path, tokens = opts.max_token_bytes, from = src->at](
                        const std::atomic<bool>* stop, std::function<void(uint64_t)> found) {
          io::TextStream::GzipFrom g;
          g.from = from;
          g.boundary = event_boundary;
          g.found = std::move(found);
          g.stop = [stop] { return stop->load(); };
          return std::make_unique<io::TextStream>(path, tokens, std::move(g));
        };
        planned = true;
      }
    } else if (!gzip && split_wanted(uint64_t(st.st_size), opts)) {
      std::string window(kBoundaryWindow, '\0');
      const off_t middle = st.st_size / 2;
      const ssize_t got = ::pread(fd, window.data(), window.size(), middle);
      const int64_t i = got > 0 ? event_boundary(std::string_view(window.data(), size_t(got))) : -1;
      if (i >= 0) {
        src->at = uint64_t(middle) + uint64_t(i);
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
  const bool halves = plan_file_split(path, options, &split);
  io::TextStream in(path, options.max_bytes, options.max_token_bytes);
  if (options.interrupted) in.set_interrupt_check(options.interrupted);
  return run_import(in, path, options, stats, halves ? &split : nullptr);
}

Trace import_kineto_json(std::string_view json, const std::string& label, const ImportOptions& options,
                         ImportStats* stats) {
  SplitSource split;
  bool halves = false;
  if (split_wanted(json.size(), options)) {
    const size_t middle = json.size() / 2;
    const int64_t i = event_boundary(json.substr(middle, kBoundaryWindow));
    if (i >= 0) {
      split.at = middle + uint64_t(i);
      split.open = [json, tokens = options.max_token_bytes, at = split.at](const std::atomic<bool>* stop,
                                                                           std::function<void(uint64_t)>) {
        return stoppable(std::make_unique<io::TextStream>(json.substr(at), 0, tokens), stop);
      };
      halves = true;
    }
  }
  io::TextStream in(json, options.max_bytes, options.max_token_bytes);
  if (options.interrupted) in.set_interrupt_check(options.interrupted);
  return run_import(in, label, options, stats, halves ? &split : nullptr);
}

}  // namespace gpuprof
