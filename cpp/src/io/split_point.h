// The meeting point of a split import's two threads (import_driver.cpp), as the handler sees it:
// the handler asks at each event's end whether it has reached the second thread's start, and what
// to do there. Its own header so that the handler need not know the driver.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace gpuprof::kineto {

// Where the second thread of a split import starts (run_import): just after the '}' of what looks
// like an event. The first thread calls arrive() once, at the first event it closes at or past
// that byte, saying whether it is exactly there, between two events of traceEvents; arrive() says
// whether the first thread reads on alone, stops there and takes the second thread's events, or
// stops because the user interrupted the import while it waited for the second thread.
enum class AtSplit { ReadOn, TakeSecondHalf, Interrupted };

// The file's time unit (docs/analyze.md): the majority's of the first kVotes nonzero timestamps
// (1e17 or more: nanoseconds), decided after kVotes votes, after kMaxHeld events without them, or
// at the end of the events; microseconds without any vote. Events are held until then.
struct UnitVote {
  static constexpr int kVotes = 64;
  static constexpr size_t kMaxHeld = 4096;
  int ns = 0, us = 0;   // votes so far
  size_t held = 0;      // events held so far
  // Counts one event (vote: 1 nanoseconds, 0 microseconds, -1 none); true once it decides.
  bool add(int vote) {
    ++held;
    if (vote == 1) ++ns;
    else if (vote == 0) ++us;
    return ns + us >= kVotes || held >= kMaxHeld;
  }
  int unit_ns() const { return ns > us ? 1 : 1000; }
};
struct SplitPoint {
  // Where the second thread starts. For a gzip file, until the second thread has found that
  // (`settled`), the earliest it can be: the first thread then waits there in settle(), which
  // leaves `at` where the second thread starts, or the largest value when it found no place.
  std::atomic<uint64_t> at{UINT64_MAX};
  std::atomic<bool> settled{true};
  std::function<void()> settle;
  // unit_ns: the handler's, 0 when it is still voting (`vote`: its votes so far); on
  // TakeSecondHalf, *unit_ns is the unit the one-thread read would have decided.
  std::function<AtSplit(bool exactly_here, int* unit_ns, const UnitVote& vote)> arrive;

  // Whether the first thread, at text offset `pos` after an event, has got to the second thread's
  // start: if `pos` is past the earliest place and that is not settled yet, it settles it first.
  bool reached(uint64_t pos) {
    if (pos < at.load(std::memory_order_acquire)) return false;
    if (!settled.load(std::memory_order_acquire)) settle();
    return pos >= at.load(std::memory_order_acquire);
  }
};

}  // namespace gpuprof::kineto
