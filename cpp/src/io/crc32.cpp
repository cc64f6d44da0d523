// CRC-32 of gzip members (crc32.h). On x86-64 with carry-less multiplication the bulk of the text
// is folded 64 bytes at a time (the polynomial-folding method Intel published for PCLMULQDQ); the
// constants below are x^k mod P(x) for the bit-reflected gzip polynomial P (0x104C11DB7), and the
// last step is a Barrett reduction. What is left over (less than 16 bytes, or all of a short text)
// goes to zlib's crc32_z, which also serves every CPU without PCLMULQDQ.
#include "crc32.h"

#include <zlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GPUPROF_CRC_FOLDING 1
#endif

namespace gpuprof::io {

#if defined(GPUPROF_CRC_FOLDING)
namespace {

#define GPUPROF_FOLDING_TARGET __attribute__((target("pclmul,sse4.1")))

GPUPROF_FOLDING_TARGET inline __m128i load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// x * (x^(k+32) mod P), for the two halves of a 128-bit lane, k the distance folded over.
GPUPROF_FOLDING_TARGET inline __m128i fold16(__m128i x, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

// Folds `n` bytes (a multiple of 16, at least 64) into the CRC register `c` (zlib's internal form:
// the complement of the running CRC). Returns the register after them.
GPUPROF_FOLDING_TARGET uint32_t fold(uint32_t c, const unsigned char* p, size_t n) {
  const __m128i k_512 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);   // four lanes ahead
  const __m128i k_128 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);   // one lane ahead

  __m128i a = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(c)));
  __m128i b = load(p + 16), d = load(p + 32), e = load(p + 48);
  p += 64;
  n -= 64;
  while (n >= 64) {
    a = _mm_xor_si128(fold16(a, k_512), load(p));
    b = _mm_xor_si128(fold16(b, k_512), load(p + 16));
    d = _mm_xor_si128(fold16(d, k_512), load(p + 32));
    e = _mm_xor_si128(fold16(e, k_512), load(p + 48));
    p += 64;
    n -= 64;
  }
  // Four lanes into one, then the remaining whole lanes.
  a = _mm_xor_si128(fold16(a, k_128), b);
  a = _mm_xor_si128(fold16(a, k_128), d);
  a = _mm_xor_si128(fold16(a, k_128), e);
  while (n >= 16) {
    a = _mm_xor_si128(fold16(a, k_128), load(p));
    p += 16;
    n -= 16;
  }
  // 128 bits to 64, then to 32 (x^64 mod P, then Barrett with mu = x^64 / P).
  const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
  __m128i t = _mm_clmulepi64_si128(a, k_128, 0x10);
  a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
  t = _mm_srli_si128(a, 4);
  a = _mm_clmulepi64_si128(_mm_and_si128(a, low32), _mm_set_epi64x(0, 0x0163cd6124LL), 0x00);
  a = _mm_xor_si128(a, t);
  const __m128i poly_mu = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
  t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), poly_mu, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), poly_mu, 0x00);
  a = _mm_xor_si128(a, t);
  return static_cast<uint32_t>(_mm_extract_epi32(a, 1));
}

bool cpu_folds() {
  static const bool ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return ok;
}

}  // namespace
#endif

uint32_t gzip_crc32(uint32_t crc, const unsigned char* p, size_t n) {
#if defined(GPUPROF_CRC_FOLDING)
  if (n >= 64 && cpu_folds()) {
    const size_t bulk = n & ~size_t(15);
    crc = ~fold(~crc, p, bulk);
    p += bulk;
    n -= bulk;
  }
#endif
  return static_cast<uint32_t>(crc32_z(crc, p, n));
}

bool gzip_crc32_folds() {
#if defined(GPUPROF_CRC_FOLDING)
  return cpu_folds();
#else
  return false;
#endif
}

}  // namespace gpuprof::io
