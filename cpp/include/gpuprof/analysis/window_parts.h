// What one window of a trace read in windows (docs/design.md, "Memory") adds to Holistic Trace
// Analysis's six tables (idle_time.h, launch_stats.h, hta_counters.h, op_launch_delay.h,
// kernel_sequences.h), in a form the windows' merge adds up to the whole trace's rows: counts, sums,
// maxima, the values a percentile needs with their counts, and what crosses a window's edge.
//
// A window owns the events that start in its span (the others, its context, carry kContextFlag)
// and counts each of the whole trace's launches once, in the window that owns it: idle time,
// launch statistics and copies by the device activity, operator launch delay and kernel sequences
// by the operator. The queue length's and the copy bandwidth's points are owned by their time.
// Every table takes the whole trace's scope (`launched_before_ns`: its last step's start), not the
// window's. A launch whose call and activity lie more than a step apart is out of a window's view,
// as it is of the other tables a window reads (its context is one step on each side).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof {

// The span a window owns: the events (and the queue's and copies' points) in [from_ns, to_ns).
struct OwnedSpan {
  int64_t from_ns = 0;
  int64_t to_ns = 0;
  bool owns(int64_t ts) const { return ts >= from_ns && ts < to_ns; }
};

// A stream's owned activities: the gaps between them classified as idle_time_table does, and what
// the gap before its first one needs (the last one of an earlier window ends it).
struct IdleTimePart {
  int device = 0;
  uint32_t stream = 0;
  int64_t activities = 0;
  int64_t host_wait_ns = 0;
  int64_t kernel_wait_ns = 0;
  int64_t other_ns = 0;
  int64_t first_start_ns = 0;
  int64_t first_call_start_ns = 0;   // the runtime call that launched the first one
  int64_t last_end_ns = 0;           // the end of the last one (by start)
};

// A name's owned launches: launch_stats_table's sums, and each launch delay (ns) with its count.
struct LaunchStatsPart {
  std::string name;
  int64_t launches = 0;
  int64_t cpu_total_ns = 0;
  int64_t gpu_total_ns = 0;
  int64_t delay_total_ns = 0;
  int64_t delay_max_ns = 0;
  int64_t short_kernels = 0;
  int64_t runtime_outliers = 0;
  int64_t delay_outliers = 0;
  std::map<int64_t, int64_t> delays;
};

// A stream's queue points in the owned span: the length after each one (the launches still
// waiting from before the span counted in), summed; the first and last point's time and the last
// length (the time blocked between two windows' points is the merge's).
struct QueueLengthPart {
  int device = 0;
  uint32_t stream = 0;
  int64_t samples = 0;
  int64_t sum = 0;
  int64_t max = 0;
  int64_t blocked_ns = 0;
  int64_t first_ns = 0;
  int64_t last_ns = 0;
  int64_t last_length = 0;
};

// A copy still running at a window's end: when it ends and its bandwidth (GB/s).
struct OpenCopy {
  int64_t end_ns = 0;
  double gbps = 0;
};

// What the copy bandwidth of a kind carries from one window into the next: the summed bandwidth
// at the edge (as the whole trace's running sum has it, to the bit), the sum of its levels so far
// (summed in the whole trace's order) and the copies still running.
struct CopyCarry {
  std::string kind;
  double level = 0;
  double levels_sum = 0;
  std::vector<OpenCopy> open;
};

// A kind's owned copies (counts and sums) and the points of its bandwidth in the owned span where
// it is above 0: their number and each level with its count; `carry` for the next window (its
// levels_sum: every window's so far).
struct CopyBandwidthPart {
  int64_t copies = 0;
  int64_t bytes = 0;
  int64_t time_ns = 0;
  int64_t samples = 0;
  std::map<double, int64_t> levels;
  CopyCarry carry;
};

// An owned operator's launches by (operator, kernel sequence): calls and the summed delays.
struct OpLaunchDelayPart {
  std::string op;
  std::string kernels;
  int64_t calls = 0;
  int64_t op_delay_ns = 0;
  int64_t runtime_delay_ns = 0;
};

// An owned operator's kernels by (operator, its nesting depth, kernel sequence): a row of the whole
// trace's where the depth is the least of the operator's name over the whole trace.
struct KernelSequencePart {
  std::string op;
  std::string kernels;
  int32_t depth = 0;
  int64_t count = 0;
  int64_t gpu_ns = 0;
  int64_t cpu_ns = 0;
};

struct WindowParts {
  std::vector<IdleTimePart> idle_time;
  std::vector<LaunchStatsPart> launch_stats;
  std::vector<QueueLengthPart> queue_length;
  std::vector<CopyBandwidthPart> copy_bandwidth;
  std::vector<OpLaunchDelayPart> op_launch_delay;
  std::vector<KernelSequencePart> kernel_sequences;
  // Each owned operator name's least nesting depth (operators started in the scope).
  std::map<std::string, int32_t> least_depth;
};

// The window `t`'s parts of the six tables over the span it owns, in the whole trace's scope;
// `carried`: the copy bandwidth's carry from the window before (none for the first).
WindowParts window_parts(const Trace& t, const OwnedSpan& own, int64_t launched_before_ns,
                         const std::vector<CopyCarry>& carried);

}  // namespace gpuprof
