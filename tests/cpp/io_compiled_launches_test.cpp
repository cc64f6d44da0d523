// Inductor's generated-kernel launches in a Kineto trace (Trace::compiled_launches): what torch's
// Triton launcher writes as a cpu_op's args (torch/_inductor/runtime/triton_heuristics.py,
// get_profiler_kwargs) kept once per distinct kernel and args, with its launches counted; nothing for
// events or traces without them; the same rows from one thread and from two.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/io/kineto_import.h"
#include "trace_dump.h"

using namespace gpuprof;

namespace {

Trace import_text(const std::string& json) {
  ImportOptions o;
  o.split_min_bytes = 0;
  ImportStats stats;
  return import_kineto_json(json, "input.json", o, &stats);
}

// A Triton launch as torch 2.13 records it (kernel_name, kernel_kwargs and the warps are args the
// importer does not keep), the launch's runtime call and the kernel it ran.
std::string launch(const std::string& name, const std::string& file, int ts, int correlation,
                   const std::string& grid = "") {
  const std::string c = std::to_string(correlation);
  return R"({"ph":"X","cat":"cpu_op","name":")" + name + R"(","pid":1,"tid":1,"ts":)" + std::to_string(ts) +
         R"(,"dur":8,"args":{"External id":)" + c + R"(,"kernel_file":")" + file +
         R"(","kernel_hash":"cab","kernel_backend":"triton","stream":0,"num_warps":4,"num_stages":1,)" +
         R"("kernel_kwargs":"XBLOCK=1024","kernel_name":")" + name + R"(")" +
         (grid.empty() ? "" : R"(,"grid":")" + grid + R"(")") + R"(}},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":)" +
         std::to_string(ts + 2) + R"(,"dur":4,"args":{"correlation":)" + c + R"(,"External id":)" + c + R"(}},
    {"ph":"X","cat":"kernel","name":")" +
         name + R"(","pid":0,"tid":7,"ts":)" + std::to_string(ts + 50) +
         R"(,"dur":10,"args":{"device":0,"stream":7,"correlation":)" + c +
         R"(,"grid":[4,1,1],"block":[128,1,1]}})";
}

}  // namespace

TEST(CompiledLaunches, OneRowPerKernelAndArgsWithItsLaunchesCounted) {
  // Three launches of triton_poi_fused_add_0 from one file, one of triton_red_fused_sum_1 (an older
  // torch's "grid" text with it), one of a second graph's triton_poi_fused_add_0 (another file: the
  // same name, a different kernel), and an aten op: four rows, in the order first seen.
  const std::string json = R"({"traceEvents":[)" + launch("triton_poi_fused_add_0", "/c/ab/cab.py", 10, 1) + "," +
                           launch("triton_red_fused_sum_1", "/c/cd/ccd.py", 100, 2, "grid(64)") + "," +
                           launch("triton_poi_fused_add_0", "/c/ab/cab.py", 200, 3) + "," +
                           launch("triton_poi_fused_add_0", "/c/ef/cef.py", 300, 4) + "," +
                           launch("triton_poi_fused_add_0", "/c/ab/cab.py", 400, 5) + "," +
                           R"({"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":500,"dur":3,
                                "args":{"External id":6}}]})";
  const Trace t = import_text(json);
  ASSERT_EQ(t.compiled_launches.size(), 3u);
  const CompiledLaunch& add = t.compiled_launches[0];
  EXPECT_EQ(add.name, "triton_poi_fused_add_0");
  EXPECT_EQ(add.backend, "triton");
  EXPECT_EQ(add.file, "/c/ab/cab.py");
  EXPECT_EQ(add.hash, "cab");
  EXPECT_EQ(add.grid, "");
  EXPECT_EQ(add.launches, 3);
  EXPECT_EQ(t.compiled_launches[1].name, "triton_red_fused_sum_1");
  EXPECT_EQ(t.compiled_launches[1].grid, "grid(64)");
  EXPECT_EQ(t.compiled_launches[1].launches, 1);
  EXPECT_EQ(t.compiled_launches[2].file, "/c/ef/cef.py");
  EXPECT_EQ(t.compiled_launches[2].launches, 1);
  // The kernels keep their launch dimensions from the arrays; the launches stay host ops.
  size_t kernels = 0;
  for (const Event& e : t.events) {
    if (e.kind == EventKind::Kernel) {
      ++kernels;
      EXPECT_EQ(t.kernels[e.aux].grid[0], 4);
    }
  }
  EXPECT_EQ(kernels, 5u);
}

