// The generated-kernel launch rows of compiled_launches.h.
#include "compiled_launches.h"

#include "kineto_event.h"

namespace gpuprof::kineto {

namespace {

// The row's texts as the rest of the trace holds strings: invalid UTF-8 bytes replaced.
std::string valid(const std::string& s) {
  std::string fixed;
  return sanitize_utf8(s, &fixed) ? fixed : s;
}

bool same(const CompiledLaunch& a, const CompiledLaunch& b) {
  return a.name == b.name && a.backend == b.backend && a.file == b.file && a.hash == b.hash && a.grid == b.grid;
}

}  // namespace

void CompiledLaunchRows::add(const std::string& name, const CompiledLaunch& args, Trace& trace) {
  // Each text with its length before it: no separator a text could also hold merges two rows.
  key_.clear();
  for (const std::string* s : {&name, &args.backend, &args.file, &args.hash, &args.grid}) {
    key_ += std::to_string(s->size());
    key_ += ':';
    key_ += *s;
  }
  auto it = row_of_.find(key_);
  if (it == row_of_.end()) {
    CompiledLaunch row;
    row.name = name;
    row.backend = valid(args.backend);
    row.file = valid(args.file);
    row.hash = valid(args.hash);
    row.grid = valid(args.grid);
    it = row_of_.emplace(key_, trace.compiled_launches.size()).first;
    trace.compiled_launches.push_back(std::move(row));
  }
  ++trace.compiled_launches[it->second].launches;
}

void merge_compiled_launches(std::vector<CompiledLaunch>& into, const std::vector<CompiledLaunch>& more) {
  // A handful of generated kernels in a trace: a linear search per row.
  const size_t first_half = into.size();
  for (const CompiledLaunch& row : more) {
    bool found = false;
    for (size_t i = 0; i < first_half && !found; ++i) {
      if (same(into[i], row)) {
        into[i].launches += row.launches;
        found = true;
      }
    }
    if (!found) into.push_back(row);
  }
}

}  // namespace gpuprof::kineto
