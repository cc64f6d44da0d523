#pragma once

// Rows keyed by an operator's name and the names of what it launched, in order: the launches are
// kept as (op, order key, event) records in one vector sorted once, and each distinct sequence of
// name ids is counted by a dense number, so that the joined text is built once per distinct row,
// not once per call of an operator.

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof {

// One launch of an operator: its op, what orders it among the op's launches, and the event.
struct OpLaunch {
  uint32_t op;
  int64_t at;
  uint32_t tie;     // orders launches at the same `at`
  uint32_t event;   // the launched event, whose name joins the sequence
  bool operator<(const OpLaunch& o) const {
    if (op != o.op) return op < o.op;
    if (at != o.at) return at < o.at;
    if (tie != o.tie) return tie < o.tie;
    return event < o.event;
  }
};

// Sorts the launches by (op, at, tie, event) unless they already are (one host thread's launches
// mostly come so): a counting sort by op (ops are event indices below `events`), then each op's few
// launches sorted where they are not in order already.
inline void sort_launches(std::vector<OpLaunch>& v, size_t events) {
  if (std::is_sorted(v.begin(), v.end())) return;
  std::vector<uint32_t> first(events + 1, 0);
  for (const OpLaunch& l : v) ++first[l.op + 1];
  for (size_t k = 1; k <= events; ++k) first[k] += first[k - 1];
  std::vector<OpLaunch> out(v.size());
  for (const OpLaunch& l : v) out[first[l.op]++] = l;
  for (size_t a = 0; a < out.size();) {
    size_t b = a + 1;
    while (b < out.size() && out[b].op == out[a].op) ++b;
    if (!std::is_sorted(out.begin() + std::ptrdiff_t(a), out.begin() + std::ptrdiff_t(b)))
      std::sort(out.begin() + std::ptrdiff_t(a), out.begin() + std::ptrdiff_t(b));
    a = b;
  }
  v.swap(out);
}

// Distinct (head name, sequence of names) keys, each numbered densely in order of first sight.
class NameSequences {
 public:
  // The number of (head, ids[0..n)), a new one when not seen before.
  uint32_t intern(uint32_t head, const std::vector<uint32_t>& ids) {
    uint64_t h = 1469598103934665603ull ^ head;
    for (uint32_t id : ids) h = (h ^ id) * 1099511628211ull;
    h = (h ^ ids.size()) * 1099511628211ull;
    auto [it, inserted] = first_.try_emplace(h, uint32_t(heads_.size()));
    if (!inserted) {
      for (uint32_t k = it->second; k != kNone; k = next_[k])
        if (equal(k, head, ids)) return k;
    }
    const uint32_t k = uint32_t(heads_.size());
    heads_.push_back(head);
    begin_.push_back(ids_.size());
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    next_.push_back(inserted ? kNone : it->second);
    if (!inserted) it->second = k;
    return k;
  }
  size_t size() const { return heads_.size(); }
  uint32_t head(uint32_t k) const { return heads_[k]; }
  // The names of sequence k joined by " -> ".
  std::string joined(const Trace& t, uint32_t k) const {
    std::string out;
    const size_t end = k + 1 < begin_.size() ? begin_[k + 1] : ids_.size();
    for (size_t i = begin_[k]; i < end; ++i) {
      if (i > begin_[k]) out += " -> ";
      out += t.strings.at(ids_[i]);
    }
    return out;
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  bool equal(uint32_t k, uint32_t head, const std::vector<uint32_t>& ids) const {
    const size_t end = k + 1 < begin_.size() ? begin_[k + 1] : ids_.size();
    return heads_[k] == head && end - begin_[k] == ids.size() &&
           std::equal(ids.begin(), ids.end(), ids_.begin() + std::ptrdiff_t(begin_[k]));
  }
  std::unordered_map<uint64_t, uint32_t> first_;   // hash -> the latest sequence with it
  std::vector<uint32_t> next_;                     // the previous sequence with the same hash
  std::vector<uint32_t> heads_;
  std::vector<size_t> begin_;
  std::vector<uint32_t> ids_;
};

}  // namespace gpuprof
