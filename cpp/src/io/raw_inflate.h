// The deflate decoder under TextStream's gzip reader: one gzip member's compressed body (raw
// deflate, RFC 1951), streamed. TextStream reads the gzip framing itself (each member's header and
// its 8-byte trailer, checked against the CRC-32 and length of the text it produced), so both
// decoders behave alike on every damaged file; only the deflate decoding differs.
//
// Two decoders: ISA-L's igzip (2-3x zlib's speed; built in when CMake finds libisal, the option
// GPUPROF_WITH_ISAL) and zlib's inflate (always built: the fallback). The environment variable
// GPUPROF_INFLATER=zlib chooses zlib in a build that has both (to compare them, or to work around
// a fault in one); unset (or any other value), the fastest built in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gpuprof::io {

class RawInflater {
 public:
  enum class Status { kMore, kEnd, kError };
  struct Step {
    size_t consumed = 0;   // input bytes taken (some may be held inside the decoder: see leftover)
    size_t produced = 0;   // output bytes written
    Status status = Status::kMore;
    // kError: what was wrong (the decoder's words). kEnd: whole bytes the decoder had read past the
    // end of the deflate data (ISA-L reads up to 8 bytes ahead), which belong to what follows.
    std::string message;
    unsigned char leftover[8] = {};
    size_t leftover_bytes = 0;
  };

  virtual ~RawInflater() = default;
  // For the next member's body.
  virtual void reset() = 0;
  // Decodes from in[0, in_len) into out[0, out_len). kMore with nothing produced and nothing
  // consumed means the decoder needs more input than it was given.
  virtual Step run(const unsigned char* in, size_t in_len, unsigned char* out, size_t out_len) = 0;

  // The decoder this process uses: ISA-L when built in, unless GPUPROF_INFLATER=zlib. Null (and
  // *error set) when it cannot start (out of memory).
  static std::unique_ptr<RawInflater> create(std::string* error);
  // One by name ("isa-l" or "zlib"; null when that one is not built in), for the tests.
  static std::unique_ptr<RawInflater> create(const std::string& name, std::string* error);
  // "isa-l" or "zlib": what create(error) gives in this process.
  static const char* chosen();
  static bool isal_built_in();
};

}  // namespace gpuprof::io
