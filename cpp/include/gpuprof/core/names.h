// Name classifiers every stage reads: what an event's name alone says it is. The importer needs
// them while reading (a step marker, a backend's collective range), so they sit below it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gpuprof {

bool is_step_marker_name(std::string_view name);   // ProfilerStep#N
// -1 when the name carries no step number.
int64_t step_number_from_name(std::string_view name);

// A backend's own range of a collective: `nccl:all_reduce`, `gloo:broadcast`, `mpi:...`, `ucc:...`,
// `xccl:...` (the plugin's communication ops; torch opens one per call, with its input tensors).
bool is_backend_collective_name(std::string_view name);
// The length of that backend prefix (`nccl:`: 5), 0 when the name has none.
size_t backend_collective_prefix_length(std::string_view name);

}  // namespace gpuprof