TEST(CompiledLaunches, GpuprofsChromeExportWritesThemBackOnEachLaunch) {
  // Two launches of triton_red_fused_sum_1 (one file, grid text) and one each of two graphs'
  // triton_poi_fused_add_0 (two files): the export writes the sum's args on both its launches and
  // none on the adds' (which launch had which file is not kept), so reading it back gives the
  // sum's row alone, with its two launches.
  const std::string json = R"({"traceEvents":[)" +
                           launch("triton_red_fused_sum_1", "/c/cd/ccd.py", 10, 1, "grid(64)") + "," +
                           launch("triton_poi_fused_add_0", "/c/ab/cab.py", 100, 2) + "," +
                           launch("triton_poi_fused_add_0", "/c/ef/cef.py", 200, 3) + "," +
                           launch("triton_red_fused_sum_1", "/c/cd/ccd.py", 300, 4, "grid(64)") + "]}";
  const Trace t = import_text(json);
  ASSERT_EQ(t.compiled_launches.size(), 3u);
  const Trace back = import_text(export_chrome_json(t));
  ASSERT_EQ(back.compiled_launches.size(), 1u);
  const CompiledLaunch& sum = back.compiled_launches[0];
  EXPECT_EQ(sum.name, "triton_red_fused_sum_1");
  EXPECT_EQ(sum.backend, "triton");
  EXPECT_EQ(sum.file, "/c/cd/ccd.py");
  EXPECT_EQ(sum.hash, "cab");
  EXPECT_EQ(sum.grid, "grid(64)");
  EXPECT_EQ(sum.launches, 2);
}

TEST(CompiledLaunches, NothingIsKeptForATraceWithoutThem) {
  // A kernel's grid is an array, and a cpu_op without the launch args is an operator: no rows.
  const Trace t = import_text(R"({"traceEvents":[
     {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":0,"dur":3,"args":{"External id":1}},
     {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":5,"dur":1,
       "args":{"device":0,"stream":7,"correlation":1,"grid":[2,1,1]}}]})");
  EXPECT_TRUE(t.compiled_launches.empty());
  EXPECT_EQ(t.compiled_launches.capacity(), 0u);
}

TEST(CompiledLaunches, TwoThreadsGiveTheRowsOneGives) {
  // 400 launches of four kernels, read by one thread and by two: the same rows, launches summed
  // across the halves, in the order one thread first sees them.
  std::string json = R"({"traceEvents":[)";
  const char* names[] = {"triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused_mean_2",
                         "triton_poi_fused_mul_3"};
  for (int i = 0; i < 400; ++i) {
    // The fourth kernel first runs in the second half.
    const int k = i < 300 ? i % 3 : i % 4;
    json += (i ? "," : "") + launch(names[k], std::string("/c/") + std::to_string(k) + ".py", 10 + i * 100, i + 1);
  }
  json += "]}";
  ImportOptions one;
  one.split_min_bytes = 0;
  ImportOptions two;
  two.split_min_bytes = 1;
  ImportStats s1, s2;
  const std::string a = test_support::dump_import(json, one, &s1);
  const std::string b = test_support::dump_import(json, two, &s2);
  EXPECT_EQ(a, b);
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) EXPECT_TRUE(s2.split);   // the path under test was taken
  EXPECT_NE(a.find("launch 'triton_poi_fused_mul_3' 'triton' '/c/3.py' 'cab' '' 25\n"), std::string::npos) << a;
  EXPECT_NE(a.find("launch 'triton_poi_fused_add_0' 'triton' '/c/0.py' 'cab' '' 125\n"), std::string::npos);
}
