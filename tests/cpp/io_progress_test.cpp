// The importer's progress (ImportOptions::progress): what a display polling it from another thread
// sees at the end of an import. Every traceEvents entry is counted exactly once, whether one
// thread or two read the text, and a second thread's count is dropped when its half is not taken;
// the bytes are the file's (its compressed bytes for gzip) when one thread reads it. Two threads
// each tell the bytes of their own stream, whose chunks may overlap around the split by up to one
// chunk (1 MiB of text): the display clamps to the file's size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

// n host ops, one per line, about 190 bytes each: 40,000 of them make 7.6 MB, eight chunks.
std::string ops_json(int n) {
  std::string s = "{\"schemaVersion\": 1,\n\"traceEvents\": [\n";
  for (int i = 0; i < n; ++i) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  R"(%s{"ph": "X", "cat": "cpu_op", "name": "aten::op_%d", "pid": 7, "tid": 7, )"
                  R"("ts": %d.%03d, "dur": 2.500, "args": {"External id": %d, "Sequence number": %d}})",
                  i ? ",\n" : "", i % 61, 1000000 + i * 3, i % 1000, i + 1, i);
    s += buf;
  }
  s += "\n],\n\"displayTimeUnit\": \"ms\"}\n";
  return s;
}

// The same, each op's name a run of "}, {" (text that looks like the place between two events):
// a second thread's start guessed near the middle lies inside a name.
std::string ops_json_with_lookalikes(int n) {
  const std::string plain = ops_json(n), name = "aten::op_";
  std::string look, s;
  for (int i = 0; i < 40; ++i) look += "}, {";
  size_t from = 0;
  for (size_t at = plain.find(name); at != std::string::npos; from = at, at = plain.find(name, at + 1)) {
    s.append(plain, from, at - from);
    s += look;
  }
  s.append(plain, from, std::string::npos);
  return s;
}

std::string temp_path(const std::string& name) {
  // (named per process: ctest may run this binary several times at once)
  return testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), std::streamsize(text.size()));
  return path;
}

uint64_t file_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return uint64_t(in.tellg());
}

ImportOptions reading(int threads, ImportProgress* progress) {
  ImportOptions o;
  o.split_min_bytes = threads == 1 ? 0 : 1;
  o.gzip_split_cpus = 1;
  o.progress = progress;
  return o;
}

constexpr int kEvents = 40000;
constexpr uint64_t kChunk = uint64_t(1) << 20;

}  // namespace

TEST(ImportProgress, OneThreadCountsTheFileAndEveryEntryOnce) {
  const std::string text = ops_json(kEvents);
  ASSERT_GT(text.size(), 6 * kChunk);   // several chunks, so progress is told along the way
  const std::string path = write_file("progress.json", text);
  ImportProgress progress;
  ImportStats stats;
  const Trace t = import_kineto_trace(path, reading(1, &progress), &stats);
  EXPECT_EQ(stats.records, uint64_t(kEvents));
  EXPECT_EQ(progress.total_events(), uint64_t(kEvents));
  EXPECT_EQ(progress.total_bytes(), text.size());
  std::remove(path.c_str());
}

TEST(ImportProgress, TwoThreadsCountEveryEntryOnce) {
  const std::string text = ops_json(kEvents);
  const std::string path = write_file("progress2.json", text);
  ImportProgress progress;
  ImportStats stats;
  import_kineto_trace(path, reading(2, &progress), &stats);
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) EXPECT_TRUE(stats.split);
  EXPECT_EQ(progress.total_events(), uint64_t(kEvents));
  EXPECT_GE(progress.total_bytes(), text.size());
  EXPECT_LE(progress.total_bytes(), text.size() + kChunk);   // the first thread's last chunk passes the split
  std::remove(path.c_str());
}

TEST(ImportProgress, ASecondHalfNotTakenIsNotCounted) {
  // The second thread starts inside a name and reads on (to an error, or to the end); the first
  // finds it did not start between two events and reads the rest itself: counted once, by it.
  const std::string text = ops_json_with_lookalikes(kEvents);
  const std::string path = write_file("progress3.json", text);
  ImportProgress progress;
  ImportStats stats;
  import_kineto_trace(path, reading(2, &progress), &stats);
  EXPECT_FALSE(stats.split);   // read by the first thread alone
  EXPECT_EQ(stats.records, uint64_t(kEvents));
  EXPECT_EQ(progress.total_events(), uint64_t(kEvents));
  EXPECT_EQ(progress.total_bytes(), text.size());
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {   // the second thread did count, and its count went
    EXPECT_TRUE(progress.second_dropped.load());
    EXPECT_GT(progress.second_events.load(), 0u);
  }
  std::remove(path.c_str());
}

TEST(ImportProgress, TextInMemoryCountsItsBytes) {
  const std::string text = ops_json(kEvents);
  ImportProgress progress;
  import_kineto_json(text, "memory", reading(1, &progress));
  EXPECT_EQ(progress.total_events(), uint64_t(kEvents));
  EXPECT_EQ(progress.total_bytes(), text.size());
}

TEST(ImportProgress, AGzipFileCountsItsCompressedBytes) {
  const std::string text = ops_json(kEvents);
  const std::string plain = write_file("progress_gz.json", text);
  if (std::system(("gzip -n -f '" + plain + "' 2>/dev/null").c_str()) != 0) GTEST_SKIP() << "no gzip program";
  const std::string gz = plain + ".gz";
  const uint64_t size = file_size(gz);
  ASSERT_LT(size, text.size() / 4);   // compressed bytes, not the text's, are what a display compares
  ImportProgress one;
  import_kineto_trace(gz, reading(1, &one));
  EXPECT_EQ(one.total_events(), uint64_t(kEvents));
  EXPECT_EQ(one.total_bytes(), size);
  // Two threads: the second inflates the first half again, which is not counted; each thread's
  // read-ahead near the split may be (a chunk of text compresses to well under size / 4).
  ImportProgress two;
  ImportStats stats;
  import_kineto_trace(gz, reading(2, &two), &stats);
  EXPECT_EQ(two.total_events(), uint64_t(kEvents));
  EXPECT_GE(two.total_bytes(), size * 3 / 4);
  EXPECT_LE(two.total_bytes(), size + size / 2);
  std::remove(gz.c_str());
}

TEST(ImportProgress, AFailedImportLeavesWhatItRead) {
  std::string text = ops_json(kEvents);
  text.resize(text.size() / 2);   // cut off in the middle of traceEvents
  ImportProgress progress;
  EXPECT_THROW(import_kineto_json(text, "cut", reading(1, &progress)), TraceImportError);
  EXPECT_EQ(progress.total_bytes(), text.size());
  // The entries begun before the cut: the last, cut short, may or may not have been counted.
  uint64_t begun = 0;
  for (size_t at = text.find("{\"ph\""); at != std::string::npos; at = text.find("{\"ph\"", at + 1)) ++begun;
  EXPECT_GE(progress.total_events(), begun - 1);
  EXPECT_LE(progress.total_events(), begun);
}
