// Trace::compiled_launches as the importer fills it: one row per distinct generated kernel and
// launch args, its launches counted (gpuprof/core/trace.h, CompiledLaunch). Private to cpp/src/io.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof::kineto {

class CompiledLaunchRows {
 public:
  // One launch of kernel `name` (the event's name, already valid UTF-8) with the args as read:
  // counted in its row, which is made, with its texts made valid UTF-8, on its first launch.
  void add(const std::string& name, const CompiledLaunch& args, Trace& trace);

 private:
  std::string key_;   // name and args joined; kept between calls for its capacity
  std::unordered_map<std::string, size_t> row_of_;   // key -> index in trace.compiled_launches
};

// A split import's second half's rows into the first half's: a row already there gains the
// second half's launches, a new one is appended (the first-seen order one pass gives).
void merge_compiled_launches(std::vector<CompiledLaunch>& into, const std::vector<CompiledLaunch>& more);

}  // namespace gpuprof::kineto
