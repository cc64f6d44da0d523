#include "gpuprof/analysis/intervals.h"

#include <algorithm>

#include "run_sort.h"

namespace gpuprof {

void merge_intervals(IntervalList& v) {
  // Often already in order (a thread's events, a stream's kernels): then a pass, not a sort. The
  // merged list does not depend on the order of equal starts.
  const auto by_start = [](const Interval& a, const Interval& b) { return a.start < b.start; };
  sort_runs(v, by_start);
  size_t out = 0;
  for (const Interval& iv : v) {
    if (iv.end <= iv.start) continue;
    if (out > 0 && iv.start <= v[out - 1].end) {
      v[out - 1].end = std::max(v[out - 1].end, iv.end);
    } else {
      v[out++] = iv;
    }
  }
  v.resize(out);
}

int64_t total_length(const IntervalList& v) {
  int64_t sum = 0;
  for (const Interval& iv : v) sum += iv.end - iv.start;
  return sum;
}

static IntervalList::const_iterator first_ending_after(const IntervalList& v, int64_t lo) {
  return std::upper_bound(v.begin(), v.end(), lo, [](int64_t t, const Interval& iv) { return t < iv.end; });
}

int64_t length_within(const IntervalList& v, int64_t lo, int64_t hi) {
  int64_t sum = 0;
  for (auto it = first_ending_after(v, lo); it != v.end() && it->start < hi; ++it)
    sum += std::min(it->end, hi) - std::max(it->start, lo);
  return sum;
}

IntervalList clip(const IntervalList& v, int64_t lo, int64_t hi) {
  IntervalList out;
  for (auto it = first_ending_after(v, lo); it != v.end() && it->start < hi; ++it)
    out.push_back({std::max(it->start, lo), std::min(it->end, hi)});
  return out;
}

IntervalList unite(const IntervalList& a, const IntervalList& b) {
  IntervalList out;
  out.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out),
             [](const Interval& x, const Interval& y) { return x.start < y.start; });
  size_t n = 0;
  for (const Interval& iv : out) {
    if (n > 0 && iv.start <= out[n - 1].end) out[n - 1].end = std::max(out[n - 1].end, iv.end);
    else out[n++] = iv;
  }
  out.resize(n);
  return out;
}

IntervalList subtract(const IntervalList& a, const IntervalList& b) {
  IntervalList out;
  size_t j = 0;
  for (Interval cur : a) {
    while (j < b.size() && b[j].end <= cur.start) ++j;
    size_t k = j;
    while (k < b.size() && b[k].start < cur.end) {
      if (b[k].start > cur.start) out.push_back({cur.start, b[k].start});
      cur.start = std::max(cur.start, b[k].end);
      if (cur.start >= cur.end) break;
      ++k;
    }
    if (cur.start < cur.end) out.push_back(cur);
  }
  return out;
}

}  // namespace gpuprof
