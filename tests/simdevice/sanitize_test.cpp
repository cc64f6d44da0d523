// The CUPTI collector on the simulated device, built with -fsanitize=thread or -fsanitize=address
// (with the stand-in libraries) by .ci/simdevice-sanitize.sh. The collector runs unchanged: it
// loads the stand-in libcupti.so.13 through GPUPROF_CUPTI and finds libcuda.so.1 and
// libnvidia-ml.so.1 already loaded (this program links them). Each test drives the threads a real
// run has: launching threads pushing external ids the way the RecordFunction hooks do, the
// stand-in's own thread completing full buffers into gpuprof's callback, and the session thread
// flushing (forced) while records arrive.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpuprof/collect/collector.h"
#include "gpuprof/collect/gpu_collect.h"
#include "gpuprof/core/trace.h"

extern "C" {
// The stand-in's control API (tests/simdevice/cupti_sim.c), in the order of its simdev_stats_t.
struct SimStats {
  uint64_t kernels, kernel_ns, memcpys, memcpy_ns, memsets, memset_ns, api_records, external_records;
  uint64_t dropped, buffers_requested, buffers_refused, buffers_completed;
  uint64_t completed_on_worker, completed_in_flush, forced_flushes, unforced_flushes, in_flight;
  uint64_t subscribes, subscribe_refusals, pushes, pops, timestamp_calls;
  uint64_t zero_id_pushes, api_filter_calls, invalid_cbid_calls, api_switched_off, replayed;
  uint64_t complete_cpu_ns, produced, callback_enables, finalizes;
};
void simdev_launch(int what, const char* kernel_name, uint64_t device_ns, uint64_t bytes, int in_flight, int count);
void simdev_take_subscriber(int taken);
void simdev_hold_completions(int hold);
void simdev_stats(SimStats* out);
size_t simdev_stats_size();
}

using namespace gpuprof;

namespace {

constexpr int kKernel = 0;

SimStats stats() {
  EXPECT_EQ(simdev_stats_size(), sizeof(SimStats)) << "SimStats no longer mirrors cupti_sim.c's simdev_stats_t";
  SimStats s{};
  simdev_stats(&s);
  return s;
}

SimStats minus(const SimStats& a, const SimStats& b) {
  SimStats d{};
  const uint64_t* pa = reinterpret_cast<const uint64_t*>(&a);
  const uint64_t* pb = reinterpret_cast<const uint64_t*>(&b);
  uint64_t* pd = reinterpret_cast<uint64_t*>(&d);
  for (size_t i = 0; i < sizeof(SimStats) / sizeof(uint64_t); ++i) pd[i] = pa[i] - pb[i];
  return d;
}

size_t count(const Trace& t, EventKind k) {
  size_t n = 0;
  for (const Event& e : t.events) n += e.kind == k;
  return n;
}

uint64_t meta(const Trace& t, const char* key) {
  auto it = t.metadata.find(key);
  return it == t.metadata.end() ? ~uint64_t(0) : std::stoull(it->second);
}

collect::GpuConfig small_buffers(size_t max_buffers) {
  collect::GpuConfig c;
  c.buffer_bytes = size_t(64) << 10;   // the smallest gpuprof accepts: many full buffers
  c.max_buffers = max_buffers;
  c.nvml_interval_ms = 5;   // the sampler's thread runs too
  return c;
}

// One span: host session and GPU collection started, `work` run, both stopped and drained.
template <typename Work>
Trace span(const collect::GpuConfig& config, Work work, collect::GpuStatus* status = nullptr) {
  collect::start(collect::SessionConfig{});
  const collect::GpuStatus s = collect::gpu_start(config);
  if (status) *status = s;
  work();
  collect::stop();
  collect::gpu_stop();
  Trace t = collect::drain();
  collect::gpu_drain(t);
  return t;
}

}  // namespace

