// libFuzzer target for the trace importer (.ci/sanitize-import.sh builds it with
// -fsanitize=fuzzer,address,undefined). Any input must give a Trace or a TraceImportError:
// never a crash, a sanitizer report, a hang or unbounded memory. Limits are lowered so that the
// fuzzer reaches them with small inputs (the same code paths as the 64 MiB default).
#include <cstdint>
#include <string>
#include <string_view>

#include "../cpp/trace_dump.h"
#include "gpuprof/io/kineto_import.h"

#include <cstdio>
#include <cstdlib>

// Besides: the same input read by one thread and by two (ImportOptions::split_min_bytes, forced
// on whatever the size) must give the same import, to the byte, or the same error: a difference
// aborts, and the fuzzer keeps the input.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gpuprof::ImportOptions opts;
  opts.max_token_bytes = 4096;
  opts.max_events = 10000;
  opts.max_bytes = 1 << 20;
  try {
    gpuprof::Trace t = gpuprof::import_kineto_json(text, "fuzz-input", opts);
    (void)t;
  } catch (const gpuprof::TraceImportError&) {
  }
  gpuprof::ImportOptions one, two;
  one.max_token_bytes = two.max_token_bytes = 4096;
  one.split_min_bytes = 0;
  two.split_min_bytes = 1;
  // The windowed reads (ImportOptions::scan_steps, windowed; spill_windows): a scan, a window and
  // the spill of the same input into two windows (written to /dev/null) give a Trace, stats or a
  // TraceImportError, never a crash.
  gpuprof::ImportOptions scan = opts, window = opts;
  scan.scan_steps = true;
  window.windowed = true;
  window.keep_from_ns = 1000;
  window.own_from_ns = 2000;
  window.own_to_ns = 3000000;
  window.keep_to_ns = 4000000;
  for (const gpuprof::ImportOptions* o : {&scan, &window}) {
    try {
      gpuprof::import_kineto_json(text, "fuzz-input", *o);
    } catch (const gpuprof::TraceImportError&) {
    }
  }
  try {
    gpuprof::spill_windows_json(text, "fuzz-input", 1000,
                                {{INT64_MIN, 2000000, "/dev/null"}, {1000000, INT64_MAX, "/dev/null"}}, opts);
  } catch (const gpuprof::TraceImportError&) {
  }
  const std::string a = gpuprof::test_support::dump_import(text, one);
  const std::string b = gpuprof::test_support::dump_import(text, two);
  if (a != b) {
    std::fprintf(stderr, "one thread:\n%s\ntwo threads:\n%s\n", a.c_str(), b.c_str());
    std::abort();
  }
  return 0;
}
