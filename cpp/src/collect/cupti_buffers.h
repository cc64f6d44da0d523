// The activity buffers gpuprof lends CUPTI (buffer_requested / buffer_completed in
// cupti_collector.cpp), kept apart from CUPTI so their bookkeeping is tested on the CPU.
//
// CUPTI asks for a buffer and is told its size; it writes up to that many bytes, then hands the
// buffer back (on its worker thread, or inside cuptiActivityFlushAll) with the size it was given.
// Buffers are recycled, but a buffer is only ever lent again with the size it was allocated with:
// the size can change between sessions (GpuConfig::buffer_bytes), and a recycled smaller buffer
// announced with a larger size would let CUPTI write past its end.
//
// CUPTI's activity callbacks are process-wide: when torch.profiler (Kineto) registers its own after
// ours, a buffer it lent may be handed to our completion callback, or ours to its. Every buffer
// lent is remembered, and release() ignores a pointer this pool did not lend (freeing or recycling
// another client's buffer would be a double free).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace gpuprof::collect::cupti {

class BufferPool {
 public:
  // Records in a buffer are read as 8-byte aligned structs (CUPTI's samples use ALIGN_SIZE 8).
  static constexpr size_t kAlignment = 8;

  ~BufferPool() { trim(); }

  // Size (rounded up to kAlignment) and count of buffers lent from now on. Recycled buffers of
  // another size are freed now; those still in CUPTI's hands are freed when they come back.
  void configure(size_t bytes, size_t max_in_use) {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (bytes != bytes_) {
      for (uint8_t* b : free_) std::free(b);
      free_.clear();
    }
    bytes_ = bytes;
    max_in_use_ = max_in_use;
  }

  // A buffer for CUPTI and its size, or nullptr (and size 0) when max_in_use buffers are already
  // lent or memory is short: CUPTI then drops records and counts them.
  uint8_t* acquire(size_t* size) {
    std::lock_guard<std::mutex> lock(mutex_);
    *size = 0;
    if (in_use_ >= max_in_use_ || bytes_ == 0) return nullptr;
    uint8_t* b = nullptr;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, bytes_));
      if (b == nullptr) return nullptr;
    }
    ++in_use_;
    lent_.insert(b);
    *size = bytes_;
    return b;
  }

  // True when this pool lent `buffer` (and has not had it back yet).
  bool lent(const uint8_t* buffer) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lent_.count(const_cast<uint8_t*>(buffer)) != 0;
  }

  // A buffer CUPTI handed back; `size` is the size it was lent with. False (and nothing done) for
  // a pointer this pool did not lend, or one already handed back.
  bool release(uint8_t* buffer, size_t size) {
    if (buffer == nullptr) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (lent_.erase(buffer) == 0) return false;
    if (in_use_ > 0) --in_use_;
    if (size == bytes_ && free_.size() < max_in_use_) free_.push_back(buffer);
    else std::free(buffer);
    return true;
  }

  // Frees the recycled buffers (when the session gives CUPTI back: up to max_in_use x bytes).
  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint8_t* b : free_) std::free(b);
    free_.clear();
  }

  size_t in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  size_t recycled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_.size();
  }
  size_t buffer_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }

 private:
  mutable std::mutex mutex_;
  size_t bytes_ = 0;
  size_t max_in_use_ = 0;
  size_t in_use_ = 0;
  std::vector<uint8_t*> free_;
  std::unordered_set<uint8_t*> lent_;   // in CUPTI's hands
};

}  // namespace gpuprof::collect::cupti