TEST(SimDeviceSanitized, FourLaunchingThreadsWhileTheStandInCompletesAndTheSessionFlushes) {
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 3000;
  const SimStats before = stats();
  std::atomic<int> running{kThreads};
  collect::GpuStatus status;
  Trace t = span(
      small_buffers(32),
      [&] {
        std::vector<std::thread> threads;
        for (int i = 0; i < kThreads; ++i)
          threads.emplace_back([&] {
            int key;
            for (int op = 0; op < kOpsPerThread; ++op) {
              // What the hooks do at an operator's entry and exit.
              const uint64_t id = collect::host_enter_now(&key, "aten::mm", EventKind::HostOp);
              if (collect::gpu_correlation_used()) collect::gpu_external_push(id);
              simdev_launch(kKernel, nullptr, 1000, 0, 0, 1);
              if (collect::gpu_correlation_used()) collect::gpu_external_pop();
              collect::host_exit_now(&key);
            }
            running.fetch_sub(1);
          });
        // The session thread flushes while records arrive (a step boundary, a report mid-run).
        while (running.load() > 0) {
          collect::gpu_flush();
          collect::gpu_sample_energy();
          std::this_thread::yield();
        }
        for (auto& th : threads) th.join();
      },
      &status);
  const SimStats d = minus(stats(), before);
  ASSERT_TRUE(status.enabled) << status.message;
  EXPECT_EQ(status.error, "");
  EXPECT_EQ(d.kernels, uint64_t(kThreads) * kOpsPerThread);
  EXPECT_GT(d.completed_on_worker, 0u);   // full buffers came back on the stand-in's thread
  EXPECT_GT(d.forced_flushes, 0u);
  // Every record CUPTI made reached gpuprof or was counted as dropped (CUPTI's own count).
  const uint64_t made = d.api_records + d.external_records + d.kernels;
  EXPECT_EQ(meta(t, "cupti_records") + d.dropped, made);
  EXPECT_EQ(meta(t, "cupti_dropped_records"), d.dropped);
  if (d.dropped == 0) EXPECT_EQ(count(t, EventKind::Kernel), d.kernels);
  EXPECT_EQ(d.pushes, d.pops);
  EXPECT_EQ(d.invalid_cbid_calls, 0u);
  EXPECT_FALSE(t.gpu_samples.empty());   // the NVML sampler's thread ran beside it
  collect::gpu_release();
}

TEST(SimDeviceSanitized, RefusedBuffersAreCountedAsCuptiDroppedThem) {
  const SimStats before = stats();
  Trace t = span(small_buffers(2), [] {
    simdev_hold_completions(1);   // a slow CUPTI thread: gpuprof's two buffers stay out
    simdev_launch(kKernel, "_Z5burstv", 100, 0, 0, 4000);
    simdev_hold_completions(0);
  });
  const SimStats d = minus(stats(), before);
  EXPECT_GT(d.dropped, 0u);
  EXPECT_GT(d.buffers_refused, 0u);
  EXPECT_EQ(meta(t, "cupti_dropped_records"), d.dropped);
  EXPECT_EQ(meta(t, "cupti_records") + d.dropped, d.api_records + d.kernels);
  collect::gpu_release();
}

TEST(SimDeviceSanitized, RecordsInFlightAtTheForcedFlushAreCountedUntimed) {
  const SimStats before = stats();
  Trace t = span(small_buffers(4), [] {
    simdev_launch(kKernel, "_Z4donev", 500, 0, 0, 7);
    simdev_launch(kKernel, "_Z7runningv", 500, 0, 1, 5);
  });
  const SimStats d = minus(stats(), before);
  EXPECT_EQ(d.in_flight, 5u);
  EXPECT_EQ(count(t, EventKind::Kernel), 7u);
  EXPECT_EQ(meta(t, "cupti_untimed_records"), 5u);
  collect::gpu_release();
}

TEST(SimDeviceSanitized, SubscriberTakenThenGivenBack) {
  simdev_take_subscriber(1);   // torch.profiler or Nsight Systems holds CUPTI
  collect::GpuStatus s;
  span(small_buffers(4), [] { simdev_launch(kKernel, nullptr, 100, 0, 0, 10); }, &s);
  EXPECT_FALSE(s.enabled);
  EXPECT_NE(s.message.find("another CUDA profiler"), std::string::npos) << s.message;
  collect::gpu_release();
  simdev_take_subscriber(0);
  Trace t = span(small_buffers(4), [] { simdev_launch(kKernel, nullptr, 100, 0, 0, 10); }, &s);
  EXPECT_TRUE(s.enabled) << s.message;
  EXPECT_EQ(count(t, EventKind::Kernel), 10u);
  collect::gpu_release();
}

int main(int argc, char** argv) {
  const char* cupti = std::getenv("SIMDEVICE_CUPTI");
  if (cupti == nullptr) {
    std::fprintf(stderr, "set SIMDEVICE_CUPTI to the stand-in libcupti.so.13 (.ci/simdevice-sanitize.sh does)\n");
    return 2;
  }
  setenv("GPUPROF_CUPTI", cupti, 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
