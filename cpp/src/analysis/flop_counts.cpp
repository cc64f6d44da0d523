// FLOPs over a trace (flops.h): each operator call counted once by the rules of flops.cpp (or by
// its own `flops` arg), per step, and the roofline rows of the operator table.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "flop_rules.h"
#include "gpuprof/analysis/flops.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/analysis/tensor_cores.h"

namespace gpuprof {

using flop_rule::is_backward_scope;
using flop_rule::Kind;
using flop_rule::Rule;
using flop_rule::rule_of;
using flop_rule::shape_at;

namespace {

// What count_flops knows of each op as it walks them outer first: inside a matrix-class op, inside
// another-class op, inside the backward, the owner of its calls, carrying a trace's `flops` arg,
// inside one that does, counted itself.
constexpr uint8_t kInMatmul = 1, kInOther = 2, kInBackward = 4, kOwner = 8, kTraceArg = 16, kInTraceArg = 32,
                  kCounted = 64;

// The same (name, shapes, types, concrete) is counted once: a step repeats its calls.
struct Key {
  uint32_t name, shapes, types, concrete;
  bool operator==(const Key& o) const {
    return name == o.name && shapes == o.shapes && types == o.types && concrete == o.concrete;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = (uint64_t(k.name) << 32) ^ k.shapes;
    h = h * 0x9E3779B97F4A7C15ULL ^ ((uint64_t(k.types) << 32) | k.concrete);
    return size_t(h ^ (h >> 29));
  }
};

// Convolutions without their stride and padding (old traces): the output shape from the
// backward of a convolution with the same input and weight (its grad_output), made on first need.
class ConvOutputs {
 public:
  ConvOutputs(const Trace& t, const std::vector<uint32_t>& ops) : t_(t), ops_(ops) {}

  Shape of(const Shape& x, const Shape& w) {
    if (!made_) make();
    const auto it = outputs_.find({x, w});
    return it == outputs_.end() ? Shape() : it->second;
  }

 private:
  void make() {
    made_ = true;
    for (uint32_t j : ops_) {
      const Rule* r = rule_of(t_.name_of(t_.events[j]));
      if (r == nullptr || (r->kind != Kind::ConvBackward && r->kind != Kind::OldConvBackward)) continue;
      const uint32_t sh = t_.events[j].aux;
      if (sh >= t_.strings.size()) continue;
      const OpInputs b = parse_op_inputs(t_.strings.at(sh), "", "");
      const bool old = r->kind == Kind::OldConvBackward;
      const Shape& go = shape_at(b, old ? 1 : 0);
      const Shape& bx = shape_at(b, old ? 0 : 1);
      if (!go.empty() && !bx.empty()) outputs_.emplace(std::make_pair(bx, shape_at(b, 2)), go);
    }
  }

