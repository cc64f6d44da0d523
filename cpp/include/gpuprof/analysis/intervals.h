// Half-open time intervals [start, end) in nanoseconds, and the set operations the sweeps need.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace gpuprof {

struct Interval {
  int64_t start;
  int64_t end;
};
using IntervalList = std::vector<Interval>;   // sorted, disjoint once normalised

// Sorts and merges overlapping or touching intervals in place; drops empty ones. O(n log n).
void merge_intervals(IntervalList& v);
// Total length of a normalised list.
int64_t total_length(const IntervalList& v);
// Length of (normalised list) ∩ [lo, hi), using binary search to find the first candidate.
int64_t length_within(const IntervalList& v, int64_t lo, int64_t hi);
// The part of a normalised list inside [lo, hi).
IntervalList clip(const IntervalList& v, int64_t lo, int64_t hi);
// a ∪ b and a ∖ b for normalised lists; linear.
IntervalList unite(const IntervalList& a, const IntervalList& b);
IntervalList subtract(const IntervalList& a, const IntervalList& b);

}  // namespace gpuprof
