// The JSON reader's input stream (json_sax.h) over a plain file, a gzip file or memory.
// The JSON text is streamed through a few fixed buffers: never held whole, never held twice, so a
// multi-gigabyte trace costs the events we keep, not its text. A gzip file is inflated on a second
// thread, one chunk ahead of the parser, so decompression and parsing overlap.
//
// The stream supports in-situ parsing: strings are unescaped and
// numbers handed over where they lie in the chunk, instead of being copied character by character
// onto a stack (such a copy was half of a reader's time). In-situ parsing needs every
// string and number to lie whole in one chunk, so a chunk ends at a safe cut: after its last
// newline (JSON text cannot hold a raw newline inside a string or a number), or, in text without
// newlines, after its last structural character outside a string; the rest opens the next chunk.
// Each chunk is followed by a '\0' in its buffer, so a number that ends the text still lies whole
// before the read position.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <vector>

#include "raw_inflate.h"

namespace gpuprof::io {

// The eight-bytes-at-a-time scans here and in the importer read the first byte as the lowest.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gpuprof's text scans assume a little-endian CPU");

// Eight bytes `w` of text (the first byte lowest): zero when all are '0'..'9', else the lowest set
// bit lies in the first byte that is not a digit. A byte is a digit when its high half is 3 and
// adding 6 keeps it 3 ('0'..'9' are 0x30..0x39): each byte's two high halves side by side must
// read 0x33. A carry out of a byte (0xFA..0xFF, not a digit) changes only later bytes.
inline uint64_t nondigit_flags(uint64_t w) {
  const uint64_t high = 0xF0F0F0F0F0F0F0F0ULL;
  return ((w & high) | (((w + 0x0606060606060606ULL) & high) >> 4)) ^ 0x3333333333333333ULL;
}

class TextStream {
 public:
  typedef char Ch;

  // Opens `path`; gzip is recognised by its magic bytes, whatever the file is called.
  // On failure, error() is set and the stream is empty.
  // No single JSON value (a string or number: what a chunk cannot be cut inside) may be longer than
  // max_token_bytes: the buffer that holds one would otherwise grow without bound.
  static constexpr uint64_t kDefaultMaxTokenBytes = uint64_t(64) << 20;
  // With plain_from > 0 the file is read as plain text from that byte on (no gzip check): the
  // importer's second thread reads the second half of a large plain file this way.
  TextStream(const std::string& path, uint64_t max_bytes, uint64_t max_token_bytes = kDefaultMaxTokenBytes,
             uint64_t plain_from = 0);
  // The importer's second thread over a gzip file: the text from a place found at or after byte
  // `from` of the inflated text. The file is inflated from its start on the stream's own inflating
  // thread, the text before `from` thrown away; `boundary` (required) is given the text from
  // `from` on (64 KiB of it, less at the end) and says where the stream starts in it (-1: nowhere,
  // and the stream fails), and `found` is told that text offset before the stream hands out any
  // text. `stop` becomes the stream's interrupt check (set_interrupt_check, which this stream must
  // not be given: its inflating thread already asks it): asked about every MiB while inflating
  // ahead, and before every chunk after (true: "interrupted").
  struct GzipFrom {
    uint64_t from = 0;
    std::function<int64_t(std::string_view)> boundary;
    std::function<void(uint64_t at)> found;
    std::function<bool()> stop;
  };
  static constexpr size_t kBoundaryWindow = 64 << 10;
  TextStream(const std::string& path, uint64_t max_token_bytes, GzipFrom from);
  // Streams the bytes of `text` (which must outlive the stream).
  TextStream(std::string_view text, uint64_t max_bytes, uint64_t max_token_bytes = kDefaultMaxTokenBytes);
  // Asked before each chunk (about every MiB of text): true ends the text with error "interrupted"
  // (the Python binding checks for Ctrl-C here, so a long import stops within a moment).
  void set_interrupt_check(std::function<bool()> interrupted) { interrupted_ = std::move(interrupted); }
  // Told, on the parser's thread as each chunk arrives (about every MiB) and at the end, how far
  // into its source the stream has read: bytes of the file (compressed bytes for gzip) or of the
  // memory, counted from where the stream starts (for GzipFrom: from where it found its start).
  void set_progress(std::function<void(uint64_t source_bytes)> progress) { progress_ = std::move(progress); }
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
  // Write side of the concept, for in-situ parsing: the reader writes a decoded string over its
  // own text (never past the read position, since unescaping only shortens it).
  Ch* PutBegin() { return dst_ = cur_; }
  void Put(Ch c) { *dst_++ = c; }
  void Flush() {}
  size_t PutEnd(Ch* begin) { return static_cast<size_t>(dst_ - begin); }

