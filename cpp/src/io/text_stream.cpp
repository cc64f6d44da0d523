#include "text_stream.h"

#include <cerrno>
#include <cstring>

namespace gpuprof::io {

namespace {
constexpr size_t kChunkBytes = 1 << 18;        // 256 KiB of text per refill
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
  out_buf_.resize(kChunkBytes);
  if (compressed_) {
    in_buf_.resize(kCompressedBytes);
    // 15 + 16: gzip wrapper only (a zlib or raw stream in a .gz file is not what Kineto writes).
    if (inflateInit2(&z_, 15 + 16) != Z_OK) {
      fail("cannot start gzip decompression (zlib out of memory)");
      return;
    }
    z_open_ = true;
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

size_t TextStream::read_raw(char* dst, size_t n) {
  const size_t got = std::fread(dst, 1, n, file_);
  if (got < n && std::ferror(file_)) fail(std::string("read error: ") + std::strerror(errno));
  return got;
}

size_t TextStream::inflate_some(char* dst, size_t n) {
  if (truncated_) {
    fail("the gzip data ends early (truncated file: " + std::to_string(compressed_read_) +
         " compressed bytes read)");
    return 0;
  }
  z_.next_out = reinterpret_cast<Bytef*>(dst);
  z_.avail_out = static_cast<uInt>(n);
  while (z_.avail_out > 0) {
    if (z_member_done_) {
      // A gzip file may hold several members back to back (`cat a.gz b.gz`); anything else after
      // the first member that is not another member is ignored, as gunzip does with zero padding.
      if (z_.avail_in == 0) {
        const size_t got = read_raw(in_buf_.data(), in_buf_.size());
        if (got == 0) break;
        compressed_read_ += got;
        z_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
        z_.avail_in = static_cast<uInt>(got);
      }
      if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
        z_.avail_in = 0;
        std::fseek(file_, 0, SEEK_END);
        break;
      }
      inflateReset(&z_);
      z_member_done_ = false;
    }
    if (z_.avail_in == 0) {
      const size_t got = read_raw(in_buf_.data(), in_buf_.size());
      if (got == 0) {
        // Hand over what was inflated first, so the error says how far the good text went.
        if (n - z_.avail_out > 0) {
          truncated_ = true;
          break;
        }
        if (error_.empty())
          fail("the gzip data ends early (truncated file: " + std::to_string(compressed_read_) +
               " compressed bytes read)");
        return 0;
      }
      compressed_read_ += got;
      z_.next_in = reinterpret_cast<Bytef*>(in_buf_.data());
      z_.avail_in = static_cast<uInt>(got);
    }
    const int rc = inflate(&z_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      z_member_done_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const uint64_t at = compressed_read_ - z_.avail_in;
      fail(std::string("corrupt gzip data near compressed byte ") + std::to_string(at) + ": " +
           (z_.msg ? z_.msg : zError(rc)));
      return 0;
    }
  }
  return n - z_.avail_out;
}

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
  } else if (file_ != nullptr && error_.empty()) {
    got = compressed_ ? inflate_some(out_buf_.data(), out_buf_.size())
                      : read_raw(out_buf_.data(), out_buf_.size());
    base = out_buf_.data();
  }
  if (!error_.empty()) return;   // fail() already switched to the end sentinel
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
