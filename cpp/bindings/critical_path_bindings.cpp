// The critical path's pieces for drawing (the HTML report's timeline): per chosen step, the chain
// as merged pieces (gpuprof/analysis/critical_path.h, path_pieces).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "critical_path_dict.h"
#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;
using gpuprof::bindings::KeptCriticalPaths;

namespace {

StepBreakdown step_of(const py::handle& h) {
  const py::dict s = py::reinterpret_borrow<py::dict>(h);
  StepBreakdown b;
  b.step = s["step"].cast<int64_t>();
  b.start_ns = s["start_ns"].cast<int64_t>();
  b.end_ns = s["end_ns"].cast<int64_t>();
  b.host_start_ns = s["host_start_ns"].cast<int64_t>();
  b.host_end_ns = s["host_end_ns"].cast<int64_t>();
  return b;
}

// First-seen lists of strings (names, places), each string once; `key` says which string a piece
// has without making it (a name id, a stream), so each is made once.
class FirstSeen {
 public:
  template <typename Make>
  size_t position(uint64_t key, Make make) {
    const auto k = by_key_.find(key);
    if (k != by_key_.end()) return k->second;
    std::string s = make();
    const auto [it, added] = by_text_.try_emplace(std::move(s), by_text_.size());
    if (added) list.append(py::str(it->first));
    by_key_.emplace(key, it->second);
    return it->second;
  }
  py::list list;

 private:
  std::unordered_map<uint64_t, size_t> by_key_;
  std::unordered_map<std::string, size_t> by_text_;   // two keys may make the same text (shortened names)
};

py::dict pieces_dict(const Trace& t, const StepCriticalPath& p, size_t max_pieces) {
  const PathPieces pieces = path_pieces(t, p, max_pieces);
  constexpr uint64_t kGap = uint64_t(1) << 40, kDevice = uint64_t(1) << 63;
  FirstSeen names, places;
  py::str causes[kNumPathCauses];
  for (int c = 0; c < kNumPathCauses; ++c) causes[c] = py::str(path_cause_key(PathCause(c)));
  py::list rows;
  for (const PathPiece& g : pieces.pieces) {
    const bool gap = g.event == kNoIndex;
    const Event* e = gap ? nullptr : &t.events[g.event];
    const uint64_t name_key = gap ? kGap | uint64_t(g.cause) : uint64_t(e->name);
    const uint64_t place_key = gap              ? kGap
                               : e->on_device() ? kDevice | (uint64_t(uint16_t(e->device)) << 32) | e->tid
                                                : uint64_t(e->tid);
    py::list r(5);
    r[0] = double(g.start_ns - p.start_ns) / 1000.0;
    r[1] = double(g.end_ns - g.start_ns) / 1000.0;
    r[2] = causes[int(g.cause)];
    r[3] = names.position(name_key, [&] { return display_name(path_piece_name(t, g)); });   // as the timeline's
    r[4] = places.position(place_key, [&] { return path_piece_place(t, g); });
    rows.append(r);
  }
  py::dict d;
  d["pieces"] = rows;
  d["names"] = names.list;
  d["places"] = places.list;
  d["merged"] = pieces.merged;
  d["cut"] = pieces.cut;
  d["cut_us"] = double(pieces.cut_ns) / 1000.0;
  return d;
}

}   // namespace

void bind_critical_path(py::module_& m) {
  py::class_<KeptCriticalPaths>(m, "KeptCriticalPaths",
                                "The analysis pass's critical paths of the steps a report draws (gpu_tables' "
                                "critical_path_kept), for critical_path_pieces' `kept`.")
      .def_property_readonly(
          "steps",
          [](const KeptCriticalPaths& k) {
            std::vector<int64_t> steps;
            for (const StepCriticalPath& p : k.paths) steps.push_back(p.step);
            return steps;
          },
          "The steps whose paths are kept.");
  m.def(
      "critical_path_pieces",
      [](const Trace& t, const py::list& steps, size_t max_pieces, const KeptCriticalPaths* kept) {
        std::vector<const StepCriticalPath*> found;
        BreakdownResult missing;
        for (const py::handle& h : steps) {
          const StepBreakdown b = step_of(h);
          const StepCriticalPath* p = kept != nullptr ? kept->find(t, b) : nullptr;
          found.push_back(p);
          if (p == nullptr) missing.steps.push_back(b);
        }
        std::vector<StepCriticalPath> walked;
        if (!missing.steps.empty()) {
          py::gil_scoped_release release;
          walked = critical_paths(t, link_launches(t), missing);
        }
        py::list out;
        size_t next = 0;
        for (const StepCriticalPath* p : found)
          out.append(pieces_dict(t, p != nullptr ? *p : walked[next++], max_pieces));
        return out;
      },
      py::arg("trace"), py::arg("steps"), py::arg("max_pieces") = kMaxPathPieces, py::arg("kept") = nullptr,
      "Each step's critical path as pieces (steps: dicts with step, start_ns, end_ns, host_start_ns, "
      "host_end_ns, as the native breakdown's steps have them): per step a dict with pieces [start_us "
      "(from the step's start), dur_us, cause, name index, place index] into names (display_name: long "
      "names shortened) and places (first seen first), merged (segments folded into the one before), cut "
      "(pieces left out past max_pieces, the shortest) and cut_us. `kept` (gpu_tables' critical_path_kept "
      "for this trace): the steps it holds are taken from it, not walked again.");
}
