#include "text_stream.h"

#include "../core/thread_start.h"
#include "crc32.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpuprof::io {

namespace {
constexpr size_t kChunkBytes = 1 << 20;        // 1 MiB of text per chunk
constexpr size_t kSlots = 3;                   // chunks in flight: parsing, ready, being inflated
constexpr size_t kCompressedBytes = 1 << 16;   // 64 KiB of gzip input per read

// Length of the longest prefix of text[0, n) that ends at a safe cut (text_stream.h), 0 if none.
// The text starts outside a string (it follows a safe cut, or is the start of the document).
size_t safe_cut(const char* text, size_t n) {
  if (const void* newline = memrchr(text, '\n', n))
    return static_cast<size_t>(static_cast<const char*>(newline) - text) + 1;
  size_t cut = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}' || c == ' ' || c == '\t' ||
               c == '\r') {
      cut = i + 1;
    }
    // A control character is invalid JSON wherever it stands (in a string it must be escaped):
    // the text is broken here, and the parser should see it now, not after a search for a cut
    // through the rest of the file (/dev/zero, a sparse file).
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r') return i + 1;
  }
  return cut;
}
}  // namespace

TextStream::TextStream(const std::string& path, uint64_t max_bytes, uint64_t max_token_bytes, uint64_t plain_from)
    : max_bytes_(max_bytes), max_token_bytes_(max_token_bytes) {
  text_begin_ = cur_ = end_ = chunk_begin_ = sentinel_;
  if (!open_file(path)) return;
  if (plain_from > 0) {   // the rest of a plain text file, from that byte (the importer's second half)
    if (::fseeko(file_, static_cast<off_t>(plain_from), SEEK_SET) != 0)
      fail(std::string("cannot seek: ") + std::strerror(errno));
    else refill();
    return;
  }
  start(false);
}

TextStream::TextStream(const std::string& path, uint64_t max_token_bytes, GzipFrom from)
    : max_token_bytes_(max_token_bytes) {
  text_begin_ = cur_ = end_ = chunk_begin_ = sentinel_;
  interrupted_ = std::move(from.stop);   // before the inflating thread starts (in start())
  gzip_from_ = std::move(from);
  if (open_file(path)) start(true);
}

