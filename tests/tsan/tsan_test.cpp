// Concurrency checks, built with -fsanitize=thread by .ci/tsan.sh (they also pass without it, but
// only ThreadSanitizer sees a race that happens not to corrupt anything on one run).
//
// 1. The collector: 8 producer threads record ranges, complete events and memory levels
//    continuously (including names new in every session, as ProfilerStep#N is, and threads that
//    exit and are replaced) while the session thread starts, drains and stops sessions and reads
//    stats(). Every drained event must name a string of its own drain's table.
// 2. The gzip reader: its inflating thread runs one chunk ahead of the parser; imports that finish,
//    that stop early on bad JSON while the inflater still has data, and that meet truncated gzip data,
//    from two threads at once, through the importer's public API.
//    A large plain file is read by two threads, each from one half (2b), and a gzip file (2c).
// 3. The analysis tables, computed on two threads (at the end of this file).
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/analysis/tables.h"
#include "gpuprof/collect/collector.h"
#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {
bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

TEST(Tsan, CollectorEightProducersWhileSessionsStartStopAndDrain) {
  constexpr int kProducers = 8;
  constexpr int kSessions = 150;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> session{0};
  auto producer = [&](int id, int rounds_before_exit) {
    const std::string base = "op-" + std::to_string(id) + "-";
    std::vector<std::string> names;
    for (int k = 0; k < 16; ++k) names.push_back(base + std::to_string(k));
    uint64_t k = 0;
    for (int round = 0; !done.load(std::memory_order_relaxed); ++round) {
      if (rounds_before_exit > 0 && round == rounds_before_exit) return;   // the thread exits
      int outer, inner;
      const int64_t t = collect::ticks();
      collect::host_enter(&outer, names[k % names.size()], EventKind::HostOp, t, "[[2, 3]]");
      collect::host_enter(&inner, names[(k + 1) % names.size()], EventKind::HostOp, t + 1);
      collect::host_exit(&inner, t + 2);
      collect::host_exit(&outer, t + 3);
      // The hooks' path: names looked up by address (a reused buffer, then a stable string).
      char reused[32];
      std::snprintf(reused, sizeof(reused), "%s", names[(k + 2) % names.size()].c_str());
      const int64_t dims[] = {2, 2, int64_t(k % 3)};   // record_shapes: "[[2, 0]]" .. "[[2, 2]]"
      collect::host_enter_now(&outer, reused, EventKind::HostOp, dims, 3);
      collect::host_enter_now(&inner, names[k % names.size()].c_str(), EventKind::HostOp);
      collect::host_exit_now(&inner);
      collect::host_exit_now(&outer);
      // A name new in every session, like ProfilerStep#N.
      collect::record(
          EventKind::UserRange,
          "op-new-" + std::to_string(session.load(std::memory_order_relaxed)) + "-" + std::to_string(id), t,
          t + 4);
      collect::record_memory(t, 64, 1024, 2048, 0);
      if (++k % 64 == 0) std::this_thread::yield();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kProducers; ++i) threads.emplace_back(producer, i, 0);

  uint64_t drained = 0;
  for (int s = 0; s < kSessions; ++s) {
    session.store(s, std::memory_order_relaxed);
    collect::start({200'000});
    if (s % 10 == 5) {
      // Threads that record a little and exit inside a session: their buffers are drained, then freed.
      std::thread short_lived(producer, 100 + s, 200);
      short_lived.join();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    (void)collect::stats();
    if (s % 3 == 0) {
      Trace prefix = collect::drain();   // while active: a consistent prefix
      for (const Event& e : prefix.events) ASSERT_LT(e.name, prefix.strings.size());
    }
    collect::stop();
    Trace t = collect::drain();
    for (const Event& e : t.events) {
      ASSERT_LT(e.name, t.strings.size());
      ASSERT_TRUE(starts_with(t.name_of(e), "op-")) << t.name_of(e);
    }
    drained += t.events.size();
  }
  done.store(true);
  for (auto& th : threads) th.join();
  EXPECT_GT(drained, 0u);
}

namespace {
std::string write_gzip(const std::string& name, const std::string& text, size_t keep_bytes = 0) {
  const std::string path = testing::TempDir() + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb1");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
  if (keep_bytes > 0) {   // cut the compressed file short
    FILE* in = std::fopen(path.c_str(), "rb");
    std::string gz(keep_bytes, '\0');
    gz.resize(std::fread(gz.data(), 1, keep_bytes, in));
    std::fclose(in);
    FILE* out = std::fopen(path.c_str(), "wb");
    std::fwrite(gz.data(), 1, gz.size(), out);
    std::fclose(out);
  }
  return path;
}

std::string trace_text(int events, bool broken_early) {
  std::string s = broken_early ? "{\"traceEvents\": [ {\"ph\": \"X\",, },\n" : "{\"traceEvents\": [\n";
  for (int i = 0; i < events; ++i) {
    s += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::add\", \"pid\": 1, \"tid\": 1, \"ts\": ";
    s += std::to_string(10 * i) + ", \"dur\": 5, \"args\": {\"External id\": " + std::to_string(i) + "}},\n";
  }
  s += "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#1\", \"pid\": 1, \"tid\": 1, "
       "\"ts\": 0, \"dur\": " +
       std::to_string(10 * events) + "}\n]}\n";
  return s;
}
}  // namespace

TEST(Tsan, GzipInflatingThread) {
  constexpr int kEvents = 60'000;   // about 8 MB of JSON: many chunks in flight
  const std::string good = write_gzip("good.json.gz", trace_text(kEvents, false));
  const std::string broken = write_gzip("broken.json.gz", trace_text(kEvents, true));
  const std::string cut = write_gzip("cut.json.gz", trace_text(kEvents, false), 200'000);
  auto reader = [&](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      Trace t = import_kineto_trace(good);
      EXPECT_EQ(t.events.size(), size_t(kEvents + 1));
      EXPECT_THROW(import_kineto_trace(broken), TraceImportError);   // stops while inflating
      EXPECT_THROW(import_kineto_trace(cut), TraceImportError);      // gzip data ends early
    }
  };
  std::thread other(reader, 2);
  reader(2);
  other.join();
}

// Imports `good` (expecting `events` events) and each of `bad` (expecting a TraceImportError), twice
// over, from two threads at once.
void import_from_two_threads(const std::string& good, size_t events, const std::vector<std::string>& bad,
                             const ImportOptions& opts) {
  auto reader = [&](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      ImportStats st;
      Trace t = import_kineto_trace(good, opts, &st);
      EXPECT_EQ(t.events.size(), events);
      for (const std::string& path : bad) EXPECT_THROW(import_kineto_trace(path, opts), TraceImportError) << path;
    }
  };
  std::thread other(reader, 2);
  reader(2);
  other.join();
}

// A trace whose text is broken ({"ph": "X",, ...) in its second half.
std::string broken_in_second_half(int events) {
  std::string text = trace_text(events, false);
  text.insert(text.find("\"ph\": \"X\",", text.size() * 3 / 4) + 10, ",");
  return text;
}

// 2b. A large plain file read by two threads (ImportOptions::split_min_bytes): the second reads
//     from the middle while the first reads up to it, then hands its events over; or is stopped
//     and joined when the first thread fails early, or refuses what the second read (broken late).
TEST(Tsan, PlainTextReadByTwoThreads) {
  constexpr int kEvents = 60'000;
  auto write_plain = [](const std::string& name, const std::string& text) {
    const std::string path = testing::TempDir() + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return path;
  };
  ImportOptions two;
  two.split_min_bytes = 1;
  // The first thread fails first (early); the second half is refused (late).
  import_from_two_threads(write_plain("good.json", trace_text(kEvents, false)), kEvents + 1,
                          {write_plain("early.json", trace_text(kEvents, true)),
                           write_plain("late.json", broken_in_second_half(kEvents))},
                          two);
}

// 2c. A large gzip file read by two threads: the second thread's stream inflates the file from its
//     start on its own inflating thread and tells the first where it starts, while the first waits
//     for that at the earliest place it can be; from two threads at once.
TEST(Tsan, GzipReadByTwoThreads) {
  constexpr int kEvents = 60'000;
  ImportOptions two;
  two.split_min_bytes = 1;
  two.gzip_split_cpus = 1;
  // As above, and a file whose gzip data ends early.
  import_from_two_threads(write_gzip("good2.json.gz", trace_text(kEvents, false)), kEvents + 1,
                          {write_gzip("early2.json.gz", trace_text(kEvents, true)),
                           write_gzip("late2.json.gz", broken_in_second_half(kEvents)),
                           write_gzip("cut2.json.gz", trace_text(kEvents, false), 300'000)},
                          two);
}

// 2d. Progress (ImportOptions::progress): a display's thread polls the counts while both parsing
//     threads publish theirs, for a plain and a gzip file read in halves, and for a file whose
//     second half is refused (its count dropped while the first thread reads on).
TEST(Tsan, ProgressPolledWhileTwoThreadsRead) {
  constexpr int kEvents = 60'000;
  const std::string text = trace_text(kEvents, false);
  const std::string plain = testing::TempDir() + "/progress.json";
  FILE* f = std::fopen(plain.c_str(), "wb");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  const std::string gz = write_gzip("progress.json.gz", text);
  const std::string late = write_gzip("progress_late.json.gz", broken_in_second_half(kEvents));
  ImportOptions two;
  two.split_min_bytes = 1;
  two.gzip_split_cpus = 1;
  for (const std::string& path : {plain, gz, late}) {
    ImportProgress progress;
    two.progress = &progress;
    std::atomic<bool> done{false};
    uint64_t polls = 0, last = 0;
    std::thread display([&] {
      while (!done.load()) {
        last = std::max(last, progress.total_events());
        progress.total_bytes();
        ++polls;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    if (path == late) {
      EXPECT_THROW(import_kineto_trace(path, two), TraceImportError);
    } else {
      import_kineto_trace(path, two);
      EXPECT_EQ(progress.total_events(), uint64_t(kEvents + 1)) << path;
    }
    done.store(true);
    display.join();
    EXPECT_GT(polls, 0u);
  }
}

// 3. The analysis: analyse_tables runs the breakdown and the launch links on two threads, then its
//    tables on both, each taken by whichever thread is free, all reading one Trace. Two analyses of
//    the same Trace also run at once (a report drawn while another is built), and agree.
TEST(Tsan, AnalysisTablesOnTwoThreadsReadOneTrace) {
  Trace t;
  uint64_t id = 1;
  for (int step = 0; step < 40; ++step) {
    const int64_t base = int64_t(step) * 100000;
    t.add(EventKind::StepMarker, "ProfilerStep#" + std::to_string(step), base, 99000).tid = 1;
    for (int op = 0; op < 120; ++op, ++id) {
      const int64_t s = base + 500 + op * 800;
      const uint32_t tid = 1 + op % 2;
      Event& o = t.add(EventKind::HostOp, op % 3 ? "aten::mm" : "aten::add_", s, 600);   // (add may move
      o.tid = tid;                                                                        // earlier events)
      o.external_id = id;
      Event& r = t.add(EventKind::Runtime, "cudaLaunchKernel", s + 50, 100);
      r.tid = tid;
      r.correlation = id;
      r.external_id = id;
      Event& k = t.add(EventKind::Kernel, op % 3 ? "volta_sgemm_128x64_nn" : "elementwise", s + 200, 500);
      k.correlation = id;
      k.device = 0;
      k.tid = 7;
    }
    Event& sync = t.add(EventKind::Runtime, "cudaDeviceSynchronize", base + 97000, 1500);
    sync.tid = 1;
  }
  const AnalysisTables first = analyse_tables(t, BreakdownOptions{});
  AnalysisTables a, b;
  std::thread other([&] { a = analyse_tables(t, BreakdownOptions{}); });
  b = analyse_tables(t, BreakdownOptions{});
  other.join();
  for (const AnalysisTables* x : {&a, &b}) {
    EXPECT_EQ(x->steps.steps.size(), first.steps.steps.size());
    EXPECT_EQ(x->links.op_of, first.links.op_of);
    ASSERT_EQ(x->operators.size(), first.operators.size());
    EXPECT_EQ(x->operators[0].host_total_ns, first.operators[0].host_total_ns);
    EXPECT_EQ(x->kernels.size(), first.kernels.size());
    EXPECT_EQ(x->syncs.size(), first.syncs.size());
  }
  EXPECT_EQ(first.steps.steps.size(), 40u);
  ASSERT_EQ(first.kernels.size(), 2u);
  EXPECT_EQ(first.kernels[0].calls + first.kernels[1].calls, 40 * 120);
}
