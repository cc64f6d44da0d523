// Step segmentation and the per-step time breakdown (docs/breakdown.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/core/names.h"   // the name classifiers this stage's users read beside it
#include "gpuprof/core/trace.h"

namespace gpuprof {

// In priority order: where two categories overlap, the earlier one gets the time.
enum class Category : uint8_t {
  Kernel = 0,
  Memcpy,
  Memset,
  Communication,
  Runtime,
  DataLoader,
  CpuExec,
  Other,
};
constexpr int kNumCategories = 8;
const char* category_name(Category c);   // "Kernel", ..., "CPU Exec", "Other"
const char* category_key(Category c);    // "kernel", ..., "cpu_exec", "other" (JSON keys)

// Name rules, exposed for tests and for the advice stage.
bool is_dataloader_name(std::string_view name);
bool is_communication_op_name(std::string_view name);
bool is_communication_kernel_name(std::string_view name);

// The category an event counts in, or Other when it counts in none (step markers, NVTX, syncs,
// driver calls, python functions, GPU-side user ranges).
bool event_category(const Trace& trace, const Event& e, Category* out);

struct StepBreakdown {
  int64_t step = 0;          // N of ProfilerStep#N (0 when the trace has no step markers)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t host_start_ns = 0;
  int64_t host_end_ns = 0;
  int64_t device_activities = 0;   // device events launched by runtime calls in this step
  std::array<int64_t, kNumCategories> ns{};   // indexed by Category; they add up to end - start

  int64_t total_ns() const { return end_ns - start_ns; }
};

struct BreakdownOptions {
  // The 0.8 x last-step rule of the old plugin; kept switchable so a user can see both numbers.
  bool drop_incomplete_last_step = true;
};

struct BreakdownResult {
  std::vector<StepBreakdown> steps;
  bool had_step_markers = false;
  int dropped_trailing_steps = 0;      // steps after the last one with device work
  bool dropped_incomplete_last = false;
  int duplicate_step_markers = 0;      // markers sharing their step number with another: merged
  int nested_step_markers = 0;         // markers inside another step's host range: dropped
  int malformed_step_markers = 0;      // ProfilerStep#<not a number>: numbered after the step before
  std::string malformed_step_example;  // the first such marker's name
  // Device events that started implausibly far from the runtime call that launched them (more
  // than kMaxLaunchLagNs after it, or kMaxLaunchLeadNs before it: clock skew between the host and
  // device records). They are left out of the step boundaries, which they would stretch.
  int64_t skewed_device_events = 0;
  int64_t max_launch_skew_ns = 0;      // the largest such distance (signed: < 0 before the launch)
};

constexpr int64_t kMaxLaunchLagNs = 60LL * 1000 * 1000 * 1000;   // 60 s after the launch
constexpr int64_t kMaxLaunchLeadNs = 1000LL * 1000 * 1000;       // 1 s before it

BreakdownResult compute_breakdown(const Trace& trace, const BreakdownOptions& opts = {});

}  // namespace gpuprof
