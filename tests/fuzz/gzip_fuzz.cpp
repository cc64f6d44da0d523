// libFuzzer target for the importer's gzip reading (.ci/sanitize-import.sh builds it with
// -fsanitize=fuzzer,address,undefined): the input is a .json.gz file's bytes (inputs not starting
// with gzip's magic bytes are left to import_fuzz.cpp). Any of them must give a Trace or a
// TraceImportError, never a crash, a sanitizer report, a hang or unbounded memory, through every
// way a gzip file is read: the gzip framing (headers with every optional field, members back to
// back, trailers), each deflate decoder the build has (ISA-L's igzip where found, and zlib), the
// two-thread read (a second stream inflating from the start and cutting at a middle boundary) and
// the windowed reads' spill.
//
// Besides, the same file must import the same way whatever reads it: one thread or two (to the
// byte, errors included), and zlib or igzip (the same Trace; the same refusal or acceptance, the
// error texts being each decoder's own). A difference aborts, and the fuzzer keeps the input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../cpp/trace_dump.h"
#include "gpuprof/io/kineto_import.h"
#include "windowed_reads.h"

namespace {

// The input as a file (the gzip path of the importer reads files): an in-memory file, named by
// its /proc/self/fd path; created once and rewritten for each input.
std::string as_file(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("gpuprof-gzip-fuzz", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("gzip_fuzz: cannot write the input to a memory file");
    std::abort();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

bool refused(const std::string& dump) { return dump.rfind("error ", 0) == 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) return -1;   // not gzip: not this target's
  const std::string path = as_file(data, size);
  gpuprof::ImportOptions one, two;
  one.max_token_bytes = two.max_token_bytes = 4096;
  one.split_min_bytes = 0;
  two.split_min_bytes = 1;   // the two-thread read of a gzip file, forced on any size and CPUs
  two.gzip_split_cpus = 1;
  two.cpus = 2;
  const std::string first = gpuprof::test_support::dump_import_file(path, one);
  const std::string split = gpuprof::test_support::dump_import_file(path, two);
  if (first != split) {
    std::fprintf(stderr, "one thread:\n%s\ntwo threads:\n%s\n", first.c_str(), split.c_str());
    std::abort();
  }
  // The other decoder (zlib when the build has ISA-L; zlib again otherwise).
  setenv("GPUPROF_INFLATER", "zlib", 1);
  const std::string zlib = gpuprof::test_support::dump_import_file(path, one);
  unsetenv("GPUPROF_INFLATER");
  if (refused(first) != refused(zlib) || (!refused(first) && first != zlib)) {
    std::fprintf(stderr, "default decoder:\n%s\nzlib:\n%s\n", first.c_str(), zlib.c_str());
    std::abort();
  }
  gpuprof::fuzz::windowed_reads(
      one, [&](const gpuprof::ImportOptions& o) { gpuprof::import_kineto_trace(path, o); },
      [&](const std::vector<gpuprof::SpillWindow>& w) { gpuprof::spill_windows(path, 1000, w, one); });
  return 0;
}
