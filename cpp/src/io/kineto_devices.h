// The trace's top-level lists beside traceEvents: a deviceProperties entry (Kineto's) and a
// gpuprofGpuSamples entry (chrome_export.cpp writes them), number by number as the SAX handler
// (kineto_handler.cpp) reads them. Private to the importer (cpp/src/io).
#pragma once
#include <string_view>

#include "gpuprof/core/trace.h"

namespace gpuprof::kineto {

// One numeric property of a device (its key as Kineto writes it: "totalGlobalMem", "numSms" ...);
// unknown keys, and text that is not an integer, change nothing.
void set_device_number(DeviceProps& d, std::string_view key, std::string_view number);

// One numeric field of a device sample; unknown keys and values out of range are left at -1, "not
// reported".
void set_sample_number(GpuSample& s, std::string_view key, std::string_view number);

}  // namespace gpuprof::kineto
