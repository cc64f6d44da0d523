// The windowed reads' filter (ImportOptions::scan_steps, windowed; docs/design.md, "Memory"):
// which events an import keeps, which of them are its window's context, and a scan's count of the
// events it leaves out, by start time.
#pragma once

#include <cstdint>
#include <map>

#include "gpuprof/core/names.h"
#include "gpuprof/io/kineto_import.h"
#include "kineto_event.h"
#include "kineto_vocabulary.h"

namespace gpuprof::kineto {

// One more event starting at start_ns in a scan's histogram; past its bucket bound, the buckets
// are made twice as wide.
inline void count_start(ImportStats& stats, int64_t start_ns) {
  auto& h = stats.start_histogram;
  ++h[start_ns >> stats.histogram_shift];
  while (h.size() > ImportStats::kMaxHistogramBuckets) {
    std::map<int64_t, uint64_t> wider;
    for (const auto& [bucket, n] : h) wider[bucket >> 1] += n;
    h.swap(wider);
    ++stats.histogram_shift;
  }
}

// Whether an event of kind `k` is kept: a scan keeps the step markers and counts the rest (noting
// the profiled process as a whole import does: the first host event's pid); a window keeps a marker
// that starts in its kept time and any other event that overlaps it, and marks (*flags |=
// kContextFlag) what does not start in the time it owns.
inline bool window_keeps(const ImportOptions& o, ImportStats& stats, EventKind k, const PendingEvent& p,
                         int64_t* host_pid, int64_t start_ns, int64_t dur_ns, uint8_t* flags) {
  const bool marker = (k == EventKind::HostOp || k == EventKind::UserRange) && is_step_marker_name(p.name);
  if (o.scan_steps) {
    if (marker) return true;
    if (*host_pid < 0 && p.pid >= 0 && !is_device_kind(k) && k != EventKind::InputStage && k != EventKind::Other)
      *host_pid = p.pid;
    count_start(stats, start_ns);
    ++stats.outside_window;
    return false;
  }
  const bool kept =
      marker ? start_ns >= o.keep_from_ns && start_ns < o.keep_to_ns
             : start_ns < o.keep_to_ns && (start_ns >= o.keep_from_ns || start_ns + dur_ns > o.keep_from_ns);
  if (!kept) {
    ++stats.outside_window;
    return false;
  }
  if (start_ns < o.own_from_ns || start_ns >= o.own_to_ns) {
    *flags |= kContextFlag;
    ++stats.context_events;
  }
  return true;
}

// A memory sample: a scan keeps none; a window those in its kept time (its context steps' samples
// give its own steps the level they start with, and the peaks of their device work that runs on),
// marking (*flags |= kContextFlag) those outside the time it owns.
inline bool memory_sample_kept(const ImportOptions& o, ImportStats& stats, int64_t ts_ns, uint8_t* flags) {
  if (o.scan_steps || ts_ns < o.keep_from_ns || ts_ns >= o.keep_to_ns) {
    ++stats.outside_window;
    return false;
  }
  if (ts_ns < o.own_from_ns || ts_ns >= o.own_to_ns) *flags |= kContextFlag;
  return true;
}

}  // namespace gpuprof::kineto
