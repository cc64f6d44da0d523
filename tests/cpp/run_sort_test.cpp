// sort_runs (cpp/src/analysis/run_sort.h): the analysis' sort for lists that arrive as a few
// ascending runs. It must give std::stable_sort's order on every shape of input: in order, a few
// runs (the saw-tooth of several streams' kernels one after the other), many short runs (where it
// hands over to std::sort, so only a total order is compared there), reversed, with ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "../../cpp/src/analysis/run_sort.h"

using gpuprof::sort_runs;

namespace {

// (key, position in the input): ordered by key only, so ties show whether the order kept them.
using Item = std::pair<int64_t, int>;
bool by_key(const Item& a, const Item& b) { return a.first < b.first; }

std::vector<Item> numbered(const std::vector<int64_t>& keys) {
  std::vector<Item> v;
  for (size_t k = 0; k < keys.size(); ++k) v.push_back({keys[k], int(k)});
  return v;
}

// `runs` ascending runs of `length` keys each, interleaved in time as streams are: run r holds
// r, r + runs, r + 2 runs, ... (every key once).
std::vector<int64_t> saw_tooth(int runs, int length) {
  std::vector<int64_t> keys;
  for (int r = 0; r < runs; ++r)
    for (int k = 0; k < length; ++k) keys.push_back(int64_t(r) + int64_t(k) * runs);
  return keys;
}

void expect_stable_order(std::vector<int64_t> keys) {
  std::vector<Item> got = numbered(keys), want = got;
  std::stable_sort(want.begin(), want.end(), by_key);
  sort_runs(got, by_key);
  EXPECT_EQ(got, want);
}

}  // namespace

TEST(SortRuns, EmptyOneAndInOrderAreLeftAsTheyAre) {
  expect_stable_order({});
  expect_stable_order({5});
  expect_stable_order({1, 2, 2, 3, 9});
}

TEST(SortRuns, AFewRunsAreMergedStablyAnyCount) {
  // 2 to 9 runs of 100 (an odd last run is carried through a pass unmerged).
  for (int runs = 2; runs <= 9; ++runs) expect_stable_order(saw_tooth(runs, 100));
  // Runs of different lengths, and ties across runs: equal keys keep their order in the input.
  expect_stable_order({1, 4, 4, 7, 8, 9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 0,
                       4, 4, 5, 6, 7, 8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 2,  3,
                       4, 7, 7, 7, 7, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40});
}

TEST(SortRuns, ShortRunsAndReversedInputAreSortedToo) {
  // Random keys (runs of about two) and a reversed list (runs of one) go to std::sort: with
  // distinct keys the order is the one sorted order.
  std::mt19937_64 rng(7);
  std::vector<int64_t> keys(5000);
  for (size_t k = 0; k < keys.size(); ++k) keys[k] = int64_t(k);
  std::shuffle(keys.begin(), keys.end(), rng);
  expect_stable_order(keys);
  std::sort(keys.begin(), keys.end(), std::greater<int64_t>());
  expect_stable_order(keys);
  // Long runs with a few elements out of place: still merged (each out-of-place element cuts a run).
  std::vector<int64_t> nearly = saw_tooth(3, 2000);
  std::swap(nearly[100], nearly[900]);
  std::swap(nearly[2500], nearly[4000]);
  expect_stable_order(nearly);
}

TEST(SortRuns, PlainValuesWithTheDefaultOrder) {
  std::vector<int64_t> v = saw_tooth(4, 50), want = v;
  std::sort(want.begin(), want.end());
  sort_runs(v);
  EXPECT_EQ(v, want);
}