bool TextStream::open_file(const std::string& path) {
  // O_NONBLOCK only for the open itself: a FIFO's open would otherwise wait for a writer (the
  // Python side has already waited for one, with a time limit, and holds the FIFO open, so the
  // text written is there to read even if its writer has finished).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0 ||
      (file_ = ::fdopen(fd, "rb")) == nullptr) {
    fail(std::string("cannot open: ") + std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  return true;
}

void TextStream::start(bool gzip_only) {
  // The first two bytes say gzip or not. They are kept and read again first, rather than
  // rewinding: a pipe or FIFO (`gpuprof analyze /dev/stdin`) cannot rewind.
  head_len_ = std::fread(head_, 1, sizeof(head_), file_);
  compressed_ = head_len_ == 2 && static_cast<unsigned char>(head_[0]) == 0x1f &&
                static_cast<unsigned char>(head_[1]) == 0x8b;
  if (gzip_only && !compressed_) {
    fail("not a gzip file");
    return;
  }
  if (compressed_) {
    in_buf_.resize(kCompressedBytes);
    std::string why;
    decoder_ = RawInflater::create(&why);
    if (!decoder_) {
      fail(why);
      return;
    }
    slots_.assign(kSlots, std::vector<char>());
    for (size_t i = 0; i < kSlots; ++i) free_.push_back(i);
    inflater_ = std::thread([this] {
      prepare_thread_for_exceptions();
      inflate_loop();
    });
  }
  refill();
}

TextStream::TextStream(std::string_view text, uint64_t max_bytes, uint64_t max_token_bytes)
    : max_bytes_(max_bytes), max_token_bytes_(max_token_bytes) {
  text_begin_ = cur_ = end_ = chunk_begin_ = sentinel_;
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
  // prefers error() when it is set. The read position stays on the '\0' that follows the last
  // chunk in its (still held) buffer, so that a number ending the text lies whole before it; the
  // next Take() moves to the sentinel.
  consumed_ = bytes_delivered();
  eof_ = true;   // from here bytes_delivered() is consumed_
  chunk_begin_ = cur_ = end_;
  end_ = cur_ + 1;
}

// ---- the inflating thread -------------------------------------------------------------------------

size_t TextStream::read_file(char* dst, size_t n) {
  size_t from_head = 0;
  if (head_len_ > 0) {
    from_head = std::min(n, head_len_);
    std::memcpy(dst, head_, from_head);
    std::memmove(head_, head_ + from_head, head_len_ - from_head);
    head_len_ -= from_head;
  }
  return from_head + (from_head < n ? std::fread(dst + from_head, 1, n - from_head, file_) : 0);
}

size_t TextStream::read_compressed(std::string* error) {
  const size_t got = read_file(in_buf_.data(), in_buf_.size());
  if (got < in_buf_.size() && std::ferror(file_)) *error = std::string("read error: ") + std::strerror(errno);
  compressed_read_ += got;
  in_next_ = reinterpret_cast<const unsigned char*>(in_buf_.data());
  in_avail_ = got;
  if (got == 0) input_eof_ = true;
  return got;
}

int TextStream::next_byte(std::string* error) {
  if (pending_at_ < pending_end_) return pending_[pending_at_++];
  if (in_avail_ == 0 && (input_eof_ || read_compressed(error) == 0)) return -1;
  --in_avail_;
  return *in_next_++;
}

void TextStream::truncated(std::string* error) const {
  if (error->empty())
    *error = "the gzip data ends early (truncated file: " + std::to_string(compressed_read_) +
             " compressed bytes read)";
}

bool TextStream::start_member(std::string* error) {
  // A gzip file may hold several members back to back (`cat a.gz b.gz`); anything else after a
  // member is ignored, as gunzip does with zero padding.
  const int id1 = next_byte(error);
  const int id2 = id1 == 0x1f ? next_byte(error) : -1;
  if (id1 != 0x1f || id2 != 0x8b) return false;
  // RFC 1952: method, flags, mtime (4), extra flags, OS; then the optional fields the flags name.
  auto corrupt = [&](const char* what) {
    *error =
        "corrupt gzip data near compressed byte " + std::to_string(compressed_read_ - in_avail_) + ": " + what;
    return false;
  };
  int b[8];
  for (int& x : b) {
    if ((x = next_byte(error)) < 0) {
      truncated(error);
      return false;
    }
  }
  if (b[0] != 8) return corrupt("unknown compression method");
  const int flags = b[1];
  if ((flags & 0xE0) != 0) return corrupt("unknown header flags set");
  auto skip = [&](uint64_t n) {
    for (; n > 0; --n)
      if (next_byte(error) < 0) return false;
    return true;
  };
  auto skip_zero_terminated = [&] {
    for (;;) {
      const int c = next_byte(error);
      if (c <= 0) return c == 0;
    }
  };
  bool whole = true;
  if (flags & 0x04) {   // FEXTRA: a 2-byte length, then that many bytes
    const int lo = next_byte(error), hi = lo < 0 ? -1 : next_byte(error);
    whole = hi >= 0 && skip(static_cast<uint64_t>(lo | hi << 8));
  }
  if (whole && (flags & 0x08)) whole = skip_zero_terminated();   // FNAME
  if (whole && (flags & 0x10)) whole = skip_zero_terminated();   // FCOMMENT
  if (whole && (flags & 0x02)) whole = skip(2);   // FHCRC (not checked, as zlib does not by default)
  if (!whole) {
    truncated(error);
    return false;
  }
  return error->empty();
}

size_t TextStream::inflate_some(char* dst, size_t n, std::string* error) {
  unsigned char* const out = reinterpret_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n && error->empty() && !members_done_) {
    if (!in_member_) {
      if (!start_member(error)) {
        members_done_ = true;
        break;
      }
      decoder_->reset();
      in_member_ = true;
    }
    if (in_avail_ == 0 && !input_eof_) read_compressed(error);
    if (!error->empty()) break;
    const RawInflater::Step s = decoder_->run(in_next_, in_avail_, out + done, n - done);
    in_next_ += s.consumed;
    in_avail_ -= s.consumed;
    member_crc_ = gzip_crc32(member_crc_, out + done, s.produced);
    member_bytes_ += s.produced;
    done += s.produced;
    if (s.status == RawInflater::Status::kError) {
      *error = "corrupt gzip data near compressed byte " + std::to_string(compressed_read_ - in_avail_) + ": " +
               s.message;
    } else if (s.status == RawInflater::Status::kEnd) {
      std::memcpy(pending_, s.leftover, s.leftover_bytes);
      pending_at_ = 0;
      pending_end_ = s.leftover_bytes;
      in_member_ = false;
      check_member_trailer(error);
    } else if (s.produced == 0 && s.consumed == 0) {
      // Nothing more from what there is: the file ended inside the member (or the decoder, given
      // input and room, did nothing, which would otherwise loop here for ever).
      if (in_avail_ == 0) truncated(error);
      else
        *error = "the gzip decoder stopped near compressed byte " + std::to_string(compressed_read_ - in_avail_);
    }
  }
  return done;
}

