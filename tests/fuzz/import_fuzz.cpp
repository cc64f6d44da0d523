// libFuzzer target for the trace importer (.ci/sanitize-import.sh builds it with
// -fsanitize=fuzzer,address,undefined). Any input must give a Trace or a TraceImportError:
// never a crash, a sanitizer report, a hang or unbounded memory. Limits are lowered so that the
// fuzzer reaches them with small inputs (the same code paths as the 64 MiB default).
#include <cstdint>
#include <string>
#include <string_view>

#include "../cpp/trace_dump.h"
#include "gpuprof/io/kineto_import.h"
#include "windowed_reads.h"

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
  gpuprof::fuzz::windowed_reads(
      opts, [&](const gpuprof::ImportOptions& o) { gpuprof::import_kineto_json(text, "fuzz-input", o); },
      [&](const std::vector<gpuprof::SpillWindow>& w) {
        gpuprof::spill_windows_json(text, "fuzz-input", 1000, w, opts);
      });
  const std::string a = gpuprof::test_support::dump_import(text, one);
  const std::string b = gpuprof::test_support::dump_import(text, two);
  if (a != b) {
    std::fprintf(stderr, "one thread:\n%s\ntwo threads:\n%s\n", a.c_str(), b.c_str());
    std::abort();
  }
  return 0;
}
