#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpuprof::collect {

// Global RecordFunction callbacks (so DataLoader, autograd and user threads are all seen) for
// operator, backward and user scopes. Installed only for warmup and active steps. autograd_links:
// each op also records its autograd link (sequence number and forward thread, event.h), which the
// module view needs to attribute backward ops; read on exit, so the enter path is the same.
// capture_ops: the ops (aten names without `aten::`) whose inputs are captured for their FLOPs, the
// FLOP rules' matrix class as the caller reads it from the analysis (empty: none, as for the
// overhead bench's comparison).
void install_hooks(bool record_shapes, bool autograd_links, const std::vector<std::string>& capture_ops);
void remove_hooks();
bool hooks_installed();
// FLOPs: the matrix-class ops' input capture is registered (it is while the hooks are installed,
// unless the dispatcher refused it).
bool flop_capture_installed();
// Callbacks that do nothing, for the overhead bench: LibTorch's own cost of running any callback.
void install_idle_hooks(bool needs_inputs);
void remove_idle_hooks();
// What ATen itself says, independent of our bookkeeping (tests use it).
bool aten_has_global_callbacks();

// Allocator levels: a memory reporter on the calling thread's debug-info stack (autograd threads
// inherit it) records every allocation and free torch's CUDA caching allocator reports and, with
// `host`, the CPU allocator's too (each with the block's address). Returns why it could not be
// installed, or "" when it is. remove() returns false where it could only be switched off (another
// profiler state was pushed above it, or it is called from another thread).
std::string install_memory_reporter(bool host);
bool remove_memory_reporter();
bool memory_reporter_installed();
// What an allocator calls (c10::reportMemoryUsageToProfiler), for tests on machines without CUDA.
void report_memory_usage(int64_t alloc_size, int64_t total_allocated, int64_t total_reserved,
                         const std::string& device, uint64_t addr);
// c10::memoryProfilingEnabled() on this thread: whether the CPU allocator reports now.
bool memory_profiling_enabled();

}  // namespace gpuprof::collect
