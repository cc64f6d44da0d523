// libFuzzer target for the trace importer (.ci/sanitize-import.sh builds it with
// -fsanitize=fuzzer,address,undefined). Any input must give a Trace or a TraceImportError:
// never a crash, a sanitizer report, a hang or unbounded memory. Limits are lowered so that the
// fuzzer reaches them with small inputs (the same code paths as the 64 MiB default).
#include <cstdint>
#include <string>
#include <string_view>

#include "gpuprof/kineto_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpuprof::ImportOptions opts;
  opts.max_token_bytes = 4096;
  opts.max_events = 10000;
  opts.max_bytes = 1 << 20;
  try {
    gpuprof::Trace t = gpuprof::import_kineto_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-input", opts);
    (void)t;
  } catch (const gpuprof::TraceImportError&) {
  }
  return 0;
}
