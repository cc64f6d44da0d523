// External correlation: each host op (RecordFunction enter/exit) pushes its external id into CUPTI
// for the calling thread, so the runtime calls it makes, and the device work they launch, carry it.
// Kept apart from the CUPTI session so its bookkeeping (per-thread push/pop matching, the thread
// map, forked children) is tested on the CPU with plain functions in CUPTI's place.
#pragma once

#include <cupti.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

namespace gpuprof::collect::cupti {

class Correlation {
 public:
  using PushFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t);
  using PopFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t*);

  // The process's one instance (leaked: host ops may exit during process teardown). The first
  // call installs a pthread_atfork child handler that turns correlation off in forked children
  // (DataLoader workers): they inherit the flag but not CUPTI's subscription.
  static Correlation& instance() {
    static Correlation* c = [] {
      auto* c = new Correlation;
      ::pthread_atfork(nullptr, nullptr, [] { instance().forget_in_child(); });
      return c;
    }();
    return *c;
  }

  // Starts pushing into `push` / popping with `pop` (CUPTI's functions). The release store pairs
  // with the acquire in push(), so the function pointers are seen set on weakly ordered CPUs.
  void begin(PushFn push, PopFn pop) {
    push_ = push;
    pop_ = pop;
    correlating_.store(true, std::memory_order_release);
    note_thread(tl_);   // the session's thread makes CUDA calls outside host ops too
  }
  // No new pushes; ops still open pop what they pushed.
  void end() { correlating_.store(false, std::memory_order_release); }
  bool on() const { return correlating_.load(std::memory_order_acquire); }
  int64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }

  // Fast path (off and no id pushed anywhere): two relaxed loads, no thread-local access. An op
  // entered on the fast path is not on the depth stack; its exit finds depth 0 (or takes the fast
  // path) and pops nothing, which is right since it pushed nothing.
  // CUPTI's answer (CUPTI_SUCCESS when nothing was pushed): a refusal is worth reporting.
  CUptiResult push(uint64_t external_id) {
    if (!correlating_.load(std::memory_order_relaxed) && outstanding_.load(std::memory_order_relaxed) == 0)
      return CUPTI_SUCCESS;
    Stack& c = tl_;
    const uint32_t d = c.depth++;
    if (d < 64 && external_id != 0 && correlating_.load(std::memory_order_acquire)) {
      const CUptiResult r = push_(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id);
      if (__builtin_expect(r != CUPTI_SUCCESS, 0)) {
        c.pushed &= ~(uint64_t(1) << d);   // nothing to pop at this depth
        return r;
      }
      c.pushed |= uint64_t(1) << d;
      if (__builtin_expect(!c.thread_known, 0)) note_thread(c);
      outstanding_.fetch_add(1, std::memory_order_relaxed);
    } else if (d < 64) {
      c.pushed &= ~(uint64_t(1) << d);   // a stale bit (an exit that ran on another thread) must not pop
    }
    return CUPTI_SUCCESS;
  }

  // CUPTI's answer (CUPTI_SUCCESS when nothing was popped).
  CUptiResult pop() {
    if (!correlating_.load(std::memory_order_relaxed) && outstanding_.load(std::memory_order_relaxed) == 0)
      return CUPTI_SUCCESS;
    Stack& c = tl_;
    if (c.depth == 0) return CUPTI_SUCCESS;
    const uint32_t d = --c.depth;
    if (d < 64 && (c.pushed & (uint64_t(1) << d))) {
      c.pushed &= ~(uint64_t(1) << d);
      uint64_t last = 0;
      const CUptiResult r = pop_(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
      return r;
    }
    return CUPTI_SUCCESS;
  }

  // CUPTI thread id -> OS thread id of every thread that pushed (for map_api_threads at drain).
  std::unordered_map<uint32_t, uint32_t> threads() const {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    return threads_;
  }

  // In a forked child: collection off, nothing outstanding, and the calling (only) thread's stack
  // empty, so neither new ops nor the exits of ops entered before the fork call into CUPTI, whose
  // subscription (and worker thread) the child does not have.
  void forget_in_child() {
    correlating_.store(false, std::memory_order_relaxed);
    outstanding_.store(0, std::memory_order_relaxed);
    tl_ = Stack{};
    new (&threads_mutex_) std::mutex;   // may have been held by a parent thread at the fork
    threads_.clear();
  }

 private:
  // Which of this thread's open host ops pushed an external id (bit d: depth d). Plain data:
  // zero-initialised thread_local storage needs no initialisation guard on the hot path.
  struct Stack {
    uint32_t depth;
    uint64_t pushed;
    bool thread_known;   // this thread's (CUPTI id -> OS id) pair is in threads_
  };

  void note_thread(Stack& c) {
    c.thread_known = true;
    const pthread_t self = pthread_self();
    uint32_t cupti_tid = 0;
    std::memcpy(&cupti_tid, &self, sizeof(cupti_tid));   // the low 32 bits, as CUPTI reports them
    const uint32_t os_tid = static_cast<uint32_t>(::syscall(SYS_gettid));
    std::lock_guard<std::mutex> lock(threads_mutex_);
    threads_[cupti_tid] = os_tid;
  }

  static inline thread_local Stack tl_;
  std::atomic<bool> correlating_{false};
  std::atomic<int64_t> outstanding_{0};   // ids pushed and not yet popped, all threads
  PushFn push_ = nullptr;
  PopFn pop_ = nullptr;
  mutable std::mutex threads_mutex_;
  std::unordered_map<uint32_t, uint32_t> threads_;
};

}  // namespace gpuprof::collect::cupti
