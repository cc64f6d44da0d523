// The Chrome export's output (chrome_export.cpp): a sink that buffers text and hands it to a file,
// a gzip stream or a string in blocks, a compact JSON writer onto it, and the writing helpers and
// top level (chrome_header.cpp) every export shares.
#pragma once

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpuprof/analysis/chrome_export.h"

namespace gpuprof::chrome_json {

// An output stream that buffers text and hands it to a file or a gzip stream in blocks.
class BlockSink {
 public:
  typedef char Ch;
  explicit BlockSink(const std::string& path) : path_(path) {
    gzip_ = path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
    if (gzip_) {
      gz_ = gzopen(path.c_str(), "wb6");
      if (gz_ == nullptr) throw TraceExportError(path + ": cannot write: " + std::strerror(errno));
    } else {
      file_ = std::fopen(path.c_str(), "wb");
      if (file_ == nullptr) throw TraceExportError(path + ": cannot write: " + std::strerror(errno));
    }
    buf_.reserve(kBlock + 64);
  }
  explicit BlockSink(std::string* memory) : memory_(memory) {}
  ~BlockSink() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
  }
  void Put(char c) {
    buf_.push_back(c);
    if (buf_.size() >= kBlock) drain();
  }
  void write(const char* p, size_t n) {
    buf_.append(p, n);
    if (buf_.size() >= kBlock) drain();
  }
  void Flush() {}
  void close() {
    drain();
    if (gz_ != nullptr) {
      const int rc = gzclose(gz_);
      gz_ = nullptr;
      if (rc != Z_OK) throw TraceExportError(path_ + ": writing the gzip stream failed (disk full?)");
    }
    if (file_ != nullptr) {
      const int rc = std::fclose(file_);
      file_ = nullptr;
      if (rc != 0) throw TraceExportError(path_ + ": cannot write: " + std::strerror(errno));
    }
  }

 private:
  static constexpr size_t kBlock = 1 << 20;
  void drain() {
    if (buf_.empty()) return;
    if (memory_ != nullptr) {
      memory_->append(buf_);
    } else if (gz_ != nullptr) {
      if (gzwrite(gz_, buf_.data(), unsigned(buf_.size())) != int(buf_.size()))
        throw TraceExportError(path_ + ": writing the gzip stream failed (disk full?)");
    } else if (std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size()) {
      throw TraceExportError(path_ + ": cannot write: " + std::strerror(errno));
    }
    buf_.clear();
  }
  std::string path_;
  bool gzip_ = false;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
  std::string* memory_ = nullptr;
  std::string buf_;
};

// Compact JSON onto a BlockSink (strings escaped as JSON requires; bytes >= 0x80 kept).
class JsonWriter {
 public:
  explicit JsonWriter(BlockSink& out) : out_(out) {}
  void StartObject() { start('{', true); }
  void StartArray() { start('[', false); }
  void EndObject() { end('}'); }
  void EndArray() { end(']'); }
  void Key(const char* s, size_t n) { String(s, n); }
  void String(const char* s, size_t n) {
    prefix();
    static const char digits[] = "0123456789ABCDEF";
    out_.Put('"');
    size_t run = 0;   // plain bytes not yet written
    for (size_t i = 0; i < n; ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_.write(s + run, i - run);
      run = i + 1;
      char esc[6] = {'\\', 0, 0, 0, 0, 0};
      size_t len = 2;
      switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
          esc[1] = 'u';
          esc[2] = '0';
          esc[3] = '0';
          esc[4] = digits[c >> 4];
          esc[5] = digits[c & 15];
          len = 6;
      }
      out_.write(esc, len);
    }
    out_.write(s + run, n - run);
    out_.Put('"');
  }
  void String(const char* s) { String(s, std::strlen(s)); }
  void Int(int v) { integer(int64_t(v)); }
  void Int64(int64_t v) { integer(v); }
  void Uint(unsigned v) { unsigned_integer(v); }
  void Uint64(uint64_t v) { unsigned_integer(v); }
  // Shortest text that reads back as the same double, with a ".0" on whole numbers.
  void Double(double d) {
    prefix();
    char text[400];
    auto r = std::to_chars(text, text + sizeof text - 2, d, std::chars_format::fixed);
    if (r.ec != std::errc()) r = std::to_chars(text, text + sizeof text - 2, d);
    size_t n = size_t(r.ptr - text);
    if (std::memchr(text, '.', n) == nullptr && std::memchr(text, 'e', n) == nullptr) {
      text[n++] = '.';
      text[n++] = '0';
    }
    out_.write(text, n);
  }
  void RawValue(const char* s, size_t n) {
    prefix();
    out_.write(s, n);
  }

 private:
  void integer(int64_t v) {
    prefix();
    char text[24];
    const auto r = std::to_chars(text, text + sizeof text, v);
    out_.write(text, size_t(r.ptr - text));
  }
  void unsigned_integer(uint64_t v) {
    prefix();
    char text[24];
    const auto r = std::to_chars(text, text + sizeof text, v);
    out_.write(text, size_t(r.ptr - text));
  }
  void start(char c, bool object) {
    prefix();
    out_.Put(c);
    levels_.push_back({object, 0});
  }
  void end(char c) {
    out_.Put(c);
    levels_.pop_back();
  }
  void prefix() {
    if (levels_.empty()) return;
    Level& l = levels_.back();
    if (l.values > 0) out_.Put(l.object ? (l.values % 2 == 0 ? ',' : ':') : ',');
    ++l.values;
  }
  struct Level {
    bool object;
    uint64_t values;
  };
  BlockSink& out_;
  std::vector<Level> levels_;
};

// Times as microseconds with exactly three decimals (integer nanoseconds).
inline void write_us(JsonWriter& w, int64_t ns) {
  char text[32];
  const uint64_t mag = ns < 0 ? uint64_t(0) - uint64_t(ns) : uint64_t(ns);
  const int n =
      std::snprintf(text, sizeof text, "%s%" PRIu64 ".%03" PRIu64, ns < 0 ? "-" : "", mag / 1000, mag % 1000);
  w.RawValue(text, size_t(n));
}

inline void key(JsonWriter& w, const char* k) { w.Key(k, std::strlen(k)); }
inline void str(JsonWriter& w, const std::string& s) { w.String(s.data(), s.size()); }

// A field the source did not know (a negative count, an empty text) is left out, not written as -1
// or "".
inline void known(JsonWriter& w, const char* k, int64_t v) {
  if (v < 0) return;
  key(w, k);
  w.Int64(v);
}
inline void known(JsonWriter& w, const char* k, const std::string& v) {
  if (v.empty()) return;
  key(w, k);
  str(w, v);
}

// A one-process Chrome trace's top level (chrome_header.cpp): what comes before traceEvents' entries,
// up to its opening bracket (devices, metadata, GPU samples), and what comes after them.
void write_header(JsonWriter& w, const Trace& t);
void write_footer(JsonWriter& w);

}  // namespace gpuprof::chrome_json
