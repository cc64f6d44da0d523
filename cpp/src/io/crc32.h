// The CRC-32 that checks each gzip member's text (the inflating thread's check_member_trailer).
// zlib's crc32_z reads about 2.3 GB/s here: on a 53.7 MB trace that is 23 ms, more than the
// inflating itself. gzip_crc32 gives the same values (zlib's convention: pass 0, then the previous
// result) several times faster where the CPU multiplies without carries (x86-64 PCLMULQDQ, chosen
// at run time), and is zlib's crc32_z elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpuprof::io {

uint32_t gzip_crc32(uint32_t crc, const unsigned char* p, size_t n);

// Whether gzip_crc32 uses the folding path on this CPU (the tests say which path they checked).
bool gzip_crc32_folds();

}  // namespace gpuprof::io
