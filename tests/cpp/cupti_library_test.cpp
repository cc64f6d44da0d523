// Where libcupti is looked for, in order: what the user names first, then torch's wheels, then the
// CUDA toolkit, then the loader's path.
#ifdef GPUPROF_HAVE_CUPTI

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>

#include "cupti_library.h"

using gpuprof::collect::cupti::cupti_candidates;

namespace {
size_t index_of(const std::vector<std::string>& v, const std::string& s) {
  return size_t(std::find(v.begin(), v.end(), s) - v.begin());
}
}  // namespace

TEST(CuptiLibrary, SearchOrderIsEnvThenWheelsThenToolkitThenLoaderPath) {
  ::setenv("GPUPROF_CUPTI", "/tmp", 1);   // a folder: both sonames inside it
  ::setenv("CUDA_HOME", "/opt/cuda-x", 1);
  const auto c = cupti_candidates({"/site/nvidia/cu13/lib"});
  ::unsetenv("GPUPROF_CUPTI");
  ::unsetenv("CUDA_HOME");
  ASSERT_GE(c.size(), 8u);
  EXPECT_EQ(c[0], "/tmp/libcupti.so.13");
  EXPECT_EQ(c[1], "/tmp/libcupti.so");
  EXPECT_EQ(c[2], "/site/nvidia/cu13/lib/libcupti.so.13");
  const size_t home = index_of(c, "/opt/cuda-x/extras/CUPTI/lib64/libcupti.so.13");
  const size_t toolkit = index_of(c, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  const size_t lib64 = index_of(c, "/usr/local/cuda/lib64/libcupti.so.13");
  EXPECT_LT(2u, home);
  EXPECT_LT(home, toolkit);
  EXPECT_LT(toolkit, lib64);
  EXPECT_LT(lib64, c.size());
  EXPECT_EQ(c[c.size() - 2], "libcupti.so.13");   // the loader's own search path comes last
  EXPECT_EQ(c.back(), "libcupti.so");
}

TEST(CuptiLibrary, EnvNamingAFileIsTriedAsIs) {
  ::setenv("GPUPROF_CUPTI", "/nonexistent/libcupti.so.13.0.1", 1);
  const auto c = cupti_candidates({});
  ::unsetenv("GPUPROF_CUPTI");
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "/nonexistent/libcupti.so.13.0.1");
}

// torch loads libcupti by its path inside the nvidia wheel; gpuprof must name that file (the value
// NVTX_INJECTION64_PATH needs), not the soname it probed. A library this test binary already has
// (zlib, which gpuprof_core links) stands in for torch's CUPTI: same loader, same dladdr.
TEST(CuptiLibrary, AnAlreadyLoadedLibraryIsFoundWithTheFileItWasLoadedFrom) {
  using gpuprof::collect::cupti::find_loaded;
  const auto none = find_loaded({"libgpuprof-not-loaded.so.1"}, "zlibVersion");
  EXPECT_EQ(none.handle, nullptr);
  const auto z = find_loaded({"libgpuprof-not-loaded.so.1", "libz.so.1"}, "zlibVersion");
  ASSERT_NE(z.handle, nullptr) << "zlib is linked into this binary";
  EXPECT_EQ(z.soname, "libz.so.1");
  ASSERT_FALSE(z.path.empty());
  EXPECT_EQ(z.path[0], '/') << z.path;   // a file, not a sentence or a soname
  struct stat st;
  EXPECT_EQ(::stat(z.path.c_str(), &st), 0) << z.path;
  EXPECT_NE(z.path.find("libz.so"), std::string::npos) << z.path;
}

TEST(CuptiLibrary, CudaTwelveAndElevenCuptisAreProbedBeforeTheUnversionedName) {
  const auto& names = gpuprof::collect::cupti::cupti_sonames();
  EXPECT_EQ(names,
            (std::vector<std::string>{"libcupti.so.13", "libcupti.so.12", "libcupti.so.11", "libcupti.so"}));
}

#endif  // GPUPROF_HAVE_CUPTI