  // Fast paths the reader (json_sax.h) takes.
  // Both stop before the chunk's last byte, which Take() reads (it refills after it).
  // Skips white space. Kineto writes one space after a colon or comma, and a newline and an
  // indent of spaces before each field line: after a newline the spaces go eight at a time.
  // Inline for the two cases most calls meet (none, and one space before a token); the rest, and
  // white space that runs to the chunk's end, out of line. (A space lies before the chunk's end,
  // and the '\0' after the chunk is not above ' ': reading the byte after the space needs no bound.)
  __attribute__((always_inline)) void skip_whitespace() {
    const unsigned char c = static_cast<unsigned char>(*cur_);
    if (c > ' ') return;
    if (c == ' ' && static_cast<unsigned char>(cur_[1]) > ' ') {
      ++cur_;
      return;
    }
    skip_whitespace_run();
  }
  // Moves over `sep` and the space after it, if any, when a token follows (Kineto's ": " and
  // ", ", or the compact ':' and ','): true; false, having moved nothing, otherwise. Reads no byte
  // past the '\0' after the chunk: a byte that is `sep` or a space lies before the chunk's end.
  __attribute__((always_inline)) bool skip_separator(char sep) {
    if (*cur_ != sep) return false;
    const unsigned char next = static_cast<unsigned char>(cur_[1]);
    if (next > ' ') {
      cur_ += 1;
      return true;
    }
    if (next == ' ' && static_cast<unsigned char>(cur_[2]) > ' ') {
      cur_ += 2;
      return true;
    }
    return false;
  }
  // Moves over a run of decimal digits; returns how many (the reader's number scan). Eight bytes
  // at a time: a timestamp has 16 digits or more.
  size_t skip_digits() {
    size_t n = 0;
    for (;;) {
      char* p = cur_;
      char* const limit = end_ - 1;
      while (limit - p >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        const uint64_t flags = nondigit_flags(w);
        if (flags != 0) {   // the run ends inside these eight bytes, before the chunk's last byte
          p += __builtin_ctzll(flags) / 8;
          n += static_cast<size_t>(p - cur_);
          cur_ = p;
          return n;
        }
        p += 8;
      }
      while (p < limit && static_cast<unsigned char>(*p - '0') < 10) ++p;
      n += static_cast<size_t>(p - cur_);
      cur_ = p;
      if (static_cast<unsigned char>(*cur_ - '0') >= 10) return n;
      Take();
      ++n;
    }
  }
  // In-situ strings: moves the read and write positions over the plain characters of a string,
  // up to its first quote, backslash or control character (16 bytes at a time where SSE2 is).
  // Inline: the reader calls it for every string and key.
  void scan_unescaped() {
    char* p = cur_;
    char* const limit = end_ - 1;
    char* q = dst_;
    // Until the first escape the decoded string lies where its text does: nothing to move.
    const bool shifted = q != p;
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), control = _mm_set1_epi8(0x1F);
    while (limit - p >= 16) {
      const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(s, quote), _mm_cmpeq_epi8(s, backslash)),
                                        _mm_cmpeq_epi8(_mm_max_epu8(s, control), control));   // s <= 0x1F
      const unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(stop));
      if (mask != 0) {
        const int plain = __builtin_ctz(mask);
        if (shifted) std::memmove(q, p, static_cast<size_t>(plain));
        cur_ = p + plain;
        dst_ = q + plain;
        return;
      }
      // q < p: the store may cover bytes at p.. already loaded, never unread ones past p + 16.
      if (shifted) _mm_storeu_si128(reinterpret_cast<__m128i*>(q), s);
      p += 16;
      q += 16;
    }
