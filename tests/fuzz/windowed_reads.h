// The windowed reads (ImportOptions::scan_steps, windowed; spill_windows) each fuzz target puts its
// input through: a scan, one window, and the spill into two windows written to /dev/null must give
// a Trace, stats or a TraceImportError, never a crash.
#pragma once

#include <cstdint>
#include <vector>

#include "gpuprof/io/kineto_import.h"

namespace gpuprof::fuzz {

// `import(options)` imports the input with those options; `spill(windows)` spills it into them.
template <class Import, class Spill>
void windowed_reads(const ImportOptions& base, Import import, Spill spill) {
  ImportOptions scan = base, window = base;
  scan.scan_steps = true;
  window.windowed = true;
  window.keep_from_ns = 1000;
  window.own_from_ns = 2000;
  window.own_to_ns = 3000000;
  window.keep_to_ns = 4000000;
  for (const ImportOptions* o : {&scan, &window}) {
    try {
      import(*o);
    } catch (const TraceImportError&) {
    }
  }
  try {
    spill(std::vector<SpillWindow>{{INT64_MIN, 2000000, "/dev/null"}, {1000000, INT64_MAX, "/dev/null"}});
  } catch (const TraceImportError&) {
  }
}

}  // namespace gpuprof::fuzz
