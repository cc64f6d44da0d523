// Which chain of work set each step's length (docs/metrics.md, "Critical path"): a walk back from
// the step's end that, at every moment, follows what the work then running was waiting for: the
// host operator on the training thread, the device activity a synchronisation waited on, the
// launch call that queued a kernel, or the kernel before it on its stream. The chain covers the
// step without gaps, so its length is the step's time, and each piece has one of Holistic Trace
// Analysis's causes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/trace.h"

namespace gpuprof {

// HTA's causes (its BoundType), in this order everywhere.
enum class PathCause : uint8_t {
  CpuBound = 0,              // host operators and the host's own time between them
  DataLoading,               // the training loop waiting for a batch (the DataLoader's range)
  GpuComputeBound,           // kernels, copies and sets other than communication
  GpuCommunicationBound,     // NCCL/RCCL kernels
  GpuKernelKernelOverhead,   // the gap between a kernel and the one queued behind it on its stream
  GpuKernelLaunchOverhead,   // from a launch call's start to the start of the kernel it launched
};
constexpr int kNumPathCauses = 6;
const char* path_cause_key(PathCause c);   // "cpu_bound", ..., "gpu_kernel_launch_overhead"

// HTA's threshold (KERNEL_KERNEL_DELAY_THRESHOLD_US): a longer gap between a queued kernel and the
// one before it on its stream is a wait on something else (another stream), looked for first.
constexpr int64_t kKernelKernelDelayThresholdNs = 1'500'000;

// One piece of the chain. `event`: the host op, runtime call or device activity the time is spent
// in (kNoIndex: the host between operators, or a launch or kernel-kernel gap).
struct PathSegment {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  PathCause cause = PathCause::CpuBound;
  uint32_t event = kNoIndex;
};

// An operator or device activity by name, with its time on the chain.
struct PathTopRow {
  uint32_t name = 0;   // id in Trace::strings
  EventKind kind = EventKind::HostOp;
  int64_t ns = 0;
};

constexpr size_t kPathTopRows = 5;

struct StepCriticalPath {
  int64_t step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::array<int64_t, kNumPathCauses> ns{};   // by PathCause; they add up to end - start
  // Of the cpu_bound time, that inside kernel launch calls: with the launch overhead, the share a
  // launch-bound step spends launching (what CUDA graphs and torch.compile remove).
  int64_t launch_calls_ns = 0;
  std::vector<PathSegment> segments;         // in time order, end to start without gaps
  std::vector<PathTopRow> top;               // the kPathTopRows names with most time, most first
  int64_t length_ns() const { return end_ns - start_ns; }
};

// One path per step of `steps`, over the host threads that hold the step markers or launch
// device work (the forward and the backward threads, merged as HTA merges them) and every device
// stream. O(n log n) to index the trace, then O(k log n) per step of k events.
std::vector<StepCriticalPath> critical_paths(const Trace& trace, const LaunchLinks& links,
                                             const BreakdownResult& steps);

// The chain as drawn (the Chrome export's "Critical path" track, the HTML timeline's band): runs of
// segments with the same cause, name and place merged into one piece. `event` is the first
// segment's (kNoIndex for the host between operators and for launch and kernel-kernel gaps); the
// place is the event's host thread or device stream.
struct PathPiece {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  PathCause cause = PathCause::CpuBound;
  uint32_t event = kNoIndex;
};

// A step's pieces, at most `max_pieces`: past that, the shortest are left out (`cut` of them,
// `cut_ns` in all), the rest stay in time order, so the pieces plus cut_ns make the step's length.
struct PathPieces {
  std::vector<PathPiece> pieces;
  size_t merged = 0;   // segments folded into the piece before them
  size_t cut = 0;
  int64_t cut_ns = 0;
};

constexpr size_t kMaxPathPieces = 2000;

PathPieces path_pieces(const Trace& trace, const StepCriticalPath& path, size_t max_pieces = kMaxPathPieces);

// What a piece is called: the event's name, or for a gap its cause's words ("launch overhead",
// "kernel-kernel gap", "host between operators").
std::string path_piece_name(const Trace& trace, const PathPiece& piece);

// Where it ran: "host thread T", "GPU d stream s", or "" for a gap.
std::string path_piece_place(const Trace& trace, const PathPiece& piece);

}  // namespace gpuprof
