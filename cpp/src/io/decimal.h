// Number parsing for the importer: a JSON number's text to an exact integer (timestamps scaled to
// nanoseconds), to a double, and the trailing number of a thread label. Numbers reach the importer
// as their raw text (json_sax.h) so that timestamps are converted exactly: a double holds 1.6e15 us
// only to a quarter of a microsecond. Inline, in a header: the handler (kineto_handler.cpp) calls
// these for every number of every event, and the fast path must be inlined there.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>

#include "text_stream.h"

namespace gpuprof::io {

// Eight ASCII digits at once (SWAR): true and their value when all eight bytes are '0'..'9'.
inline bool eight_digits(const char* p, uint64_t* value) {
  uint64_t w;
  std::memcpy(&w, p, 8);   // little-endian: the first digit in the low byte
  if (nondigit_flags(w) != 0) return false;
  w -= 0x3030303030303030ULL;
  w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFULL;             // pairs: 2-digit values
  w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFULL;           // quads
  *value = (w * 10000 + (w >> 32)) & 0xFFFFFFFFULL;            // the eight digits
  return true;
}

// scaled_decimal's general case (any sign, exponent, rounding): out of line, below.
bool scaled_decimal_general(std::string_view text, int scale_exp, int64_t* out);

// Exact decimal-to-integer conversion (gpuprof::parse_scaled_decimal in kineto_import.h documents
// it): `text` is a JSON number, the result its value times 10^scale_exp, rounded half away from zero.
// Inline for what Kineto writes, every ts and dur: up to 16 integer digits (below 9e15, so that the
// scaled value stays below 9e18 < INT64_MAX) and at most scale_exp (<= 3) decimals, read as whole
// groups of eight digits and the rest digit by digit; anything else in scaled_decimal_general.
__attribute__((always_inline)) inline bool scaled_decimal(std::string_view text, int scale_exp, int64_t* out) {
  static constexpr int64_t kScale[] = {1, 10, 100, 1000};
  const char* const p = text.data();
  const size_t n = text.size();
  if (scale_exp >= 0 && scale_exp <= 3) {
    size_t i = 0;
    uint64_t v = 0, eight = 0;
    if (n >= 8 && eight_digits(p, &eight)) {   // timestamps: 16 digits
      v = eight;
      i = 8;
      if (n >= 16 && eight_digits(p + 8, &eight)) {
        v = v * 100000000 + eight;
        i = 16;
      }
    }
    for (; i < n && i < 17; ++i) {
      const unsigned d = static_cast<unsigned char>(p[i]) - unsigned('0');
      if (d > 9) break;
      v = v * 10 + d;
    }
    if (i > 0 && i <= 16 && v < 9000000000000000ULL) {
      const size_t rest = n - i;   // "" or "." and 1..scale_exp digits
      if (rest == 0) {
        *out = static_cast<int64_t>(v) * kScale[scale_exp];
        return true;
      }
      if (p[i] == '.' && rest >= 2 && rest - 1 <= size_t(scale_exp)) {
        for (++i; i < n; ++i) {
          const unsigned d = static_cast<unsigned char>(p[i]) - unsigned('0');
          if (d > 9) break;
          v = v * 10 + d;
        }
        if (i == n) {   // < 9e15 * 1e3: fits in int64
          *out = static_cast<int64_t>(v) * kScale[scale_exp - int(rest - 1)];
          return true;
        }
      }
    }
  }
  return scaled_decimal_general(text, scale_exp, out);
}

[[gnu::noinline]] inline bool scaled_decimal_general(std::string_view text, int scale_exp, int64_t* out) {
  using u128 = unsigned __int128;
  size_t i = 0;
  const size_t n = text.size();
  bool neg = false;
  if (i < n && (text[i] == '-' || text[i] == '+')) neg = text[i++] == '-';
  u128 mant = 0;
  int digits = 0;          // significant digits kept in mant
  int exp10 = 0;           // value = mant * 10^exp10
  bool any_digit = false;
  bool round_up = false;   // first dropped digit >= 5
  bool dropped = false;
  for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
    any_digit = true;
    if (digits < 36) {
      mant = mant * 10 + unsigned(text[i] - '0');
      if (mant != 0) ++digits;
    } else {
      ++exp10;   // integer digits past 36 only scale the value (it then overflows int64 anyway)
    }
  }
  if (i < n && text[i] == '.') {
    ++i;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i) {
      any_digit = true;
      if (digits < 36) {
        mant = mant * 10 + unsigned(text[i] - '0');
        if (mant != 0) ++digits;
        --exp10;
      } else if (!dropped) {
        dropped = true;
        round_up = text[i] >= '5';
      }
    }
  }
  if (!any_digit) return false;
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < n && (text[i] == '-' || text[i] == '+')) eneg = text[i++] == '-';
    if (i >= n || text[i] < '0' || text[i] > '9') return false;
    int e = 0;
    for (; i < n && text[i] >= '0' && text[i] <= '9'; ++i)
      if (e < 100000) e = e * 10 + (text[i] - '0');
    exp10 += eneg ? -e : e;
  }
  if (i != n) return false;
  if (round_up) ++mant;
  exp10 += scale_exp;
  const u128 limit = neg ? u128(INT64_MAX) + 1 : u128(INT64_MAX);
  if (mant == 0) {
    *out = 0;
    return true;
  }
  if (exp10 >= 0) {
    for (int k = 0; k < exp10; ++k) {
      if (mant > limit / 10) return false;
      mant *= 10;
    }
  } else {
    if (exp10 < -38) {
      mant = 0;
    } else {
      u128 p = 1;
      for (int k = 0; k < -exp10; ++k) p *= 10;
      const u128 q = mant / p, r = mant % p;
      mant = q + (2 * r >= p ? 1 : 0);   // half away from zero (sign applied below)
    }
  }
  if (mant > limit) return false;
  *out = neg ? static_cast<int64_t>(-static_cast<__int128>(mant)) : static_cast<int64_t>(mant);
  return true;
}