size_t TextStream::produce(char* dst, size_t n, std::string* error) {
  if (compressed_) return inflate_some(dst, n, error);
  if (from_memory_) {
    const size_t got = std::min(n, memory_.size());
    std::memcpy(dst, memory_.data(), got);
    memory_.remove_prefix(got);
    return got;
  }
  const size_t got = read_file(dst, n);
  if (got < n && std::ferror(file_)) *error = std::string("read error: ") + std::strerror(errno);
  return got;
}

size_t TextStream::fill_chunk(std::vector<char>& buf, std::string* error) {
  size_t len = carry_.size();
  if (source_done_ && len == 0) return 0;   // leaves the last chunk (and its '\0') untouched
  if (buf.size() < len + kChunkBytes + 1) buf.resize(len + kChunkBytes + 1);
  if (len > 0) std::memcpy(buf.data(), carry_.data(), len);
  carry_.clear();
  for (;;) {
    if (!source_done_) {
      const size_t want = buf.size() - 1 - len;
      const size_t got = produce(buf.data() + len, want, error);
      len += got;
      if (got < want || !error->empty()) source_done_ = true;
    }
    if (source_done_) {   // the rest of the text, whole
      buf[len] = '\0';
      return len;
    }
    const size_t cut = safe_cut(buf.data(), len);
    if (cut > 0) {
      carry_.assign(buf.data() + cut, buf.data() + len);
      buf[cut] = '\0';
      return cut;
    }
    if (len >= max_token_bytes_) {
      *error = "a single JSON string or number is longer than " + std::to_string(max_token_bytes_ >> 20) +
               " MiB (the limit for one value; set "
               "GPUPROF_MAX_TOKEN_MIB to raise it if this file is right)";
      return 0;
    }
    buf.resize(
        std::min<size_t>(2 * buf.size(), max_token_bytes_ + kChunkBytes + 1));   // one value longer than the chunk
  }
}

void TextStream::check_member_trailer(std::string* error) {
  // The member's 8-byte trailer follows its deflate data: CRC-32 and length mod 2^32, little-endian.
  unsigned char t[8];
  for (unsigned char& c : t) {
    const int x = next_byte(error);
    if (x < 0) {
      truncated(error);
      return;
    }
    c = static_cast<unsigned char>(x);
  }
  auto le32 = [](const unsigned char* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  };
  const char* wrong = le32(t) != member_crc_                   ? "incorrect data check"
                      : le32(t + 4) != uint32_t(member_bytes_) ? "incorrect length check"
                                                               : nullptr;
  if (wrong != nullptr)
    *error =
        "corrupt gzip data near compressed byte " + std::to_string(compressed_read_ - in_avail_) + ": " + wrong;
  member_crc_ = 0;
  member_bytes_ = 0;
}

bool TextStream::inflate_to_start(std::string* error) {
  const uint64_t from = gzip_from_.from;
  std::vector<char> buf(kChunkBytes);
  uint64_t pos = 0;   // text offset of buf[0]
  size_t got = 0;
  for (;;) {   // whole chunks thrown away until the one that holds byte `from`
    if (interrupted_ && interrupted_()) {
      *error = "interrupted";
      return false;
    }
    got = inflate_some(buf.data(), buf.size(), error);
    if (!error->empty()) return false;
    if (pos + got > from) break;
    if (got < buf.size()) {
      *error = "the text ends before the place a second thread was to start reading";
      return false;
    }
    pos += got;
  }
  std::string window(buf.data() + (from - pos), got - static_cast<size_t>(from - pos));
  while (window.size() < kBoundaryWindow && got == buf.size()) {
    got = inflate_some(buf.data(), buf.size(), error);
    if (!error->empty()) return false;
    window.append(buf.data(), got);
  }
  // (A short read above was the end of the text: the next inflate_some() gives nothing more.)
  const int64_t i = gzip_from_.boundary(std::string_view(window).substr(0, kBoundaryWindow));
  if (i < 0) {
    *error = "no place to start a second thread near the middle of the text";
    return false;
  }
  carry_.assign(window.begin() + i, window.end());
  gzip_from_.found(from + static_cast<uint64_t>(i));
  return true;
}

