#include "gpuprof/analysis/modules.h"

#include <algorithm>
#include <map>
#include <queue>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "run_sort.h"

namespace gpuprof {

namespace {

constexpr std::string_view kModulePrefix = "nn.Module: ";
constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function: ";

// Outer first: earlier start, then the longer, then a module call before an op of the same extent
// (a module's hooks run around its ops), then stored order. The sweep below and the building of
// rows use the same order, so a parent call is always met before its children.
struct OuterFirst {
  const Trace& t;
  const std::vector<uint8_t>& is_call;
  bool operator()(uint32_t a, uint32_t b) const {
    const Event& ea = t.events[a];
    const Event& eb = t.events[b];
    if (ea.start_ns != eb.start_ns) return ea.start_ns < eb.start_ns;
    if (ea.dur_ns != eb.dur_ns) return ea.dur_ns > eb.dur_ns;
    if (is_call[a] != is_call[b]) return is_call[a] > is_call[b];
    return a < b;
  }
};

// Host-thread events that run inside a module call when its thread is in one.
bool nests_in_modules(EventKind k) {
  return k == EventKind::HostOp || k == EventKind::UserRange || k == EventKind::Runtime || k == EventKind::Driver;
}

}  // namespace

bool parse_module_call_name(std::string_view name, std::string_view* segment, std::string_view* type) {
  if (name.size() <= kModulePrefix.size() || name.substr(0, kModulePrefix.size()) != kModulePrefix) return false;
  const std::string_view text = name.substr(kModulePrefix.size());
  // gpuprof's live form: "<segment> (<Type>)".
  const size_t open = text.rfind(" (");
  if (text.back() == ')' && open != std::string_view::npos && open + 3 < text.size()) {
    *segment = text.substr(0, open);
    *type = text.substr(open + 2, text.size() - open - 3);
    return true;
  }
  // torch.profiler's: "<Type>_<instance number>".
  *segment = text;
  *type = text;
  const size_t underscore = text.rfind('_');
  if (underscore != std::string_view::npos && underscore > 0 && underscore + 1 < text.size() &&
      std::all_of(text.begin() + underscore + 1, text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    *type = text.substr(0, underscore);
  return true;
}

namespace {

// The module view, built by the steps module_view runs in order: each step leaves its results in
// members the next ones read.
class ViewBuilder {
 public:
  ViewBuilder(const Trace& t, const LaunchLinks& links)
      : t(t),
        links(links),
        n(t.events.size()),
        names(t.strings.size()),
        is_call(n, 0),
        call_of(n, kNoIndex),
        row_of(n, kNoIndex) {}

  // 1. Module calls, each name parsed once; false when the trace has none.
  bool find_calls() {
    bool any = false;
    for (uint32_t i = 0; i < n; ++i) {
      const Event& e = t.events[i];
      if (e.kind != EventKind::PythonFunction || e.name >= names.size()) continue;
      CallName& c = names[e.name];
      if (c.known < 0) c.known = parse_module_call_name(t.name_of(e), &c.segment, &c.type) ? 1 : 0;
      if (c.known == 1) is_call[i] = 1;
      any = any || c.known == 1;
    }
    return any;
  }

  void nest_calls() {
    // 2. Per host thread, the innermost module call around each call and each host event.
    std::unordered_map<uint32_t, std::vector<uint32_t>> by_thread;
    for (uint32_t i = 0; i < n; ++i)
      if (is_call[i] || nests_in_modules(t.events[i].kind)) by_thread[t.events[i].tid].push_back(i);
    const OuterFirst outer_first{t, is_call};
    for (auto& [tid, items] : by_thread) {
      sort_runs(items, outer_first);
      std::vector<uint32_t> open;
      for (uint32_t i : items) {
        const Event& e = t.events[i];
        while (!open.empty() && t.events[open.back()].end_ns() <= e.start_ns &&
               !(t.events[open.back()].dur_ns == 0 && t.events[open.back()].start_ns == e.start_ns))
          open.pop_back();
        // A call still open but ending before this event ends only partly overlaps it.
        for (size_t k = open.size(); k-- > 0;) {
          if (t.events[open[k]].end_ns() >= e.end_ns()) {
            call_of[i] = open[k];
            break;
          }
        }
        if (is_call[i]) {
          open.push_back(i);
          calls.push_back(i);
        }
      }
    }
    std::sort(calls.begin(), calls.end(), outer_first);
  }

  void build_rows() {
    // 3. Rows: one per (parent row, segment, type); calls of one row share their caller's row.
    std::map<std::tuple<uint32_t, std::string_view, std::string_view>, uint32_t> row_by_key;
    for (uint32_t c : calls) {
      const Event& e = t.events[c];
      const CallName& name = names[e.name];
      const uint32_t parent = call_of[c] == kNoIndex ? kNoIndex : row_of[call_of[c]];
      auto [it, added] = row_by_key.try_emplace({parent, name.segment, name.type}, uint32_t(rows.size()));
      if (added) rows.push_back({name.segment, name.type, parent, 0, 0});
      Building& r = rows[it->second];
      row_of[c] = it->second;
      if (e.flags & kContextFlag) continue;   // a window's context: nests its calls, counted where owned
      ++r.calls;
      r.forward_ns += e.dur_ns;
    }

    // 4. Host events inside a call belong to its row.
    for (uint32_t i = 0; i < n; ++i)
      if (!is_call[i] && call_of[i] != kNoIndex) row_of[i] = row_of[call_of[i]];
  }

  void assign_backward() {
    // 5. Backward: an op outside every module call that is (or runs inside) a backward op belongs to
    //    the row of the forward op with the backward op's sequence number (the same forward thread
    //    where both are known; the latest such op that started before it). The outermost backward op
    //    of a nest is the one matched (autograd's evaluate_function and the node it runs share a
    //    number).
    struct Forward {
      uint64_t sequence_nr;
      int64_t start_ns;
      uint32_t thread;
      uint32_t index;
    };
    std::vector<Forward> forwards;
    std::vector<uint32_t> linked_by(n, kNoIndex);   // host op -> the op whose backward link it has
    for (uint32_t i = 0; i < n; ++i) {
      const AutogradLink l = autograd_link(t.events[i]);
      if (!l.present) continue;
      if (!l.backward) {
        forwards.push_back({l.sequence_nr, t.events[i].start_ns, l.thread, i});
        continue;
      }
      linked_by[i] = i;
      // The engine's "autograd::engine::evaluate_function: <node>" around the node's own op carries
      // no link of its own live (Kineto's traces give it the node's): it is the node's backward op.
      const uint32_t p = i < links.parent_op.size() ? links.parent_op[i] : kNoIndex;
      if (p != kNoIndex && !autograd_link(t.events[p]).present) {
        const std::string& outer = t.name_of(t.events[p]);
        const std::string& inner = t.name_of(t.events[i]);
        if (outer.size() == kEvaluateFunction.size() + inner.size() &&
            outer.compare(0, kEvaluateFunction.size(), kEvaluateFunction) == 0 &&
            outer.compare(kEvaluateFunction.size(), inner.size(), inner) == 0)
          linked_by[p] = i;
      }
    }
    std::sort(forwards.begin(), forwards.end(), [](const Forward& a, const Forward& b) {
      return a.sequence_nr != b.sequence_nr ? a.sequence_nr < b.sequence_nr : a.start_ns < b.start_ns;
    });
    auto forward_row = [&](uint32_t b) {
      const AutogradLink l = autograd_link(t.events[linked_by[b]]);
      auto it = std::lower_bound(forwards.begin(), forwards.end(), l.sequence_nr,
                                 [](const Forward& f, uint64_t s) { return f.sequence_nr < s; });
      uint32_t found = kNoIndex;
      for (; it != forwards.end() && it->sequence_nr == l.sequence_nr; ++it) {
        if (it->start_ns > t.events[b].start_ns) break;
        if (l.thread == 0 || it->thread == 0 || it->thread == l.thread) found = it->index;
      }
      // The forward op's own row: the module call it ran in (never a backward's, in turn).
      return found == kNoIndex || call_of[found] == kNoIndex ? kNoIndex : row_of[call_of[found]];
    };
    constexpr uint32_t kUnknown = kNoIndex - 1;
    std::vector<uint32_t> backward_root(n, kUnknown);   // host op -> outermost backward op around it
    std::vector<uint32_t> climb;
    auto root_of = [&](uint32_t i) {
      climb.clear();
      uint32_t j = i;
      while (j != kNoIndex && backward_root[j] == kUnknown) {
        climb.push_back(j);
        j = links.parent_op.size() > j ? links.parent_op[j] : kNoIndex;
      }
      uint32_t above = j == kNoIndex ? kNoIndex : backward_root[j];
      for (size_t k = climb.size(); k-- > 0;) {
        const uint32_t p = climb[k];
        backward_root[p] = above != kNoIndex ? above : (linked_by[p] != kNoIndex ? p : kNoIndex);
        above = backward_root[p];
      }
      return backward_root[i];
    };
    backward_ns.assign(rows.size(), 0);
    std::unordered_map<uint32_t, uint32_t> row_of_root;
    for (uint32_t i = 0; i < n; ++i) {
      if (t.events[i].kind != EventKind::HostOp || call_of[i] != kNoIndex) continue;
      const uint32_t root = root_of(i);
      if (root == kNoIndex) continue;
      auto [it, added] = row_of_root.try_emplace(root, kNoIndex);
      if (added) {
        it->second = forward_row(root);
        // Its time counts once, for the root op; unless a module call holds it (then it is inside
        // that call's own time already).
        if (it->second != kNoIndex && call_of[root] == kNoIndex && !(t.events[root].flags & kContextFlag))
          backward_ns[it->second] += t.events[root].dur_ns;
      }
      row_of[i] = it->second;
    }
  }

  void assign_launched() {
    // 6. Calls outside any module inherit their op's row; device work and synchronisations the row
    //    of the op that launched them.
    for (uint32_t i = 0; i < n; ++i) {
      const Event& e = t.events[i];
      if (row_of[i] != kNoIndex || is_call[i]) continue;
      const bool launched = e.on_device() || e.kind == EventKind::Sync || e.kind == EventKind::Runtime ||
                            e.kind == EventKind::Driver;
      if (!launched) continue;
      const uint32_t op = links.launching_op(i);
      if (op != kNoIndex && op < n) row_of[i] = row_of[op];
    }
  }

  ModuleView finish() {
    ModuleView view;
    // 7. Times per row (rows are built parents first, so a reverse walk rolls children up).
    const size_t m = rows.size();
    std::vector<int64_t> device_self(m, 0);
    for (uint32_t i = 0; i < n; ++i)
      if (row_of[i] != kNoIndex && t.events[i].on_device() && !(t.events[i].flags & kContextFlag))
        device_self[row_of[i]] += t.events[i].dur_ns;
    std::vector<int64_t> backward_total = backward_ns, device_total = device_self;
    std::vector<int64_t> descendants(m, 0);
    for (size_t r = m; r-- > 0;) {
      const uint32_t p = rows[r].parent;
      if (p == kNoIndex) continue;
      backward_total[p] += backward_total[r];
      device_total[p] += device_total[r];
      descendants[p] += descendants[r] + 1;
    }
    std::vector<int64_t> host_total(m), children_total(m, 0);
    for (size_t r = 0; r < m; ++r) host_total[r] = rows[r].forward_ns + backward_total[r];
    for (size_t r = 0; r < m; ++r)
      if (rows[r].parent != kNoIndex) children_total[rows[r].parent] += host_total[r];

    // 8. Order and names: depth first from the main root (the root with the most modules below it:
    //    the model, not a loss module called beside it), heaviest children first.
    std::vector<std::vector<uint32_t>> children(m);
    std::vector<uint32_t> roots;
    for (uint32_t r = 0; r < m; ++r) (rows[r].parent == kNoIndex ? roots : children[rows[r].parent]).push_back(r);
    auto heavier = [&](uint32_t a, uint32_t b) {
      if (host_total[a] != host_total[b]) return host_total[a] > host_total[b];
      return a < b;
    };
    std::sort(roots.begin(), roots.end(), [&](uint32_t a, uint32_t b) {
      if (descendants[a] != descendants[b]) return descendants[a] > descendants[b];
      return heavier(a, b);
    });
    std::sort(roots.begin() + 1, roots.end(), heavier);
    for (auto& c : children) std::sort(c.begin(), c.end(), heavier);

    std::vector<uint32_t> new_index(m, kNoIndex);
    std::unordered_set<std::string> used;
    view.rows.reserve(m);
    std::vector<std::pair<uint32_t, int32_t>> stack;   // (row, depth), depth first
    for (size_t k = roots.size(); k-- > 0;) stack.emplace_back(roots[k], 0);
    while (!stack.empty()) {
      const auto [r, depth] = stack.back();
      stack.pop_back();
      const Building& b = rows[r];
      ModuleRow out;
      const bool main_root = r == roots.front();
      const uint32_t parent = b.parent == kNoIndex ? kNoIndex : new_index[b.parent];
      if (main_root) out.path = "";
      else if (parent == kNoIndex || (view.rows[parent].path.empty() && view.rows[parent].parent == kNoIndex))
        out.path = std::string(b.segment);
      else out.path = view.rows[parent].path + "." + std::string(b.segment);
      // Two rows with one path (one module reached through two callers that spell it alike): the
      // first in this order keeps it, the next gets "#2", "#3"...
      if (!used.insert(out.path).second) {
        for (int k = 2;; ++k) {
          std::string alt = out.path + "#" + std::to_string(k);
          if (used.insert(alt).second) {
            out.path = std::move(alt);
            break;
          }
        }
      }
      out.type = std::string(b.type);
      out.parent = parent;
      out.depth = depth;
      out.calls = b.calls;
      out.host_total_ns = host_total[r];
      out.host_self_ns = std::max<int64_t>(host_total[r] - children_total[r], 0);
      out.device_total_ns = device_total[r];
      out.device_self_ns = device_self[r];
      new_index[r] = uint32_t(view.rows.size());
      view.rows.push_back(std::move(out));
      for (size_t k = children[r].size(); k-- > 0;) stack.emplace_back(children[r][k], depth + 1);
    }
    // A window's context events count in no row here (self_sums, total_sums): the window that
    // owns them counts them.
    for (uint32_t i = 0; i < n; ++i)
      if (row_of[i] != kNoIndex) row_of[i] = (t.events[i].flags & kContextFlag) ? kNoIndex : new_index[row_of[i]];
    view.row_of = std::move(row_of);
    return view;
  }

 private:
  struct CallName {
    int8_t known = -1;   // -1 not parsed yet, 0 not a module call, 1 a module call
    std::string_view segment, type;
  };
  struct Building {
    std::string_view segment, type;
    uint32_t parent = kNoIndex;
    int64_t calls = 0;
    int64_t forward_ns = 0;
  };

  const Trace& t;
  const LaunchLinks& links;
  const size_t n;
  std::vector<CallName> names;   // by name
  std::vector<uint8_t> is_call;
  std::vector<uint32_t> call_of;   // host event or call -> enclosing call
  std::vector<uint32_t> calls;     // outer first
  std::vector<Building> rows;      // parents first
  std::vector<uint32_t> row_of;    // event -> row
  std::vector<int64_t> backward_ns;   // row -> backward time of its own
};

}  // namespace

ModuleView module_view(const Trace& t, const LaunchLinks& links) {
  ViewBuilder b(t, links);
  if (!b.find_calls()) return ModuleView{};
  b.nest_calls();
  b.build_rows();
  b.assign_backward();
  b.assign_launched();
  return b.finish();
}

std::vector<uint32_t> module_rows_at(const Trace& t, const ModuleView& view, const std::vector<int64_t>& times) {
  std::vector<uint32_t> out(times.size(), kNoIndex);
  if (view.row_of.size() != t.events.size()) return out;
  struct Span {
    int64_t start, end;
    uint32_t row;
  };
  std::vector<Span> spans;
  for (uint32_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (view.row_of[i] != kNoIndex && (e.kind == EventKind::HostOp || e.kind == EventKind::PythonFunction))
      spans.push_back({e.start_ns, e.end_ns(), view.row_of[i]});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;   // the outer first
  });
  // Open spans, the latest started on top; those that ended are dropped when they surface.
  auto later = [&](size_t a, size_t b) { return a < b; };   // indices follow the start order
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> open(later);
  size_t next = 0;
  for (size_t k = 0; k < times.size(); ++k) {
    const int64_t ts = times[k];
    while (next < spans.size() && spans[next].start <= ts) open.push(next++);
    while (!open.empty() && spans[open.top()].end <= ts) open.pop();
    if (!open.empty()) out[k] = spans[open.top()].row;
  }
  return out;
}

}  // namespace gpuprof