// A JSON integer's text to its value (scaled_decimal's with no scaling). Most of an event's numbers
// are short integers (pids, ids, sizes): up to 18 digits, optionally negative, are read in one
// tight loop here (no 18-digit value overflows); anything else (a fraction, an exponent, a longer
// text) goes through scaled_decimal's general case.
inline bool parse_int(std::string_view s, int64_t* out) {
  const size_t n = s.size();
  if (n >= 1 && n <= 18) {
    const char* const p = s.data();
    const bool neg = p[0] == '-';
    size_t i = neg ? 1 : 0;
    uint64_t v = 0;
    for (; i < n; ++i) {
      const unsigned d = static_cast<unsigned char>(p[i]) - unsigned('0');
      if (d > 9) break;
      v = v * 10 + d;
    }
    if (i == n && n > (neg ? 1u : 0u)) {
      *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
      return true;
    }
  }
  return scaled_decimal_general(s, 0, out);
}

// A JSON number's text to the nearest double. Kineto's doubles ("blocks per SM": 1.2, "est.
// achieved occupancy %": 50) are short decimals: up to 15 digits and no exponent, read here as an
// integer that a double holds exactly and one division (or multiplication) by a power of ten that
// it holds exactly, which IEEE arithmetic rounds correctly (Clinger's fast path): the double
// from_chars gives, in a tenth of its instructions. Any other text goes to from_chars.
inline bool parse_double(std::string_view s, double* out) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  {
    const size_t n = s.size();
    const bool neg = n > 0 && s[0] == '-';
    size_t i = neg ? 1 : 0;
    uint64_t m = 0;
    int digits = 0, frac = -1;   // frac: digits after the point, -1 before it
    for (; i < n; ++i) {
      const char c = s[i];
      if (c >= '0' && c <= '9') {
        m = m * 10 + uint64_t(c - '0');
        ++digits;
        if (frac >= 0) ++frac;
      } else if (c == '.' && frac < 0) {
        frac = 0;
      } else {
        break;
      }
    }
    if (i == n && digits > 0 && digits <= 15 && frac != 0) {   // below 1e15 < 2^53: exact
      double v = static_cast<double>(m);
      if (frac > 0) v /= kPow10[frac];
      *out = neg ? -v : v;
      return true;
    }
  }
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Trailing digits of a tid label ("stream 7" -> 7, "25738" -> 25738); -1 when there are none.
inline int64_t trailing_number(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && (s[e - 1] == ' ')) --e;
  size_t b = e;
  while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') --b;
  if (b == e || e - b > 18) return -1;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) v = v * 10 + (s[i] - '0');
  return v;
}

}  // namespace gpuprof::io