void TextStream::post_end(const std::string& error) {   // (mu_ held)
  inflate_error_ = error;
  filled_.push_back({0, 0, source_pos()});
  cv_.notify_all();
}

void TextStream::inflate_loop() {
  std::string error;
  if (gzip_from_.boundary) {
    const bool started = inflate_to_start(&error);
    source_start_ = compressed_read_ - in_avail_;   // what it read before its start is not progress
    if (!started) {
      std::lock_guard<std::mutex> lock(mu_);
      post_end(error);
      return;
    }
  }
  for (;;) {
    size_t slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
      if (stop_) return;
      slot = free_.front();
      free_.pop_front();
    }
    const size_t got = fill_chunk(slots_[slot], &error);
    std::lock_guard<std::mutex> lock(mu_);
    // The good text before an error goes first, so the error says how far the text went.
    if (got > 0) filled_.push_back({slot, got, source_pos()});
    else free_.push_back(slot);
    if (got == 0 || !error.empty()) {
      post_end(error);
      return;
    }
    cv_.notify_all();
  }
}

// ---- the parser's side ------------------------------------------------------------------------------

void TextStream::skip_whitespace_run() {
  // What indented text (Kineto's own) has before most lines: a newline, an indent of fewer than
  // eight spaces, a token; one load for the indent.
  if (*cur_ == '\n' && end_ - cur_ > 9) {
    uint64_t w;
    std::memcpy(&w, cur_ + 1, 8);
    const uint64_t other = w ^ 0x2020202020202020ULL;   // nonzero bytes: not a space
    if (other != 0) {
      char* const p = cur_ + 1 + __builtin_ctzll(other) / 8;
      if (static_cast<unsigned char>(*p) > ' ') {
        cur_ = p;
        return;
      }
    }
  }
  for (;;) {
    char* p = cur_;
    char* const limit = end_ - 1;
    while (p < limit) {
      const char c = *p;
      if (static_cast<unsigned char>(c) > ' ' || !is_space(c)) break;   // most bytes: one compare
      ++p;
      if (c == '\n') p = skip_spaces(p, limit);
    }
    cur_ = p;
    if (!is_space(*cur_)) return;
    Take();
  }
}

void TextStream::refill() {
  if (eof_) {
    text_begin_ = cur_ = sentinel_;   // a Take() past the end keeps reading '\0'
    end_ = sentinel_ + 1;
    return;
  }
  consumed_ += static_cast<uint64_t>(end_ - chunk_begin_);
  chunk_begin_ = cur_ = end_;   // nothing of the old chunk is left unread
  if (interrupted_ && interrupted_()) {
    text_begin_ = chunk_begin_ = cur_ = end_ = sentinel_;
    fail("interrupted");
    return;
  }
  size_t got = 0;
  char* base = nullptr;
  if (compressed_) {
    Chunk next;
    std::string inflate_error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !filled_.empty(); });
      next = filled_.front();
      filled_.pop_front();
      if (next.bytes == 0) {
        inflate_error = inflate_error_;
      } else if (holding_slot_) {
        // The last chunk stays held at the end of the text (set_eof).
        free_.push_back(held_slot_);
        holding_slot_ = false;
        cv_.notify_all();
      }
    }
    tell_progress(next.source_pos);
    if (next.bytes == 0) {
      if (!inflate_error.empty()) fail(inflate_error);
      else set_eof();
      return;
    }
    holding_slot_ = true;
    held_slot_ = next.slot;
    got = next.bytes;
    base = slots_[next.slot].data();
  } else if (file_ != nullptr || from_memory_) {
    std::string error;
    got = fill_chunk(plain_buf_, &error);
    if (!error.empty()) {
      text_begin_ = chunk_begin_ = cur_ = end_ = sentinel_;   // plain_buf_ now holds unread text
      fail(error);
      return;
    }
    base = plain_buf_.data();
    tell_progress(consumed_ + got);
  }
  if (max_bytes_ != 0 && consumed_ + got > max_bytes_) {
    text_begin_ = chunk_begin_ = cur_ = end_ = sentinel_;   // the old chunk may be refilled already
    fail("the JSON text is larger than the limit of " + std::to_string(max_bytes_) +
         " bytes (raise max_bytes to read it)");
    return;
  }
  if (got == 0) {
    set_eof();
    return;
  }
  text_begin_ = chunk_begin_ = cur_ = base;
  end_ = base + got;
}

}   // namespace gpuprof::io
