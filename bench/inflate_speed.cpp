// The importer's gzip decoding alone (cpp/src/io/raw_inflate.h with each member's CRC-32, as the
// inflating thread does it), one decoder, over one .gz file held in memory: 64 KiB of input at a
// time into a 1 MiB buffer, every member's trailer checked. bench/inflate_speed.py builds and runs
// this (wall time, best of N; N = 1 under callgrind).
//   inflate_speed FILE DECODER REPEATS     DECODER: isa-l or zlib
// Prints one JSON object: {"decoder": ..., "best_s": ..., "out_bytes": ...}.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "crc32.h"
#include "raw_inflate.h"

using gpuprof::io::RawInflater;

namespace {

// Bytes of the gzip header at data[at]; 0 when there is none there.
size_t header_bytes(const std::string& d, size_t at) {
  if (d.size() < at + 10 || static_cast<unsigned char>(d[at]) != 0x1f || static_cast<unsigned char>(d[at + 1]) != 0x8b)
    return 0;
  const int flags = static_cast<unsigned char>(d[at + 3]);
  size_t p = at + 10;
  if (flags & 4) p += 2 + (static_cast<unsigned char>(d[p]) | static_cast<unsigned char>(d[p + 1]) << 8);
  if (flags & 8) p = d.find('\0', p) + 1;
  if (flags & 16) p = d.find('\0', p) + 1;
  if (flags & 2) p += 2;
  return p - at;
}

uint32_t le32(const std::string& d, size_t p) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<unsigned char>(d[p + k]);
  return v;
}

// Inflates every member; returns the text's length (0 on any error, said on stderr).
__attribute__((noinline)) uint64_t inflate_all(const std::string& gz, RawInflater& d, std::vector<unsigned char>& out) {
  const auto* in = reinterpret_cast<const unsigned char*>(gz.data());
  uint64_t total = 0;
  size_t at = 0;
  while (size_t h = header_bytes(gz, at)) {
    at += h;
    d.reset();
    uint32_t crc = 0;
    uint64_t bytes = 0;
    for (;;) {
      const size_t in_len = std::min<size_t>(gz.size() - at, 1 << 16);
      const RawInflater::Step s = d.run(in + at, in_len, out.data(), out.size());
      at += s.consumed;
      crc = gpuprof::io::gzip_crc32(crc, out.data(), s.produced);
      bytes += s.produced;
      if (s.status == RawInflater::Status::kError || (s.status == RawInflater::Status::kMore && s.consumed == 0 &&
                                                       s.produced == 0)) {
        std::fprintf(stderr, "inflate_speed: %s\n", s.message.empty() ? "the data ends early" : s.message.c_str());
        return 0;
      }
      if (s.status == RawInflater::Status::kEnd) {
        at -= s.leftover_bytes;
        break;
      }
    }
    if (gz.size() < at + 8 || le32(gz, at) != crc || le32(gz, at + 4) != static_cast<uint32_t>(bytes)) {
      std::fprintf(stderr, "inflate_speed: a member's trailer does not match its text\n");
      return 0;
    }
    at += 8;
    total += bytes;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: inflate_speed FILE isa-l|zlib REPEATS\n");
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string why;
  const auto d = RawInflater::create(argv[2], &why);
  if (!d) {
    std::fprintf(stderr, "inflate_speed: %s\n", why.c_str());
    return 1;
  }
  std::vector<unsigned char> out(1 << 20);
  double best = 1e9;
  uint64_t bytes = 0;
  for (int i = 0; i < std::stoi(argv[3]); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    bytes = inflate_all(gz, *d, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bytes == 0) return 1;
    best = std::min(best, s);
  }
  std::printf("{\"decoder\": \"%s\", \"best_s\": %.6f, \"out_bytes\": %llu}\n", argv[2], best,
              static_cast<unsigned long long>(bytes));
  return 0;
}
