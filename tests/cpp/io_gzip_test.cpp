// The gzip reader (cpp/src/io/text_stream.cpp over cpp/src/io/raw_inflate.h) with each deflate
// decoder built in: ISA-L's igzip where the build has it, and zlib always. Every test runs with
// both (GPUPROF_INFLATER picks one), so a damaged file gives the same one-line error with either:
// members back to back, an empty member, headers with every optional field, a member ending at
// every offset around the 64 KiB read, truncated files, a wrong CRC-32 or length in a trailer,
// bytes after the last member, deflate data that is not deflate.
// The members are built here byte by byte (stored blocks, RFC 1951 section 3.2.4), or by the
// gzip program for compressed ones (skipped where there is none).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../../cpp/src/io/crc32.h"
#include "../../cpp/src/io/raw_inflate.h"
#include "../../cpp/src/io/text_stream.h"

using gpuprof::io::RawInflater;
using gpuprof::io::TextStream;

namespace {

constexpr size_t kReadBytes = 1 << 16;   // the reader's compressed read (text_stream.cpp)

// Text the reader can cut (a newline at least every 80 bytes), `lines` lines of it.
std::string json_lines(size_t lines, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s;
  for (size_t i = 0; i < lines; ++i)
    s += "{\"ph\": \"X\", \"name\": \"op" + std::to_string(rng() % 97) + "\", \"ts\": " + std::to_string(rng()) +
         "},\n";
  return s;
}

void put_le32(std::string& s, uint32_t v) {
  for (int k = 0; k < 4; ++k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
}

uint32_t crc_of(const std::string& text) {
  return gpuprof::io::gzip_crc32(0, reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

// The 8-byte trailer of a member holding `text`.
std::string trailer(const std::string& text) {
  std::string t;
  put_le32(t, crc_of(text));
  put_le32(t, static_cast<uint32_t>(text.size()));
  return t;
}

// A gzip header: flags 0, or with every optional field (extra, name, comment, header CRC).
std::string header(bool all_fields = false) {
  std::string h = {'\x1f', '\x8b', '\x08', static_cast<char>(all_fields ? 0x1E : 0), 0, 0, 0, 0, 0, '\x03'};
  if (all_fields) {
    h += std::string("\x05\x00", 2) + "extra";
    h += std::string("trace.json") + '\0';
    h += std::string("a comment") + '\0';
    h += std::string("\x12\x34", 2);   // not checked (zlib does not either, by default)
  }
  return h;
}

// A whole member of stored deflate blocks (at most 65535 bytes each; none for empty text but one
// empty final block).
std::string stored_member(const std::string& text, bool all_fields = false) {
  std::string m = header(all_fields);
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(65535, text.size() - at);
    const bool last = at + n == text.size();
    m.push_back(last ? '\x01' : '\x00');
    m.push_back(static_cast<char>(n & 0xFF));
    m.push_back(static_cast<char>(n >> 8));
    m.push_back(static_cast<char>(~n & 0xFF));
    m.push_back(static_cast<char>((~n >> 8) & 0xFF));
    m.append(text, at, n);
    at += n;
  } while (at < text.size());
  return m + trailer(text);
}

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `text` compressed by the gzip program (no name in the header: -n and stdin); "" if none.
std::string gzip_program(const std::string& text, int level = 6) {
  const std::string plain = temp_path("plain.txt"), gz = temp_path("plain.txt.gz");
  write_bytes(plain, text);
  const std::string cmd = "gzip -n -c -" + std::to_string(level) + " < '" + plain + "' > '" + gz + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return read_bytes(gz);
}

struct Read {
  std::string text;
  std::string error;
};

// Everything a TextStream gives for a file holding `bytes`.
Read read_file_bytes(const std::string& bytes) {
  const std::string path = temp_path("input.json.gz");
  write_bytes(path, bytes);
  TextStream in(path, 0);
  Read r;
  while (!in.at_end()) r.text.push_back(in.Take());
  r.error = in.error();
  return r;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

class GzipRead : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "isa-l" && !RawInflater::isal_built_in()) GTEST_SKIP() << "this build has no ISA-L";
    setenv("GPUPROF_INFLATER", GetParam().c_str(), 1);
    ASSERT_EQ(std::string(RawInflater::chosen()), GetParam());
  }
  void TearDown() override { unsetenv("GPUPROF_INFLATER"); }
};

TEST_P(GzipRead, MembersBackToBackIncludingAnEmptyOneAndEveryHeaderField) {
  const std::string a = json_lines(3000, 1), b = json_lines(10, 2);
  const Read r =
      read_file_bytes(stored_member(a) + stored_member("") + stored_member(b, true) + stored_member(""));
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.text, a + b);
}

