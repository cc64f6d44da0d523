// Who launched what: device activity -> the runtime call that launched it (correlation id) ->
// the host operator that made the call (external id, or time containment on the same thread when
// the call carries none) -> that operator's enclosing operators.
#pragma once

#include <cstdint>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof {

struct LaunchLinks {
  // All indexed by position in Trace::events; kNoIndex where there is no link.
  std::vector<uint32_t> runtime_of;     // device event (kernel/copy/set, sync) -> runtime call
  std::vector<uint32_t> op_of;          // runtime call, sync or device event -> innermost host op
  std::vector<uint32_t> parent_op;      // host op -> host op directly enclosing it (same thread)
  std::vector<uint32_t> top_op;         // host op -> outermost host op enclosing it (itself if none)
  std::vector<uint32_t> eligible_root;  // host op -> outermost tensor-core-eligible op among itself
                                         //            and its enclosing ops
  // The host op a device or runtime event is attributed to, following the links above.
  uint32_t launching_op(uint32_t event_index) const {
    return event_index < op_of.size() ? op_of[event_index] : kNoIndex;
  }
  // The runtime call that launched a device event, when the event has one made before
  // `before_ns` (HTA's scope: calls before the last step marker); kNoIndex otherwise.
  uint32_t call_before(const Trace& t, uint32_t device_event, int64_t before_ns) const {
    const uint32_t c = device_event < runtime_of.size() ? runtime_of[device_event] : kNoIndex;
    return c != kNoIndex && t.events[c].start_ns < before_ns ? c : kNoIndex;
  }
};

// O(n log n): one sort of each thread's host events, hash maps for the ids.
LaunchLinks link_launches(const Trace& trace);

// The host ops' indices, outer before inner (by start, the longer first at equal starts): a
// walk in this order meets an op's parent before the op, a reverse walk its children first.
std::vector<uint32_t> host_ops_outer_first(const Trace& trace);

}   // namespace gpuprof
