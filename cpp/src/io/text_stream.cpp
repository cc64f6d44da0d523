#include "text_stream.h"

#include <cerrno>
#include <cstring>

namespace gpuprof::io {

namespace {
constexpr size_t kChunkBytes = 1 << 20;        // 1 MiB of text per chunk
constexpr size_t kSlots = 3;                   // chunks in flight: parsing, ready, being inflated
constexpr size_t kCompressedBytes = 1 << 16;   // 64 KiB of gzip input per read
}  // namespace

TextStream::TextStream(const std::string& path, uint64_t max_bytes) : max_bytes_(max_bytes) {
  cur_ = end_ = chunk_begin_ = sentinel_;
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    fail(std::string("cannot open: ") + std::strerror(errno));
    return;
  }
  unsigned char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, file_);
  compressed_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::rewind(file_);
  if (compressed_) {
    in_buf_.resize(kCompressedBytes);
    // 15 + 16: gzip wrapper only (a zlib or raw stream in a .gz file is not what Kineto writes).
    if (inflateInit2(&z_, 15 + 16) != Z_OK) {
      fail("cannot start gzip decompression (zlib out of memory)");
      return;
    }
    z_open_ = true;
    slots_.assign(kSlots, std::vector<char>(kChunkBytes));
    for (size_t i = 0; i < kSlots; ++i) free_.push_back(i);
    inflater_ = std::thread([this] { inflate_loop(); });
  } else {
    plain_buf_.resize(kChunkBytes);
  }
  refill();
}

TextStream::TextStream(std::string_view text, uint64_t max_bytes) : max_bytes_(max_bytes) {
  cur_ = end_ = chunk_begin_ = sentinel_;
  memory_ = text;
  from_memory_ = true;
  refill();
}

TextStream::~TextStream() {
  if (inflater_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    inflater_.join();
  }
  if (z_open_) inflateEnd(&z_);
  if (file_ != nullptr) std::fclose(file_);
}

void TextStream::fail(std::string message) {
  if (error_.empty()) {
    error_ = std::move(message);
    error_offset_ = static_cast<int64_t>(bytes_delivered());
  }
  set_eof();
}

void TextStream::set_eof() {
  // The parser sees '\0' from here on and reports the document as ending early; the caller then
  // prefers error() when it is set.
  consumed_ = bytes_delivered();
  eof_ = true;   // from here bytes_delivered() is consumed_
  chunk_begin_ = cur_ = sentinel_;
  end_ = sentinel_ + 1;
}

// ---- the inflating thread -------------------------------------------------------------------------

size_t TextStream::read_compressed(std::string* error) {
  const size_t got = std::fread(in_buf_.data(), 1, in_buf_.size(), file_);
  if (got < in_buf_.size() && std::ferror(file_)) *error = std::string("read error: ") + std::strerror(errno);
  compressed_read_ += got;
  z_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
  z_.avail_in = static_cast<uInt>(got);
  return got;
}

size_t TextStream::inflate_some(char* dst, size_t n, std::string* error) {
  z_.next_out = reinterpret_cast<Bytef*>(dst);
  z_.avail_out = static_cast<uInt>(n);
  while (z_.avail_out > 0 && error->empty()) {
    if (z_member_done_) {
      // A gzip file may hold several members back to back (`cat a.gz b.gz`); anything else after
      // a member is ignored, as gunzip does with zero padding.
      if (z_.avail_in == 0 && read_compressed(error) == 0) break;
      if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
        z_.avail_in = 0;
        std::fseek(file_, 0, SEEK_END);
        break;
      }
      inflateReset(&z_);
      z_member_done_ = false;
    }
    if (z_.avail_in == 0 && read_compressed(error) == 0) {
      if (error->empty())
        *error = "the gzip data ends early (truncated file: " + std::to_string(compressed_read_) +
                 " compressed bytes read)";
      break;
    }
    const int rc = inflate(&z_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      z_member_done_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const uint64_t at = compressed_read_ - z_.avail_in;
      *error = std::string("corrupt gzip data near compressed byte ") + std::to_string(at) + ": " +
               (z_.msg ? z_.msg : zError(rc));
    }
  }
  return n - z_.avail_out;
}

void TextStream::inflate_loop() {
  std::string error;
  for (;;) {
    size_t slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
      if (stop_) return;
      slot = free_.front();
      free_.pop_front();
    }
    const size_t got = inflate_some(slots_[slot].data(), slots_[slot].size(), &error);
    std::lock_guard<std::mutex> lock(mu_);
    // The good text before an error goes first, so the error says how far the text went.
    if (got > 0) filled_.push_back({slot, got});
    else free_.push_back(slot);
    if (got == 0 || !error.empty()) {
      inflate_error_ = error;
      filled_.push_back({0, 0});
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

// ---- the parser's side ------------------------------------------------------------------------------

void TextStream::refill() {
  if (eof_) {
    cur_ = sentinel_;   // a Take() past the end keeps reading '\0'
    return;
  }
  consumed_ += static_cast<uint64_t>(end_ - chunk_begin_);
  chunk_begin_ = cur_ = end_;   // nothing of the old chunk is left unread
  size_t got = 0;
  const char* base = nullptr;
  if (from_memory_) {
    got = memory_.size();
    base = memory_.data();
    memory_ = {};
  } else if (compressed_) {
    Chunk next;
    std::string inflate_error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (holding_slot_) {
        free_.push_back(held_slot_);
        holding_slot_ = false;
        cv_.notify_all();
      }
      cv_.wait(lock, [this] { return !filled_.empty(); });
      next = filled_.front();
      filled_.pop_front();
      if (next.bytes == 0) inflate_error = inflate_error_;
    }
    if (next.bytes == 0) {
      if (!inflate_error.empty()) fail(inflate_error);
      else set_eof();
      return;
    }
    holding_slot_ = true;
    held_slot_ = next.slot;
    got = next.bytes;
    base = slots_[next.slot].data();
  } else if (file_ != nullptr) {
    got = std::fread(plain_buf_.data(), 1, plain_buf_.size(), file_);
    if (got < plain_buf_.size() && std::ferror(file_)) {
      fail(std::string("read error: ") + std::strerror(errno));
      return;
    }
    base = plain_buf_.data();
  }
  if (max_bytes_ != 0 && consumed_ + got > max_bytes_) {
    fail("the JSON text is larger than the limit of " + std::to_string(max_bytes_) +
         " bytes (raise max_bytes to read it)");
    return;
  }
  if (got == 0) {
    set_eof();
    return;
  }
  chunk_begin_ = cur_ = base;
  end_ = base + got;
}

}  // namespace gpuprof::io