TEST_P(GzipRead, CompressedMembersFromTheGzipProgram) {
  const std::string a = json_lines(40000, 3), b = json_lines(5, 4);
  const std::string ga = gzip_program(a, 6), gb = gzip_program(b, 1);
  if (ga.empty() || gb.empty()) GTEST_SKIP() << "no gzip program to write the test file";
  const Read r = read_file_bytes(ga + gb + ga);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.text, a + b + a);
}

TEST_P(GzipRead, AMemberEndingAtEveryOffsetAroundTheRead) {
  // The first member's end, and so its trailer and the next member's magic bytes, fall at each
  // offset from 12 before to 12 after the end of the first 64 KiB read.
  const std::string second = json_lines(20, 5);
  for (size_t size = kReadBytes - 12; size <= kReadBytes + 12; ++size) {
    std::string first = json_lines(2000, 6);
    first.resize(size - stored_member("").size());   // a stored member is 23 bytes of framing
    first.back() = '\n';
    const std::string m = stored_member(first);
    ASSERT_EQ(m.size(), size);
    const Read r = read_file_bytes(m + stored_member(second));
    EXPECT_EQ(r.error, "") << size;
    EXPECT_EQ(r.text, first + second) << size;
  }
}

TEST_P(GzipRead, ATruncatedFileEndsEarlyWhereverItIsCut) {
  const std::string text = json_lines(200, 7);
  const std::string gz = gzip_program(text);
  const std::string m = gz.empty() ? stored_member(text) : gz;
  // In the header, in the deflate data, in the trailer (each of its 8 bytes missing).
  for (const size_t keep :
       {size_t(2), size_t(5), size_t(9), m.size() / 2, m.size() - 8, m.size() - 5, m.size() - 1}) {
    const Read r = read_file_bytes(m.substr(0, keep));
    EXPECT_TRUE(contains(
        r.error, "the gzip data ends early (truncated file: " + std::to_string(keep) + " compressed bytes read)"))
        << keep << ": " << r.error;
  }
  // A second member cut in its header.
  const Read r = read_file_bytes(m + stored_member(text).substr(0, 6));
  EXPECT_TRUE(contains(r.error, "the gzip data ends early")) << r.error;
}

TEST_P(GzipRead, AWrongCrcOrLengthInATrailerIsAnError) {
  const std::string text = json_lines(500, 8);
  const std::string gz = gzip_program(text);
  for (const std::string& m : {stored_member(text), gz}) {
    if (m.empty()) continue;
    std::string bad_crc = m, bad_len = m;
    bad_crc[m.size() - 8] ^= 0x01;
    bad_len[m.size() - 1] ^= 0x40;
    EXPECT_TRUE(contains(read_file_bytes(bad_crc).error, "incorrect data check"));
    EXPECT_TRUE(contains(read_file_bytes(bad_len).error, "incorrect length check"));
    // In the first of two members: the error is the first member's, the text stops there.
    const Read r = read_file_bytes(bad_crc + stored_member(text));
    EXPECT_TRUE(contains(r.error, "corrupt gzip data near compressed byte")) << r.error;
    EXPECT_TRUE(contains(r.error, "incorrect data check")) << r.error;
    EXPECT_LE(r.text.size(), text.size());
  }
}

TEST_P(GzipRead, BytesAfterTheLastMemberAreIgnored) {
  const std::string text = json_lines(100, 9);
  for (const std::string& after : {std::string(1024, '\0'), std::string("trailing words"), std::string("\x1f", 1),
                                   std::string("\x1f\x8c", 2)}) {
    const Read r = read_file_bytes(stored_member(text) + after);
    EXPECT_EQ(r.error, "") << after.size();
    EXPECT_EQ(r.text, text);
  }
}

