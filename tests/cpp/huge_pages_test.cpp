// advise_huge_pages (cpp/src/core/huge_pages.h): the whole 2 MiB pages inside an array are marked
// for transparent huge pages (the kernel's VmFlags "hg" on the mapping that holds them), and the
// edges of an array, or one too small to hold a whole huge page, are left alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../cpp/src/core/huge_pages.h"

namespace {

// The VmFlags of the mapping of /proc/self/smaps that holds `address`; "" when none is found.
std::string vm_flags_at(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (line.find(':') > line.find('-') && (range >> std::hex >> lo >> dash >> hi) && dash == '-') {
      inside = lo <= address && address < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool thp_can_be_asked_for() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

}  // namespace

TEST(HugePages, TheWholeHugePagesOfAnArrayAreMarkedItsEdgesNot) {
#if !defined(__linux__)
  GTEST_SKIP() << "transparent huge pages are Linux's";
#else
  if (!thp_can_be_asked_for()) GTEST_SKIP() << "transparent huge pages are off on this machine";
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  std::vector<char> a;
  a.reserve(16 << 20);   // a fresh mapping of its own (far above malloc's mmap threshold)
  const uintptr_t data = reinterpret_cast<uintptr_t>(a.data());
  const uintptr_t first_whole = (data + kHuge - 1) & ~(kHuge - 1);
  gpuprof::advise_huge_pages(a.data(), a.capacity());
  EXPECT_NE(vm_flags_at(first_whole).find(" hg"), std::string::npos) << vm_flags_at(first_whole);
  if (first_whole > data) {   // the part before the first whole huge page keeps its mapping's flags
    EXPECT_EQ(vm_flags_at(data).find(" hg"), std::string::npos) << vm_flags_at(data);
  }
  // Too small for a whole huge page, or empty: nothing is asked for (and nothing fails).
  std::vector<char> small(4096);
  gpuprof::advise_huge_pages(small.data(), small.size());
  gpuprof::advise_huge_pages(nullptr, 0);
  EXPECT_EQ(vm_flags_at(reinterpret_cast<uintptr_t>(small.data())).find(" hg"), std::string::npos);
#endif
}
