// The JSON tokenizer alone, gpuprof's against simdjson's, over one plain trace file, one thread,
// CPU time, best of N, the readers taking turns (bench/tokenizer_bound.py builds and runs this).
//
//   sax          gpuprof's reader (cpp/src/io/json_sax.h over TextStream, the file streamed in
//                1 MiB chunks) with a handler that only looks at what it is handed: every key,
//                string (unescaped in situ) and number (its exact text, checked against JSON's
//                grammar), i.e. what the importer's handler is given.
//   ondemand     simdjson's On-Demand API visiting the same: every key and string unescaped, every
//                number's raw text (not checked), the file loaded whole into a padded buffer first
//                (the load is not timed).
//   ondemand-skip-args   the same, but each event's "args" object skipped unread: a floor for a
//                handler that would need nothing from args (the importer needs External id,
//                correlation, grid, block, ...).
//   ondemand-chunks   On-Demand over traceEvents cut into 1 MiB pieces at event boundaries (what a
//                streaming importer would do; run_ondemand_chunks).
//   dom          simdjson's DOM parse of the whole text (numbers become doubles: exact decimal
//                timestamps are lost, so the importer cannot use it; the parse-only floor).
//
// Prints one JSON object per line: {"reader": ..., "cpu_s": ..., "bytes": ..., "values": ...}.
#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "json_sax.h"
#include "text_stream.h"

#define GPUPROF_STR2(x) #x
#define GPUPROF_STR(x) GPUPROF_STR2(x)

namespace {

double cpu_s() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

struct Sink {   // for json_sax.h: counts what it is handed
  uint64_t values = 0, chars = 0;
  bool Null() { return ++values, true; }
  bool Bool(bool) { return ++values, true; }
  bool RawNumber(std::string_view t, size_t) { return ++values, chars += t.size(), true; }
  bool String(const char*, size_t n) { return ++values, chars += n, true; }
  bool Key(const char*, size_t n) { return chars += n, true; }
  bool StartObject() { return true; }
  bool EndObject() { return ++values, true; }
  bool StartArray() { return true; }
  bool EndArray() { return ++values, true; }
};

uint64_t run_sax(const char* path, uint64_t* bytes) {
  gpuprof::io::TextStream in(std::string(path), uint64_t(0));
  Sink h;
  gpuprof::io::JsonSax<Sink> reader(in, h);
  if (!reader.parse()) return 0;
  *bytes = in.bytes_delivered();
  return h.values;
}

using namespace simdjson;

struct Walk {
  bool skip_args = false;
  uint64_t values = 0, chars = 0;

  error_code value(ondemand::value v) {
    ondemand::json_type t;
    if (auto e = v.type().get(t)) return e;
    ++values;
    switch (t) {
      case ondemand::json_type::object: {
        ondemand::object o;
        if (auto e = v.get_object().get(o)) return e;
        return object(o, false);
      }
      case ondemand::json_type::array: {
        ondemand::array a;
        if (auto e = v.get_array().get(a)) return e;
        for (auto item : a) {
          ondemand::value x;
          if (auto e = item.get(x)) return e;
          if (auto e = value(x)) return e;
        }
        return SUCCESS;
      }
      case ondemand::json_type::string: {
        std::string_view s;
        if (auto e = v.get_string().get(s)) return e;
        chars += s.size();
        return SUCCESS;
      }
      default: chars += v.raw_json_token().size(); return SUCCESS;
    }
  }
  error_code object(ondemand::object o, bool event) {
    for (auto field : o) {
      std::string_view k;
      if (auto e = field.unescaped_key().get(k)) return e;
      chars += k.size();
      if (event && skip_args && k == "args") continue;   // left unread: On-Demand skips it
      ondemand::value v;
      if (auto e = field.value().get(v)) return e;
      if (auto e = value(v)) return e;
    }
    return SUCCESS;
  }
};

uint64_t run_ondemand(ondemand::parser& parser, const padded_string& json, bool skip_args) {
  Walk w;
  w.skip_args = skip_args;
  ondemand::document doc;
  ondemand::object top;
  if (parser.iterate(json).get(doc) || doc.get_object().get(top)) return 0;
  for (auto field : top) {
    std::string_view k;
    ondemand::value v;
    if (field.unescaped_key().get(k) || field.value().get(v)) return 0;
    if (k != "traceEvents") {
      if (w.value(v)) return 0;
      continue;
    }
    ondemand::array events;
    if (v.get_array().get(events)) return 0;
    for (auto item : events) {
      ondemand::object ev;
      if (item.get_object().get(ev) || w.object(ev, true)) return 0;
      ++w.values;
    }
  }
  return w.values + 2;   // and the document's object and traceEvents' array, as sax counts them
}

// Where traceEvents' text lies: [first, last) between its '[' and its ']' (found before timing).
bool events_span(std::string_view text, size_t* first, size_t* last) {
  const size_t key = text.find("\"traceEvents\"");
  const size_t open = key == std::string_view::npos ? key : text.find('[', key);
  if (open == std::string_view::npos) return false;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && --depth == 0) {
      *first = open + 1;
      *last = i;
      return true;
    }
  }
  return false;
}