TEST_P(GzipRead, DataThatIsNotDeflateOrAHeaderThatIsNotGzipIsCorrupt) {
  const std::string text = json_lines(100, 10);
  std::string reserved_block = header() + std::string("\x07\x00\x00\x00", 4) + trailer("");   // block type 3
  const Read r = read_file_bytes(reserved_block);
  EXPECT_TRUE(contains(r.error, "corrupt gzip data near compressed byte")) << r.error;
  std::string bad_len = stored_member(text);
  bad_len[13] ^= 0x01;   // a stored block's length that is not the complement of the next two bytes
  EXPECT_TRUE(contains(read_file_bytes(bad_len).error, "corrupt gzip data")) << read_file_bytes(bad_len).error;
  std::string method = stored_member(text);
  method[2] = 7;
  EXPECT_TRUE(contains(read_file_bytes(method).error, "unknown compression method"));
  std::string flags = stored_member(text);
  flags[3] = static_cast<char>(0x80);
  EXPECT_TRUE(contains(read_file_bytes(flags).error, "unknown header flags set"));
  // Random bytes after a gzip header: an error or a data check that fails, never text.
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    std::string noise = header();
    for (int k = 0; k < 300; ++k) noise.push_back(static_cast<char>(rng()));
    const Read n = read_file_bytes(noise);
    EXPECT_NE(n.error, "") << i;
  }
}

TEST_P(GzipRead, AFileNamedGzThatIsNotGzipIsReadAsText) {
  const std::string text = json_lines(50, 12);
  const Read r = read_file_bytes(text);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.text, text);
}

INSTANTIATE_TEST_SUITE_P(Decoders, GzipRead, testing::Values("isa-l", "zlib"),
                         [](const testing::TestParamInfo<std::string>& p) {
                           return p.param == "isa-l" ? "isal" : "zlib";
                         });

// The decoders themselves: raw deflate fed in pieces of every size down to one byte, into output
// room of every size, followed by other bytes. Each gives the text, and at the end says exactly
// which bytes were past the data (consumed minus leftover is the deflate data's length).
TEST(RawInflater, EveryDecoderStopsExactlyAtTheEndOfTheDeflateData) {
  const std::string text = json_lines(3000, 13);
  const std::string gz = gzip_program(text, 9);
  if (gz.empty()) GTEST_SKIP() << "no gzip program to write the test file";
  const std::string deflate = gz.substr(10, gz.size() - 18);   // gzip -n from stdin: a 10-byte header
  const std::string after = "ABCDEFGHIJKLMNOP";
  const std::string input = deflate + after;
  std::mt19937 rng(14);
  for (const char* name : {"isa-l", "zlib"}) {
    std::string why;
    const std::unique_ptr<RawInflater> d = RawInflater::create(name, &why);
    if (!d) {
      EXPECT_EQ(std::string(name), "isa-l") << why;   // zlib is always built in
      continue;
    }
    for (int round = 0; round < 40; ++round) {
      d->reset();
      const size_t in_step = round % 4 == 0 ? 1 + rng() % 7 : 1 + rng() % 40000;
      const size_t out_step = round % 5 == 0 ? 1 + rng() % 9 : 1 + rng() % 100000;
      std::string out(text.size() + 64, '\0');
      size_t in_at = 0, in_end = 0, out_at = 0, leftover = 0;
      bool ended = false;
      for (int guard = 0; guard < 10000000 && !ended; ++guard) {
        if (in_at == in_end) in_end = std::min(input.size(), in_end + in_step);
        const auto s =
            d->run(reinterpret_cast<const unsigned char*>(input.data()) + in_at, in_end - in_at,
                   reinterpret_cast<unsigned char*>(&out[out_at]), std::min(out_step, out.size() - out_at));
        ASSERT_NE(s.status, RawInflater::Status::kError) << name << ": " << s.message;
        in_at += s.consumed;
        out_at += s.produced;
        if (s.status == RawInflater::Status::kEnd) {
          ended = true;
          leftover = s.leftover_bytes;
          EXPECT_EQ(std::string(reinterpret_cast<const char*>(s.leftover), leftover),
                    input.substr(in_at - leftover, leftover))
              << name;
        }
      }
      ASSERT_TRUE(ended) << name << " round " << round;
      EXPECT_EQ(in_at - leftover, deflate.size()) << name << " in " << in_step << " out " << out_step;
      EXPECT_EQ(out.substr(0, out_at), text) << name;
    }
  }
}

}  // namespace
