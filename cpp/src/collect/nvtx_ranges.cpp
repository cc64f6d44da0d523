// NVTX3 ranges for steps and gpuprof.range, so Nsight Systems shows them on the same timeline.
// They live in gpuprof's own NVTX domain ("gpuprof"): Nsight Systems lists them under it, and
// gpuprof's CUPTI marker decoder recognises and leaves them out (they are already StepMarker and
// UserRange events; the user's own NVTX ranges, in other domains, become Nvtx events).
// NVTX3 is header-only: with no tool attached, the first call finds none and every later call is
// an indirect call to an empty function.
#include <nvtx3/nvToolsExt.h>

#include "gpuprof/collect/gpu_collect.h"

namespace gpuprof::collect {
namespace {
nvtxDomainHandle_t domain() {
  // Created at the first range, not at load: importing gpuprof makes no NVTX call (the NVTX tool
  // is looked up at the first one).
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("gpuprof");   // kOwnNvtxDomain
  return d;
}
}  // namespace

void nvtx_push(const char* name) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &a);
}
void nvtx_pop() { nvtxDomainRangePop(domain()); }

}  // namespace gpuprof::collect
