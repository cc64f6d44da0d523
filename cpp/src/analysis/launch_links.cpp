#include "gpuprof/launch_links.h"

#include <algorithm>
#include <unordered_map>

#include "gpuprof/tensor_cores.h"

namespace gpuprof {

namespace {

// Host-side events whose enclosing op we need: runtime/driver calls and synchronisations.
bool needs_enclosing_op(EventKind k) {
  return k == EventKind::Runtime || k == EventKind::Driver || k == EventKind::Sync;
}

// Per host thread: a sweep over ops (and the calls inside them) in start order with a stack of
// open ops, giving each op its parent and each call its innermost enclosing op.
void nest_thread(const Trace& t, std::vector<uint32_t>& items, std::vector<int8_t>& eligible_by_name,
                 LaunchLinks& links) {
  std::sort(items.begin(), items.end(), [&](uint32_t a, uint32_t b) {
    const Event& ea = t.events[a];
    const Event& eb = t.events[b];
    if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
    const bool op_a = ea.kind == EventKind::HostOp, op_b = eb.kind == EventKind::HostOp;
    if (op_a != op_b) return op_a;   // an op opens before a call that starts with it
    if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;   // the outer op first
    return a < b;
  });
  std::vector<uint32_t> open;
  for (uint32_t i : items) {
    const Event& e = t.events[i];
    while (!open.empty() && t.events[open.back()].end_ns() <= e.start_ns &&
           !(t.events[open.back()].dur_ns == 0 && t.events[open.back()].start_ns == e.start_ns))
      open.pop_back();
    // An op still open but ending before this event ends only partly overlaps it: not a parent.
    uint32_t enclosing = kNoIndex;
    for (size_t k = open.size(); k-- > 0;) {
      if (t.events[open[k]].end_ns() >= e.end_ns()) {
        enclosing = open[k];
        break;
      }
    }
    if (e.kind == EventKind::HostOp) {
      links.parent_op[i] = enclosing;
      links.top_op[i] = enclosing == kNoIndex ? i : links.top_op[enclosing];
      if (eligible_by_name[e.name] < 0)
        eligible_by_name[e.name] = is_tensor_core_eligible_op(t.name_of(e)) ? 1 : 0;
      const bool eligible = eligible_by_name[e.name] == 1;
      const uint32_t inherited = enclosing == kNoIndex ? kNoIndex : links.eligible_root[enclosing];
      links.eligible_root[i] = inherited != kNoIndex ? inherited : (eligible ? i : kNoIndex);
      open.push_back(i);
    } else if (links.op_of[i] == kNoIndex) {
      links.op_of[i] = enclosing;
    }
  }
}

}  // namespace

LaunchLinks link_launches(const Trace& t) {
  const size_t n = t.events.size();
  LaunchLinks links;
  links.runtime_of.assign(n, kNoIndex);
  links.op_of.assign(n, kNoIndex);
  links.parent_op.assign(n, kNoIndex);
  links.top_op.assign(n, kNoIndex);
  links.eligible_root.assign(n, kNoIndex);

  std::unordered_map<uint64_t, uint32_t> op_by_external_id;
  std::unordered_map<uint64_t, uint32_t> runtime_by_correlation;
  std::unordered_map<uint32_t, std::vector<uint32_t>> host_items_by_thread;
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (e.kind == EventKind::HostOp) {
      if (e.external_id != 0) op_by_external_id.emplace(e.external_id, i);
      host_items_by_thread[e.tid].push_back(i);
    } else if (needs_enclosing_op(e.kind)) {
      // Only runtime calls launch device work; a driver call with the same id never shadows one.
      if (e.correlation != 0 && e.kind != EventKind::Sync) {
        auto [it, inserted] = runtime_by_correlation.emplace(e.correlation, i);
        if (!inserted && t.events[it->second].kind == EventKind::Driver && e.kind == EventKind::Runtime)
          it->second = i;
      }
      host_items_by_thread[e.tid].push_back(i);
    }
  }
  // The external id names the op exactly; time containment is the fallback for calls without one.
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (needs_enclosing_op(e.kind) && e.external_id != 0) {
      auto it = op_by_external_id.find(e.external_id);
      if (it != op_by_external_id.end()) links.op_of[i] = it->second;
    }
  }
  std::vector<int8_t> eligible_by_name(t.strings.size(), -1);   // each op name classified once
  for (auto& [tid, items] : host_items_by_thread) nest_thread(t, items, eligible_by_name, links);

  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (!(e.on_device() || e.kind == EventKind::Sync) || e.correlation == 0) continue;
    auto it = runtime_by_correlation.find(e.correlation);
    if (it == runtime_by_correlation.end() || it->second == i) continue;
    links.runtime_of[i] = it->second;
    // A sync's own thread may be a stream row; the call it belongs to knows the op for sure.
    if (e.on_device() || links.op_of[it->second] != kNoIndex) links.op_of[i] = links.op_of[it->second];
  }
  // A device event whose runtime call is missing may still carry the op's external id.
  for (uint32_t i = 0; i < n; ++i) {
    const Event& e = t.events[i];
    if (e.on_device() && links.op_of[i] == kNoIndex && e.external_id != 0) {
      auto it = op_by_external_id.find(e.external_id);
      if (it != op_by_external_id.end()) links.op_of[i] = it->second;
    }
  }
  return links;
}

}  // namespace gpuprof
