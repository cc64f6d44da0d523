// The gzip members' CRC-32 (cpp/src/io/crc32.cpp) gives the CRC-32 of gzip (RFC 1952) for every
// length, alignment, content and way of cutting the text into calls: the folding path on CPUs
// that have it (the first test records which), zlib's crc32_z elsewhere. The reference here is
// the definition itself, one bit at a time.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../cpp/src/io/crc32.h"

using gpuprof::io::gzip_crc32;

namespace {

// RFC 1952's CRC-32, bit by bit (the reflected polynomial 0xEDB88320), continuing from `crc`.
uint32_t reference_crc(uint32_t crc, const unsigned char* p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

}  // namespace

TEST(GzipCrc32, TheCheckValueOfTheStandard) {
  // CRC-32 (ISO-HDLC, gzip's) of "123456789" is 0xCBF43926; a 64-byte text reaches the folding.
  const std::string nine = "123456789";
  EXPECT_EQ(gzip_crc32(0, reinterpret_cast<const unsigned char*>(nine.data()), nine.size()), 0xCBF43926u);
  std::string s;
  while (s.size() < 640) s += nine;
  EXPECT_EQ(gzip_crc32(0, reinterpret_cast<const unsigned char*>(s.data()), s.size()),
            reference_crc(0, reinterpret_cast<const unsigned char*>(s.data()), s.size()));
  RecordProperty("folding", gpuprof::io::gzip_crc32_folds() ? "yes" : "no");
}

TEST(GzipCrc32, EveryLengthAndAlignmentAsTheDefinition) {
  const std::vector<unsigned char> data = random_bytes(1000, 7);
  for (size_t offset = 0; offset < 16; ++offset)
    for (size_t n = 0; offset + n <= 700; ++n)
      ASSERT_EQ(gzip_crc32(0, data.data() + offset, n), reference_crc(0, data.data() + offset, n))
          << "offset " << offset << " length " << n;
}

TEST(GzipCrc32, RunningCrcAcrossCallsAsTheDefinition) {
  // The inflating thread calls it once per inflate() with the CRC so far: cut a text at random
  // places, and start from values that are not 0.
  const std::vector<unsigned char> data = random_bytes(1 << 20, 11);
  std::mt19937 rng(5);
  for (int round = 0; round < 12; ++round) {
    uint32_t ours = 0, theirs = 0;
    size_t at = 0;
    while (at < data.size()) {
      const size_t n = std::min<size_t>(data.size() - at, rng() % (round < 10 ? 200 : 100000));
      ours = gzip_crc32(ours, data.data() + at, n);
      theirs = reference_crc(theirs, data.data() + at, n);
      ASSERT_EQ(ours, theirs) << "round " << round << " at " << at;
      at += n;
    }
  }
  for (const uint32_t start : {0x1u, 0xFFFFFFFFu, 0x80000000u, 0xDEADBEEFu})
    EXPECT_EQ(gzip_crc32(start, data.data(), 4097), reference_crc(start, data.data(), 4097)) << start;
}

TEST(GzipCrc32, UniformAndJsonLikeTextsAsTheDefinition) {
  for (const unsigned char fill : {0x00, 0xFF, 0x20, 0x80}) {
    const std::vector<unsigned char> v(100000 + fill, fill);
    EXPECT_EQ(gzip_crc32(0, v.data(), v.size()), reference_crc(0, v.data(), v.size())) << int(fill);
  }
  std::string json;
  while (json.size() < (1 << 20))
    json += "  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1669783687464181, \"dur\": 45\n  },\n";
  const auto* p = reinterpret_cast<const unsigned char*>(json.data());
  EXPECT_EQ(gzip_crc32(0, p, json.size()), reference_crc(0, p, json.size()));
}