#endif
    while (p < limit) {
      const unsigned char c = static_cast<unsigned char>(*p);
      if (c == '"' || c == '\\' || c < 0x20) break;
      *q++ = *p++;
    }
    cur_ = p;
    dst_ = q;
  }

  // The n characters just read, for a number the reader parsed in situ: it ends at the read
  // position and lies in the current chunk (safe cuts). Empty if that cannot hold (a read error).
  std::string_view last_read(size_t n) const {
    return static_cast<size_t>(cur_ - text_begin_) >= n ? std::string_view(cur_ - n, n) : std::string_view();
  }

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
  static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
  void skip_whitespace_run();   // skip_whitespace()'s general case (text_stream.cpp)
  // Moves p over spaces (not other white space), eight bytes at a time, up to limit.
  static char* skip_spaces(char* p, char* const limit) {
    while (limit - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      const uint64_t other = w ^ 0x2020202020202020ULL;   // nonzero bytes: not a space
      if (other != 0) return p + __builtin_ctzll(other) / 8;
      p += 8;
    }
    return p;
  }

  // One inflated chunk handed from the inflating thread to the parser.
  struct Chunk {
    size_t slot = 0;
    size_t bytes = 0;   // 0: the end of the text (error_ says whether it ended well)
    uint64_t source_pos = 0;   // compressed bytes inflated once this chunk was (set_progress)
  };

  void refill();
  bool open_file(const std::string& path);   // file_, or fail() and false
  void start(bool gzip_only);   // after the file is open: gzip or not, then the first chunk
  void fail(std::string message);
  void set_eof();
  // Producer side (the inflating thread for gzip, the parser's thread otherwise).
  // Fills `buf` with the next chunk of text, cut at a safe place; returns its length (0: the end).
  size_t fill_chunk(std::vector<char>& buf, std::string* error);
  // Up to n bytes of text from the source; fewer only at its end (or on an error).
  size_t produce(char* dst, size_t n, std::string* error);
  void inflate_loop();
  // Posts the end of the text (with its error, if any) for the parser; mu_ held.
  void post_end(const std::string& error);
  uint64_t source_pos() const { return compressed_read_ - in_avail_ - source_start_; }   // inflating thread
  void tell_progress(uint64_t source_bytes) {
    if (progress_) progress_(source_bytes);
  }
  // GzipFrom: inflates up to the place the stream starts; its text up to what was inflated is then
  // in carry_. False (and *error set) when there is none or the text before it is bad.
  bool inflate_to_start(std::string* error);
  size_t inflate_some(char* dst, size_t n, std::string* error);
  size_t read_compressed(std::string* error);
  size_t read_file(char* dst, size_t n);   // the kept first bytes, then the file
  // The gzip framing, read here for either deflate decoder (raw_inflate.h), byte by byte (headers
  // and trailers are a few bytes per member). The next compressed byte, -1 at the end of the file.
  int next_byte(std::string* error);
  // Reads the next member's header; false at the end of the members (the end of the file, or
  // bytes that are not a gzip member: ignored, as gunzip does with zero padding) or on an error.
  bool start_member(std::string* error);
  void truncated(std::string* error) const;   // the "ends early" error
  // Checks each gzip member's CRC-32 and length (its 8-byte trailer) against the text the
  // inflating thread has just produced, computed while that is still in cache.
  void check_member_trailer(std::string* error);

  std::FILE* file_ = nullptr;
  char head_[2] = {0, 0};   // the file's first bytes, read to tell gzip; read_file() hands them out first
  size_t head_len_ = 0;
  bool compressed_ = false;
  bool eof_ = false;
  std::string_view memory_;
  bool from_memory_ = false;
  std::vector<char> plain_buf_;   // uncompressed file or memory: the chunk the parser reads
  std::vector<char> carry_;       // text after the last safe cut: the start of the next chunk
  bool source_done_ = false;

  // gzip: the inflating thread fills slots, the parser returns them.
  std::unique_ptr<RawInflater> decoder_;
  bool in_member_ = false;      // between a member's header and its trailer
  bool members_done_ = false;   // no more members: the rest of the file is not read
  bool input_eof_ = false;      // the file gave all it has
  GzipFrom gzip_from_;   // a second thread's gzip stream when gzip_from_.boundary is set
  uint64_t compressed_read_ = 0;
  std::vector<char> in_buf_;
  const unsigned char* in_next_ = nullptr;   // the compressed bytes read and not yet taken
  size_t in_avail_ = 0;
  unsigned char pending_[8] = {};   // bytes the decoder read past a member's data (its leftover)
  size_t pending_at_ = 0, pending_end_ = 0;
  uint32_t member_crc_ = 0;                // CRC-32 of the current member's text so far
  uint64_t member_bytes_ = 0;
  std::vector<std::vector<char>> slots_;
  std::thread inflater_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> filled_;
  std::deque<size_t> free_;
  bool stop_ = false;
  std::string inflate_error_;   // set by the inflating thread before it posts the end chunk
  bool holding_slot_ = false;
  size_t held_slot_ = 0;

  uint64_t consumed_ = 0;   // bytes handed to the parser before the current chunk
  uint64_t max_bytes_ = 0;
  uint64_t max_token_bytes_ = kDefaultMaxTokenBytes;
  std::function<bool()> interrupted_;
  std::function<void(uint64_t)> progress_;
  uint64_t source_start_ = 0;   // GzipFrom: the compressed bytes inflated before its start
  char* chunk_begin_ = nullptr;
  char* cur_ = nullptr;
  char* end_ = nullptr;
  char* dst_ = nullptr;
  char* text_begin_ = nullptr;   // where the current (or, at the end, the last) chunk begins
  char sentinel_[1] = {'\0'};
  std::string error_;
  int64_t error_offset_ = -1;
};

}  // namespace gpuprof::io
