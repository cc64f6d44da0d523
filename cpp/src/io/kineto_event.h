// One entry of traceEvents as the SAX handler (kineto_handler.cpp) reads it: the pending event it
// fills field by field, its time fields kept until the file's unit is known, and the text helpers
// its strings and "Input Dims" go through. Private to the importer (cpp/src/io).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "compiled_launches.h"
#include "gpuprof/core/trace.h"
#include "kineto_vocabulary.h"

namespace gpuprof::kineto {

// Valid UTF-8 is kept as is; each invalid byte becomes U+FFFD so Python can always decode names.
// Returns true when a byte was replaced, with the text in `out`; false when `in` is valid UTF-8
// (`in` is then the text; `out` is left alone for ASCII and holds a copy otherwise).
bool sanitize_utf8(std::string_view in, std::string* out);

// The elements of the tensors an "Input Dims" text lists ("[[1000], [4, 8]]" -> 1032; a tensor list
// "[[[10], [10]]]" -> 20); an empty list (a non-tensor input) counts none. -1 for a text that is
// not a list of lists of integers.
int64_t elements_in_dims(std::string_view text);

// Appends one item of a list written as Python prints it ("Input Dims" and the like): ", " first
// when `sep`, then head, body and tail, put together on the stack and appended in one piece (most
// items are short numbers, whose separator and digits were two calls into std::string).
inline void append_list_item(std::string& out, bool sep, std::string_view head, std::string_view body,
                             std::string_view tail) {
  char buf[64];
  const size_t len = (sep ? 2 : 0) + head.size() + body.size() + tail.size();
  if (len > sizeof buf) {   // a long string item
    if (sep) out += ", ";
    out.append(head.data(), head.size()).append(body.data(), body.size()).append(tail.data(), tail.size());
    return;
  }
  char* w = buf;
  if (sep) {
    w[0] = ',';
    w[1] = ' ';
    w += 2;
  }
  std::memcpy(w, head.data(), head.size());
  if (!body.empty()) std::memcpy(w + head.size(), body.data(), body.size());
  if (!tail.empty()) std::memcpy(w + head.size() + body.size(), tail.data(), tail.size());
  out.append(buf, len);
}

// A time field: converted to nanoseconds where it is read once the file's time unit is known
// (every event after the unit was decided), else kept as its exact decimal text until the
// events held for the decision are replayed (KinetoHandler::decide_unit).
struct RawNum {
  std::string text;
  bool present = false;
  bool converted = false;   // `ns` and `ok` hold the conversion; `text` is not kept
  bool ok = false;
  bool other_unit = false;  // a ts written in the other unit than the file's (an outlier)
  int64_t ns = 0;
};

// A timestamp this large cannot be microseconds since any epoch we know (that is the year 5138):
// it is nanoseconds. A nonzero one below it, in a file of nanoseconds, is before 1973.
inline constexpr int64_t kNanosecondTimestamps = 100000000000000000LL;   // 1e17

inline bool looks_like_ns(int64_t ts) { return ts >= kNanosecondTimestamps || ts <= -kNanosecondTimestamps; }

// One entry of traceEvents, filled field by field.
struct PendingEvent {
  char ph = 0;
  Cat cat = Cat::None;
  std::string name;
  bool has_name = false;
  int64_t pid = -1;      // numeric pid, -1 when absent or a label
  int64_t tid = -1;
  RawNum ts, dur;
  int64_t correlation = 0, external_id = 0, device = -1, stream = -1, worker = -1, batch = 0;
  int64_t registers = -1, shared_mem = -1, bytes = -1, total_allocated = -1, total_reserved = -1;
  int64_t device_type = -1, device_id = -1;
  int64_t addr = 0;   // memory samples: the block's address (0: not recorded)
  int64_t sequence_nr = -1, fwd_thread = 0;   // a host op's autograd link (event.h)
  double blocks_per_sm = -1, warps_per_sm = -1, occupancy = -1;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  bool has_bytes = false;   // memory samples: a free is a negative Bytes
  bool bad_number = false;
  // A host op's "Input Dims" (record_shapes), as Python prints the list: "[[32, 3, 224, 224], []]".
  std::string shapes;
  bool has_shapes = false;
  // FLOPs: its "Input type" and "Concrete Inputs" lists (the same way), and its "flops".
  std::string types, concrete;
  bool has_types = false, has_concrete = false;
  int64_t flops = -1;
  std::string input_type;   // the first non-empty entry of "Input type" (["float"])
  // A collective's own facts (collective == true when the event has any of them).
  bool collective = false;
  CollectiveInfo coll;
  // An Inductor-generated kernel's launch args (compiled_launch == true when it has any).
  bool compiled_launch = false;
  CompiledLaunch launch;

  // Keeps `v` when `arg` is a text arg of a launch (kernel_backend, kernel_file, kernel_hash, grid).
  void keep_launch_arg(Arg arg, std::string_view v);

  // Back to an empty entry, field by field: the strings keep their capacity (no allocation per
  // event).
  void reset();
  void clear_collective();
  // A kernel's launch properties as the event recorded them.
  KernelInfo kernel_info() const;
};

}  // namespace gpuprof::kineto