bool blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// On-Demand over chunks split at event boundaries, as an importer streaming the text would use it:
// traceEvents cut into pieces of about 1 MiB, each ending after an event's '}' that a ',' and a
// '{' follow, each copied behind a '[' into one reused padded buffer and closed with ']' (the copy
// is timed: a streaming reader needs the padding after its chunk too). Only traceEvents is walked
// (the few hundred bytes around it are not: its value count is theirs short of the others').
uint64_t run_ondemand_chunks(ondemand::parser& parser, std::string_view text, size_t first, size_t last) {
  Walk w;
  std::string buf;
  constexpr size_t kPiece = size_t(1) << 20;
  for (size_t at = first; at < last;) {
    size_t end = last, next = last;   // the piece [at, end); the next starts at `next`
    if (last - at > kPiece) {
      const std::string_view window = text.substr(at, kPiece);
      for (size_t i = window.rfind('}'); i != std::string_view::npos && i > 0; i = window.rfind('}', i - 1)) {
        size_t j = i + 1;
        while (j < window.size() && blank(window[j])) ++j;
        if (j >= window.size() || window[j] != ',') continue;
        size_t k = j + 1;
        while (k < window.size() && blank(window[k])) ++k;
        if (k < window.size() && window[k] == '{') {
          end = at + i + 1;
          next = at + j + 1;
          break;
        }
      }
    }
    buf.assign(1, '[');
    buf.append(text.substr(at, end - at));
    buf.push_back(']');
    const size_t len = buf.size();
    buf.append(SIMDJSON_PADDING, '\0');
    ondemand::document doc;
    ondemand::array events;
    if (parser.iterate(buf.data(), len, buf.size()).get(doc) || doc.get_array().get(events)) return 0;
    for (auto item : events) {
      ondemand::object ev;
      if (item.get_object().get(ev) || w.object(ev, true)) return 0;
      ++w.values;
    }
    at = next;
  }
  return w.values + 1;   // and the traceEvents array
}

uint64_t run_dom(dom::parser& parser, const padded_string& json) {
  dom::element root;
  if (parser.parse(json).get(root)) return 0;
  dom::array events;
  if (root["traceEvents"].get_array().get(events)) return 0;
  return events.size();
}

void print(const char* reader, double cpu, uint64_t bytes, uint64_t values) {
  std::printf("{\"reader\": \"%s\", \"cpu_s\": %.6f, \"bytes\": %llu, \"values\": %llu}\n", reader, cpu,
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(values));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tokenizer_bound FILE.json [REPEAT]\n");
    return 2;
  }
  const char* path = argv[1];
  const int repeat = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  padded_string json;
  if (padded_string::load(path).get(json)) {
    std::fprintf(stderr, "%s: cannot load\n", path);
    return 1;
  }
  ondemand::parser od;
  dom::parser dp;
  ondemand::parser chunked;
  size_t first = 0, last = 0;
  if (!events_span(std::string_view(json.data(), json.size()), &first, &last)) {
    std::fprintf(stderr, "%s: no traceEvents list\n", path);
    return 1;
  }
  const char* names[5] = {"sax", "ondemand", "ondemand-skip-args", "dom", "ondemand-chunks"};
  double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
  uint64_t values[5] = {0, 0, 0, 0, 0};
  uint64_t sax_bytes = 0;
  for (int r = 0; r < repeat; ++r) {
    for (int k = 0; k < 5; ++k) {
      const double t0 = cpu_s();
      const uint64_t n = k == 0   ? run_sax(path, &sax_bytes)
                         : k == 1 ? run_ondemand(od, json, false)
                         : k == 2 ? run_ondemand(od, json, true)
                         : k == 3 ? run_dom(dp, json)
                                  : run_ondemand_chunks(chunked, std::string_view(json.data(), json.size()), first, last);
      best[k] = std::min(best[k], cpu_s() - t0);
      if (n == 0) {
        std::fprintf(stderr, "%s: %s could not read it\n", path, names[k]);
        return 1;
      }
      values[k] = n;
    }
  }
  for (int k = 0; k < 5; ++k) print(names[k], best[k], k == 0 ? sax_bytes : json.size(), values[k]);
  std::printf("{\"simdjson\": \"%s\", \"implementation\": \"%s\"}\n", GPUPROF_STR(SIMDJSON_VERSION),
              std::string(get_active_implementation()->name()).c_str());
  return 0;
}
