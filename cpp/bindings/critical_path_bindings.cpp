// The critical path's pieces for drawing (the HTML report's timeline): per chosen step, the chain
// as merged pieces (gpuprof/analysis/critical_path.h, path_pieces).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/tables.h"
#include "gpuprof/core/trace.h"

namespace py = pybind11;
using namespace gpuprof;

void bind_critical_path(py::module_& m) {
  m.def(
      "critical_path_pieces",
      [](const Trace& t, const py::list& steps, size_t max_pieces) {
        BreakdownResult chosen;
        for (const py::handle& h : steps) {
          const py::dict s = py::reinterpret_borrow<py::dict>(h);
          StepBreakdown b;
          b.step = s["step"].cast<int64_t>();
          b.start_ns = s["start_ns"].cast<int64_t>();
          b.end_ns = s["end_ns"].cast<int64_t>();
          b.host_start_ns = s["host_start_ns"].cast<int64_t>();
          b.host_end_ns = s["host_end_ns"].cast<int64_t>();
          chosen.steps.push_back(b);
        }
        std::vector<StepCriticalPath> paths;
        {
          py::gil_scoped_release release;
          paths = critical_paths(t, link_launches(t), chosen);
        }
        py::list out;
        for (const StepCriticalPath& p : paths) {
          const PathPieces pieces = path_pieces(t, p, max_pieces);
          py::list rows;
          for (const PathPiece& g : pieces.pieces) {
            py::list r(5);
            r[0] = double(g.start_ns - p.start_ns) / 1000.0;
            r[1] = double(g.end_ns - g.start_ns) / 1000.0;
            r[2] = path_cause_key(g.cause);
            r[3] = display_name(path_piece_name(t, g));   // bounded, as the timeline's names
            r[4] = path_piece_place(t, g);
            rows.append(r);
          }
          py::dict d;
          d["step"] = p.step;
          d["pieces"] = rows;
          d["merged"] = pieces.merged;
          d["cut"] = pieces.cut;
          d["cut_us"] = double(pieces.cut_ns) / 1000.0;
          out.append(d);
        }
        return out;
      },
      py::arg("trace"), py::arg("steps"), py::arg("max_pieces") = kMaxPathPieces,
      "Each step's critical path as pieces (steps: dicts with step, start_ns, end_ns, host_start_ns, "
      "host_end_ns, as the native breakdown's steps have them): per step a dict with pieces [start_us "
      "(from the step's start), dur_us, cause, name (display_name: long names shortened), where], merged "
      "(segments folded into the one before), cut "
      "(pieces left out past max_pieces, the shortest) and cut_us.");
}
