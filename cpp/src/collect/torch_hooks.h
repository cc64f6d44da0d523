#pragma once

namespace gpuprof::collect {

// Global RecordFunction callbacks (so DataLoader, autograd and user threads are all seen) for
// operator, backward and user scopes. Installed only for warmup and active steps.
void install_hooks(bool record_shapes);
void remove_hooks();
bool hooks_installed();
// What ATen itself says, independent of our bookkeeping (tests use it).
bool aten_has_global_callbacks();

}  // namespace gpuprof::collect
