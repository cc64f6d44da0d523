// Sorting the lists the analysis builds from a trace, which mostly arrive as a few ascending runs:
// a thread's events in the order the profiler wrote them, several streams' kernels one stream after
// the other. On such a saw-tooth std::sort's median-of-three pivot is poor (the middle element is
// often a run's first, among the smallest), and after 2 log n poor levels it falls back to heapsort:
// on HTA's DDP sample a third of the tables' sorting time was that fallback's heap.
//
// sort_runs() finds the runs in one pass and merges them pairwise, O(n log r) for r runs, where
// there are few (at most one per kMinRunLength elements on average); a list already in order costs
// the one pass, and anything else goes to std::sort. The merges are stable: elements that `less`
// does not order keep their order in the list, where std::sort leaves theirs unspecified, so a
// caller whose report could depend on that order must give a total order (most break ties by
// index).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <utility>
#include <vector>

namespace gpuprof {

template <class It, class Less>
void sort_runs(It first, It last, Less less) {
  constexpr size_t kMinRunLength = 16;
  const size_t n = static_cast<size_t>(last - first);
  if (n < 2) return;
  std::vector<size_t> cuts{0};   // where each ascending run starts, then n
  for (size_t i = 1; i < n; ++i) {
    if (!less(first[i], first[i - 1])) continue;
    cuts.push_back(i);
    if (cuts.size() > n / kMinRunLength + 1) {   // short runs: nothing for merging to gain
      std::sort(first, last, less);
      return;
    }
  }
  if (cuts.size() == 1) return;
  cuts.push_back(n);

  // Pairwise merges, back and forth between the range and one buffer.
  using T = typename std::iterator_traits<It>::value_type;
  std::vector<T> buffer(n);
  bool in_buffer = false;   // where the current runs lie
  while (cuts.size() > 2) {
    std::vector<size_t> merged{0};
    for (size_t k = 0; k + 1 < cuts.size(); k += 2) {
      const size_t end = k + 2 < cuts.size() ? cuts[k + 2] : cuts[k + 1];   // an odd last run: copied
      const auto merge_into = [&](auto from, auto to) {
        const auto a = from + static_cast<std::ptrdiff_t>(cuts[k]);
        const auto b = from + static_cast<std::ptrdiff_t>(cuts[k + 1]);
        const auto c = from + static_cast<std::ptrdiff_t>(end);
        std::merge(std::make_move_iterator(a), std::make_move_iterator(b), std::make_move_iterator(b),
                   std::make_move_iterator(c), to + static_cast<std::ptrdiff_t>(cuts[k]), less);
      };
      if (in_buffer) merge_into(buffer.begin(), first);
      else merge_into(first, buffer.begin());
      merged.push_back(end);
    }
    cuts = std::move(merged);
    in_buffer = !in_buffer;
  }
  if (in_buffer) std::move(buffer.begin(), buffer.end(), first);
}

template <class T, class Less>
void sort_runs(std::vector<T>& v, Less less) {
  sort_runs(v.begin(), v.end(), less);
}

template <class T>
void sort_runs(std::vector<T>& v) {
  sort_runs(v.begin(), v.end(), std::less<T>());
}

}  // namespace gpuprof
