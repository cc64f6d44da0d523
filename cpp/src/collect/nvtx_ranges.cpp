// NVTX3 ranges for steps and gpuprof.range, so Nsight Systems shows them on the same timeline.
// NVTX3 is header-only: with no tool attached, the first call finds none and every later call is
// an indirect call to an empty function.
#include <nvtx3/nvToolsExt.h>

#include "gpuprof/gpu_collect.h"

namespace gpuprof::collect {

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace gpuprof::collect
