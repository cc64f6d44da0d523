// Name classifiers (names.h).
#include "gpuprof/core/names.h"

#include <climits>

namespace gpuprof {

namespace {

bool starts_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// The backends torch names its collectives' own ranges after ("<backend>:<collective>").
constexpr std::string_view kBackendPrefixes[] = {"nccl:", "gloo:", "mpi:", "ucc:", "xccl:"};

}  // namespace

bool is_step_marker_name(std::string_view name) { return starts_with(name, "ProfilerStep#"); }

int64_t step_number_from_name(std::string_view name) {
  if (!is_step_marker_name(name)) return -1;
  size_t i = sizeof("ProfilerStep#") - 1;
  if (i >= name.size()) return -1;
  int64_t n = 0;
  for (; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    const int digit = name[i] - '0';
    if (n > (INT64_MAX - digit) / 10) return -1;   // more than an int64 holds: not a step number
    n = n * 10 + digit;
  }
  return n;
}

size_t backend_collective_prefix_length(std::string_view name) {
  for (std::string_view p : kBackendPrefixes)
    if (starts_with(name, p)) return p.size();
  return 0;
}

bool is_backend_collective_name(std::string_view name) { return backend_collective_prefix_length(name) > 0; }

}  // namespace gpuprof
