// Run-time loading of libcupti and libcuda (dlopen + dlsym): gpuprof never links either, so it
// imports on machines without a GPU. Each table is filled once; a missing library or symbol is a
// readable reason, never a crash.
#pragma once

#include <cuda.h>
#include <cupti.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpuprof/core/trace.h"

namespace gpuprof::collect::cupti {

struct CudaDriver {
  bool ok = false;
  std::string error;   // why not ok
  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  int device_count = 0;

  // DeviceProps of CUDA device `ordinal` (false when the driver cannot say).
  bool properties(int ordinal, DeviceProps& out) const;
  // "0000:3B:00.0", or "" when unknown.
  std::string pci_bus_id(int ordinal) const;
};

// Loads libcuda.so.1 and calls cuInit(0) once.
const CudaDriver& driver();

struct CuptiApi {
  bool ok = false;
  std::string error;
  std::string path;             // the file loaded (from dladdr when another library loaded it)
  bool already_loaded = false;  // found in the process (torch's), not loaded by gpuprof
  std::string note;             // e.g. $GPUPROF_CUPTI ignored because another CUPTI is loaded
  uint32_t version = 0;
  CUptiResult (*cuptiGetVersion)(uint32_t*) = nullptr;
  CUptiResult (*cuptiGetResultString)(CUptiResult, const char**) = nullptr;
  CUptiResult (*cuptiSubscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*cuptiUnsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*cuptiGetCallbackName)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  CUptiResult (*cuptiActivityEnable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*cuptiActivityDisable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*cuptiActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                                CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*cuptiActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc) = nullptr;
  CUptiResult (*cuptiActivityGetNextRecord)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*cuptiActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*cuptiActivityFlushAll)(uint32_t) = nullptr;
  CUptiResult (*cuptiActivityPushExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
  CUptiResult (*cuptiActivityPopExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;
  // Optional (CUPTI 12.5+; nullptr when absent): per-API record switches.
  CUptiResult (*cuptiActivityEnableRuntimeApi)(CUpti_CallbackId, uint8_t) = nullptr;
  CUptiResult (*cuptiActivityEnableDriverApi)(CUpti_CallbackId, uint8_t) = nullptr;

  // "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (...)" for messages.
  std::string describe(CUptiResult r) const;
};

// A library some other code of this process already loaded: the first of `sonames` that
// dlopen(RTLD_NOLOAD) finds, with the file it was loaded from (dladdr on `symbol`: torch's wheel
// loads libcupti by a path, and the soname alone names no file). handle == nullptr when none is.
struct LoadedLibrary {
  void* handle = nullptr;
  std::string soname;
  std::string path;
};
LoadedLibrary find_loaded(const std::vector<std::string>& sonames, const char* symbol);
// The libcupti sonames probed for an already-loaded CUPTI (torch built for CUDA 13, 12 or 11).
const std::vector<std::string>& cupti_sonames();

// Candidate paths for libcupti when none is loaded yet, in search order: $GPUPROF_CUPTI (a file or
// a folder), `extra_dirs`, $CUDA_HOME/extras/CUPTI/lib64, /usr/local/cuda/extras/
// CUPTI/lib64, /usr/local/cuda/lib64, then the loader's own path. Exposed for tests.
std::vector<std::string> cupti_candidates(const std::vector<std::string>& extra_dirs);

// Loads libcupti once (later calls return the first result). One CUPTI per process: a libcupti
// already loaded (torch's, whatever its version) is the only one used, never a second beside it.
// Only a CUPTI of the major version gpuprof was compiled against is accepted: activity record
// layouts change between majors.
const CuptiApi& cupti(const std::vector<std::string>& extra_dirs);

}  // namespace gpuprof::collect::cupti
