// Transparent huge pages for the importer's largest arrays.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gpuprof {

// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes) with huge pages when
// they are first touched (madvise MADV_HUGEPAGE: it matters where transparent huge pages are set
// to "madvise", as on this project's CI machines; with "always" they are anyway). For an array
// reserved ahead and filled once, such as the events of a large trace: one page fault per 2 MiB
// instead of 512. Memory not yet touched stays unmapped, so the array costs what it holds (up to
// one huge page more). A request the kernel refuses (no THP, an old kernel) changes nothing.
inline void advise_huge_pages(const void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (data == nullptr || end <= begin) return;
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace gpuprof