  const Trace& t_;
  const std::vector<uint32_t>& ops_;
  std::map<std::pair<Shape, Shape>, Shape> outputs_;
  bool made_ = false;
};

FlopPhase phase_of(uint8_t state, const Event& e) {
  return !(state & kInBackward)          ? FlopPhase::Forward
         : (e.flags & kGradRecordedFlag) ? FlopPhase::Recompute
                                         : FlopPhase::Backward;
}

// Whether any op below each op (its calls, theirs ...) has one of `bits` in its state.
std::vector<uint8_t> marked_below(const LaunchLinks& links, const std::vector<uint32_t>& ops,
                                  const std::vector<uint8_t>& state, uint8_t bits) {
  std::vector<uint8_t> below(state.size(), 0);
  for (size_t k = ops.size(); k-- > 0;) {
    const uint32_t i = ops[k];
    const uint32_t p = links.parent_op[i];
    if (p != kNoIndex && (below[i] || (state[i] & bits))) below[p] = 1;
  }
  return below;
}

// A trace's `flops` arg on an op no rule covers counts where no rule counted the calls inside
// it (torch's with_flops counts aten::conv2d, whose aten::convolution the rules count).
void count_trace_args(const Trace& t, const LaunchLinks& links, const std::vector<uint32_t>& ops,
                      const std::vector<uint8_t>& state,
                      const std::vector<std::pair<uint32_t, int64_t>>& trace_args, FlopCounts& out) {
  const std::vector<uint8_t> counted_below = marked_below(links, ops, state, kOwner);
  std::vector<uint8_t> taken(state.size(), 0);
  for (uint32_t i : ops) {   // outer first: an outer op with the arg takes the ones inside it
    const uint32_t p = links.parent_op[i];
    if (p != kNoIndex && (taken[p] & 3)) taken[i] = 2;
  }
  for (const auto& [i, flops] : trace_args) {
    if (counted_below[i] || taken[i] == 2) continue;
    taken[i] = 1;
    const Event& e = t.events[i];
    const FlopClass c = is_tensor_core_eligible_op(t.name_of(e)) ? FlopClass::Matmul : FlopClass::Other;
    out.ops.push_back({i, flops, -1, c, phase_of(state[i], e), FlopDtype::Unknown, true});
  }
}

}  // namespace

FlopCounts count_flops(const Trace& t, const LaunchLinks& links, const std::vector<uint32_t>* outer_first) {
  FlopCounts out;
  const size_t n = t.events.size();
  const std::vector<uint32_t> sorted = outer_first ? std::vector<uint32_t>() : host_ops_outer_first(t);
  const std::vector<uint32_t>& ops = outer_first ? *outer_first : sorted;
  // Per name: its rule's class (once per name, not per event), and whether it is autograd's
  // backward entry (every backward op runs inside one).
  std::vector<int8_t> class_by_name(t.strings.size(), -1);
  std::vector<int8_t> backward_by_name(t.strings.size(), -1);
  auto cls_of = [&](uint32_t name) {
    if (name >= class_by_name.size()) return flop_class_of(t.strings.at(name));
    if (class_by_name[name] < 0) class_by_name[name] = static_cast<int8_t>(flop_class_of(t.strings.at(name)));
    return static_cast<FlopClass>(class_by_name[name]);
  };
  auto is_backward_entry = [&](uint32_t name) {
    if (name >= backward_by_name.size()) return false;
    if (backward_by_name[name] < 0) backward_by_name[name] = is_backward_scope(t.strings.at(name)) ? 1 : 0;
    return backward_by_name[name] == 1;
  };
  std::vector<uint8_t> state(n, 0);
  std::unordered_map<Key, OpFlops, KeyHash> memo;
  std::vector<uint32_t> args_at;   // each event's OpArgs, by index: one pass, no search per op
  if (!t.op_args.empty()) {
    args_at.assign(n, kNoIndex);
    for (uint32_t k = 0; k < t.op_args.size(); ++k)
      if (t.op_args[k].event < n) args_at[t.op_args[k].event] = k;
  }
  ConvOutputs conv_outputs(t, ops);
  std::vector<std::pair<uint32_t, int64_t>> trace_args;   // (event, flops) of ops no rule counts
  for (uint32_t i : ops) {
    const Event& e = t.events[i];
    const uint32_t p = links.parent_op[i];
    uint8_t s = 0;
    if (p != kNoIndex) {
      s |= state[p] & (kInMatmul | kInOther | kInBackward | kInTraceArg);
      // Only a counted op covers the ones inside it: one whose inputs were not recorded leaves
      // them to an inner op that has them (under autocast, aten::mm casts its inputs and calls
      // aten::mm again: only the inner call's inputs are captured live).
      if (state[p] & kCounted) s |= cls_of(t.events[p].name) == FlopClass::Matmul ? kInMatmul : kInOther;
      if (is_backward_entry(t.events[p].name)) s |= kInBackward;
      if (state[p] & kTraceArg) s |= kInTraceArg;
    }
    if (!(s & kInBackward) && is_backward_entry(e.name)) out.backward_starts.push_back(e.start_ns);
    const FlopClass c = cls_of(e.name);
    const OpArgs* args = args_at.empty() || args_at[i] == kNoIndex ? nullptr : &t.op_args[args_at[i]];
    const bool owner =
        (c == FlopClass::Matmul && !(s & kInMatmul)) || (c == FlopClass::Other && !(s & (kInMatmul | kInOther)));
    if (owner) {
      s |= kOwner;
      const Key key{e.name, e.aux < t.strings.size() ? e.aux : 0u, args ? args->types : 0u,
                    args ? args->concrete : 0u};
      auto it = memo.find(key);
      if (it == memo.end()) {
        OpInputs in =
            parse_op_inputs(t.strings.at(key.shapes), t.strings.at(key.types), t.strings.at(key.concrete));
        const Rule* r = rule_of(t.strings.at(e.name));
        if (r->kind == Kind::Conv && in.concrete.size() < 5 && in.shapes.size() >= 2)
          in.conv_output_hint = conv_outputs.of(in.shapes[0], in.shapes[1]);
        it = memo.emplace(key, op_flops(t.strings.at(e.name), in)).first;
      }
      const OpFlops& f = it->second;
      const FlopPhase phase = phase_of(s, e);
      if (f.flops >= 0) {
        s |= kCounted;
        out.ops.push_back({i, f.flops, f.bytes, c, phase, f.dtype, false});
        if (args != nullptr && args->trace_flops >= 0 && !(e.flags & kContextFlag)) {   // counted where owned
          ++out.trace_args_checked;
          if (args->trace_flops != f.flops) ++out.trace_args_differ;
        }
      } else if (args != nullptr && args->trace_flops >= 0) {
        s |= kCounted;
        out.ops.push_back({i, args->trace_flops, -1, c, phase, f.dtype, true});
      } else {
        out.uncounted.push_back(i);
      }
    } else if (c == FlopClass::None && args != nullptr && args->trace_flops > 0 &&
               !(s & (kInMatmul | kInOther | kInTraceArg))) {
      trace_args.emplace_back(i, args->trace_flops);
    }
    state[i] = s;
  }
  if (!trace_args.empty()) count_trace_args(t, links, ops, state, trace_args, out);
  // An uncounted op whose calls an inner op counted (the autocast case above) is not missing.
  if (!out.uncounted.empty()) {
    const std::vector<uint8_t> counted_below = marked_below(links, ops, state, kCounted);
    out.uncounted.erase(std::remove_if(out.uncounted.begin(), out.uncounted.end(),
                                       [&](uint32_t i) { return counted_below[i] != 0; }),
                        out.uncounted.end());
  }
  std::sort(out.ops.begin(), out.ops.end(),
            [](const CountedOp& a, const CountedOp& b) { return a.event < b.event; });
  std::sort(out.uncounted.begin(), out.uncounted.end());
  std::sort(out.backward_starts.begin(), out.backward_starts.end());
  return out;
}

std::vector<StepFlops> step_flops(const Trace& t, const FlopCounts& counts, const BreakdownResult& steps) {
  std::vector<StepFlops> out(steps.steps.size());
  if (out.empty()) return out;
  std::vector<int64_t> starts;
  for (size_t k = 0; k < steps.steps.size(); ++k) {
    out[k].step = steps.steps[k].step;
    starts.push_back(steps.steps[k].start_ns);
  }
  // The step an event belongs to: the last one starting at or before it, if it has not ended.
  auto step_of = [&](const Event& e) -> StepFlops* {
    const auto it = std::upper_bound(starts.begin(), starts.end(), e.start_ns);
    if (it == starts.begin()) return nullptr;
    const size_t k = size_t(it - starts.begin()) - 1;
    return e.start_ns < steps.steps[k].end_ns ? &out[k] : nullptr;
  };
  for (const CountedOp& c : counts.ops) {
    StepFlops* s = step_of(t.events[c.event]);
    if (s == nullptr) continue;
    s->total += c.flops;
    (c.cls == FlopClass::Matmul ? s->matmul : s->other) += c.flops;
    if (c.cls == FlopClass::Other) ++s->other_calls;
    switch (c.phase) {
      case FlopPhase::Forward:
        s->forward += c.flops;
        if (c.cls == FlopClass::Matmul) s->matmul_forward += c.flops;
        break;
      case FlopPhase::Backward: s->backward += c.flops; break;
      case FlopPhase::Recompute: s->recompute += c.flops; break;
    }
    if (c.cls == FlopClass::Matmul) s->matmul_by_dtype[static_cast<size_t>(c.dtype)] += c.flops;
  }
  for (uint32_t i : counts.uncounted) {
    StepFlops* s = step_of(t.events[i]);
    if (s == nullptr) continue;
    ++s->uncounted_calls;
    if (flop_class_of(t.name_of(t.events[i])) == FlopClass::Matmul) ++s->uncounted_matmul_calls;
  }
  for (const int64_t start : counts.backward_starts) {
    Event e;
    e.start_ns = start;
    if (StepFlops* s = step_of(e)) s->backward_ran = true;
  }
  return out;
}

std::vector<RooflineRow> roofline_rows(const std::vector<OperatorRow>& operators) {
  std::vector<RooflineRow> rows;
  for (const OperatorRow& op : operators) {
    if (op.flops <= 0) continue;
    RooflineRow r;
    r.name = op.name;
    r.input_shapes = op.input_shapes;
    r.cls = op.flop_class;
    r.calls = op.calls;
    r.flops = op.flops;
    r.bytes = op.flop_bytes;
    r.on_device = op.device_total_ns > 0;
    r.time_ns = r.on_device ? op.device_total_ns : op.host_total_ns;
    if (r.bytes > 0) r.intensity = double(r.flops) / double(r.bytes);
    if (r.time_ns > 0) r.achieved_flops_per_s = double(r.flops) / (double(r.time_ns) * 1e-9);
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const RooflineRow& a, const RooflineRow& b) { return a.time_ns > b.time_ns; });
  return rows;
}

}   // namespace gpuprof
