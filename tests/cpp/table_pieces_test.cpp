// analyse_tables' two threads (cpp/src/analysis/table_pieces.h): every piece runs once, after the
// first pieces it needs; an error reaches the caller only once no piece runs any more, the first
// pieces' before the tables'.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../cpp/src/analysis/table_pieces.h"

using gpuprof::run_pieces;
using gpuprof::TablePiece;

namespace {

// Counts the pieces running at any moment; `peak` is the most at once.
struct Running {
  std::atomic<int> now{0}, peak{0};
  void enter() {
    const int n = ++now;
    for (int p = peak.load(); n > p && !peak.compare_exchange_weak(p, n);) {
    }
  }
  void leave() { --now; }
};

}  // namespace

TEST(TablePieces, EveryPieceRunsOnceAfterTheFirstPiecesItNeeds) {
  std::atomic<bool> steps_done{false}, links_done{false};
  const std::function<void()> first[2] = {[&] { steps_done = true; }, [&] { links_done = true; }};
  // 40 pieces, each needing steps, links, both or neither, each recording what it saw.
  std::vector<std::atomic<int>> runs(40);
  std::vector<char> saw_ok(40, 0);   // each piece writes only its own entry, as the tables do
  std::vector<TablePiece> tables;
  for (int i = 0; i < 40; ++i) {
    const int needs = i % 4;   // 0, kSteps, kLinks, both
    tables.push_back({needs, [&, i, needs] {
                        ++runs[i];
                        const bool steps_ok = !(needs & TablePiece::kSteps) || steps_done.load();
                        const bool links_ok = !(needs & TablePiece::kLinks) || links_done.load();
                        saw_ok[i] = steps_ok && links_ok;
                      }});
  }
  run_pieces(first, tables);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(runs[i].load(), 1) << i;
    EXPECT_TRUE(saw_ok[i]) << i;
  }
}

TEST(TablePieces, ATablesErrorReachesTheCallerOnceNoPieceRuns) {
  Running running;
  const std::function<void()> first[2] = {[] {}, [] {}};
  std::vector<TablePiece> tables;
  for (int i = 0; i < 20; ++i)
    tables.push_back({TablePiece::kLinks, [&running, i] {
                        running.enter();
                        // Piece 3 fails; the others do a little work so that both threads are busy.
                        volatile long sum = 0;
                        for (long k = 0; k < 20000; ++k) sum += k;
                        running.leave();
                        if (i == 3) throw std::runtime_error("table 3 failed");
                      }});
  try {
    run_pieces(first, tables);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "table 3 failed");
  }
  EXPECT_EQ(running.now.load(), 0);   // both threads stopped before the error came out
}

TEST(TablePieces, AFirstPiecesErrorComesBeforeTheTables) {
  // The breakdown fails, and so does every table piece that runs (only those needing nothing can
  // start before it fails): the breakdown's error is the one the caller sees, as it comes first.
  const std::function<void()> first[2] = {[] { throw std::runtime_error("breakdown failed"); }, [] {}};
  std::vector<TablePiece> tables;
  for (int i = 0; i < 10; ++i)
    tables.push_back({i % 2 == 0 ? 0 : TablePiece::kSteps, [] { throw std::runtime_error("a table failed"); }});
  try {
    run_pieces(first, tables);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "breakdown failed");
  }
  // And the links' error, when the breakdown went well.
  const std::function<void()> links_fail[2] = {[] {}, [] { throw std::length_error("links failed"); }};
  EXPECT_THROW(run_pieces(links_fail, tables), std::length_error);
  // A piece needing the failed links never starts: nothing else failed here.
  int ran = 0;
  const std::vector<TablePiece> needs_links = {{TablePiece::kLinks, [&ran] { ++ran; }}};
  EXPECT_THROW(run_pieces(links_fail, needs_links), std::length_error);
  EXPECT_EQ(ran, 0);
}
