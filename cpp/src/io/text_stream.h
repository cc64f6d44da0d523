// A RapidJSON input stream over a plain file, a gzip file (inflated chunk by chunk) or memory.
// The JSON text is streamed through one fixed buffer: never held whole, never held twice, so a
// multi-gigabyte trace costs the events we keep, not its text.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpuprof::io {

class TextStream {
 public:
  typedef char Ch;   // RapidJSON's stream concept

  // Opens `path`; gzip is recognised by its magic bytes, whatever the file is called.
  // On failure, error() is set and the stream is empty.
  TextStream(const std::string& path, uint64_t max_bytes);
  // Streams the bytes of `text` (which must outlive the stream).
  TextStream(std::string_view text, uint64_t max_bytes);
  ~TextStream();
  TextStream(const TextStream&) = delete;
  TextStream& operator=(const TextStream&) = delete;

  Ch Peek() const { return *cur_; }
  Ch Take() {
    const Ch c = *cur_;
    if (++cur_ == end_) refill();
    return c;
  }
  size_t Tell() const {
    return eof_ ? static_cast<size_t>(consumed_) : static_cast<size_t>(consumed_ + (cur_ - chunk_begin_));
  }
  // Write side of the concept: never used by a reader.
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

  bool compressed() const { return compressed_; }
  // The first read error (I/O, corrupt or truncated gzip, size limit); empty when none.
  const std::string& error() const { return error_; }
  int64_t error_offset() const { return error_offset_; }
  // Bytes of JSON text delivered so far (the whole text once the parser finished).
  uint64_t bytes_delivered() const {
    return eof_ ? consumed_ : consumed_ + static_cast<uint64_t>(end_ - chunk_begin_);
  }
  bool at_end() const { return eof_; }

 private:
  void refill();
  size_t read_raw(char* dst, size_t n);
  size_t inflate_some(char* dst, size_t n);
  void fail(std::string message);
  void set_eof();

  std::FILE* file_ = nullptr;
  bool compressed_ = false;
  bool eof_ = false;
  z_stream z_{};
  bool z_open_ = false;
  bool z_member_done_ = false;
  bool truncated_ = false;   // input ended inside a gzip member; reported on the next refill
  uint64_t compressed_read_ = 0;
  std::vector<char> in_buf_;    // compressed input
  std::vector<char> out_buf_;   // text chunk the parser reads
  std::string_view memory_;
  bool from_memory_ = false;
  // Bytes handed to the parser before the current chunk.
  uint64_t consumed_ = 0;
  uint64_t max_bytes_ = 0;
  const char* chunk_begin_ = nullptr;
  const char* cur_ = nullptr;
  const char* end_ = nullptr;
  char sentinel_[1] = {'\0'};
  std::string error_;
  int64_t error_offset_ = -1;
};

}  // namespace gpuprof::io
