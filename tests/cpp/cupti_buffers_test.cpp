// The pool of activity buffers lent to CUPTI: CUPTI writes as many bytes as it is told a buffer
// holds, so a buffer must never be announced larger than it was allocated, whatever sizes earlier
// sessions used; buffers come back and are recycled, never more than max_in_use lent at once.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <vector>

#include "cupti_buffers.h"

using gpuprof::collect::cupti::BufferPool;

TEST(CuptiBuffers, ABufferLentAfterTheSizeGrewIsAsLargeAsAnnounced) {
  BufferPool pool;
  pool.configure(64 << 10, 4);          // a first session with 64 KiB buffers
  size_t size = 0;
  uint8_t* small = pool.acquire(&size);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(size, size_t(64) << 10);
  pool.release(small, size);            // CUPTI hands it back; it is kept for reuse
  EXPECT_EQ(pool.recycled(), 1u);

  pool.configure(4 << 20, 4);           // the next session asks for 4 MiB buffers
  EXPECT_EQ(pool.recycled(), 0u);       // the 64 KiB one is not lent as a 4 MiB one
  uint8_t* big = pool.acquire(&size);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(size, size_t(4) << 20);
  // CUPTI may fill every announced byte: the allocation must hold them.
  EXPECT_GE(malloc_usable_size(big), size);
  pool.release(big, size);
}

TEST(CuptiBuffers, ABufferOfAnOldSizeComingBackLateIsFreedNotRecycled) {
  BufferPool pool;
  pool.configure(64 << 10, 4);
  size_t old_size = 0;
  uint8_t* in_cupti = pool.acquire(&old_size);   // still in CUPTI's hands ...
  ASSERT_NE(in_cupti, nullptr);
  pool.configure(128 << 10, 4);                  // ... when the size changes
  pool.release(in_cupti, old_size);              // comes back with the size it was lent with
  EXPECT_EQ(pool.recycled(), 0u);
  EXPECT_EQ(pool.in_use(), 0u);
  size_t size = 0;
  uint8_t* b = pool.acquire(&size);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(size, size_t(128) << 10);
  EXPECT_GE(malloc_usable_size(b), size);
  pool.release(b, size);
  EXPECT_EQ(pool.recycled(), 1u);
}

TEST(CuptiBuffers, AtMostMaxInUseAreLentAndAReturnedOneIsReused) {
  BufferPool pool;
  pool.configure(64 << 10, 2);
  size_t s1 = 0, s2 = 0, s3 = 1;
  uint8_t* a = pool.acquire(&s1);
  uint8_t* b = pool.acquire(&s2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(pool.acquire(&s3), nullptr);   // refused: CUPTI drops records and counts them
  EXPECT_EQ(s3, 0u);
  EXPECT_EQ(pool.in_use(), 2u);
  pool.release(a, s1);
  EXPECT_EQ(pool.acquire(&s3), a);         // recycled, not allocated again
  EXPECT_EQ(s3, s1);
  pool.release(a, s3);
  pool.release(b, s2);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.recycled(), 2u);
  pool.trim();                             // the session gave CUPTI back: memory returned
  EXPECT_EQ(pool.recycled(), 0u);
}

TEST(CuptiBuffers, SizesAreRoundedToTheRecordAlignmentAndBuffersAligned) {
  BufferPool pool;
  pool.configure((64 << 10) + 3, 2);   // an odd size from the user
  EXPECT_EQ(pool.buffer_bytes() % BufferPool::kAlignment, 0u);
  EXPECT_GE(pool.buffer_bytes(), size_t(64 << 10) + 3);
  size_t size = 0;
  uint8_t* b = pool.acquire(&size);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % BufferPool::kAlignment, 0u);
  EXPECT_EQ(size, pool.buffer_bytes());
  pool.release(b, size);
}

// torch.profiler (Kineto) registers its own activity callbacks in the same process: a buffer it
// allocated may reach ours. Releasing it would free (or recycle, then free) memory we never owned.
TEST(CuptiBuffers, ABufferThisPoolDidNotLendIsIgnored) {
  BufferPool pool;
  pool.configure(1024, 2);
  size_t size = 0;
  uint8_t* ours = pool.acquire(&size);
  ASSERT_NE(ours, nullptr);
  std::vector<uint8_t> kinetos(1024);   // another client's buffer, same size
  EXPECT_FALSE(pool.release(kinetos.data(), 1024));
  EXPECT_EQ(pool.in_use(), 1u);          // ours is still out
  EXPECT_EQ(pool.recycled(), 0u);        // and the foreign one was not kept for reuse
  EXPECT_TRUE(pool.lent(ours));
  EXPECT_TRUE(pool.release(ours, size));
  EXPECT_FALSE(pool.lent(ours));
  EXPECT_FALSE(pool.release(ours, size));   // handed back twice: the second is ignored
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.recycled(), 1u);
}
