// The importer's cache of interned texts: what text an event's name (or shapes) slot last held
// and its id in the Trace's StringTable, so that an event whose name the table already has is
// answered by one comparison with the table's text, not a hash of the whole name and a lookup
// (kernel names run to hundreds of bytes, and a trace repeats a few thousand names millions of
// times). Private to the importer (cpp/src/io); answers exactly what StringTable::find would.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gpuprof/core/trace.h"
#include "kineto_event.h"

namespace gpuprof::kineto {

class InternCache {
 public:
  static constexpr size_t kSlots = 4096;

  // The slot a text belongs in: its length and up to three words of it (its first, middle and
  // last eight bytes), mixed; texts that differ only elsewhere share a slot and take turns.
  static size_t slot(std::string_view s) {
    constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
    const size_t n = s.size();
    const char* const p = s.data();
    uint64_t h = n * kMul;
    if (n >= 8) {
      h = (h ^ word<uint64_t>(p)) * kMul;
      h = (h ^ word<uint64_t>(p + n - 8)) * kMul;
      if (n >= 16) h = (h ^ word<uint64_t>(p + n / 2 - 4)) * kMul;
    } else if (n >= 4) {
      h = (h ^ (word<uint32_t>(p) | uint64_t(word<uint32_t>(p + n - 4)) << 32)) * kMul;
    } else {
      for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * kMul;
    }
    return static_cast<size_t>(h >> 52) & (kSlots - 1);
  }

  // The id `table` has for `s`, when the slot holds it; kNoIndex otherwise.
  uint32_t find(size_t slot, std::string_view s, const StringTable& table) const {
    const uint32_t id = ids_[slot];
    return id != kNoIndex && std::string_view(table.at(id)) == s ? id : kNoIndex;
  }
  void put(size_t slot, uint32_t id) { ids_[slot] = id; }

  // The id of `text` in `table`, interned if new; text with invalid UTF-8 is interned with each
  // invalid byte replaced (sanitize_utf8), counted in `invalid_utf8`, and not cached.
  uint32_t intern(const std::string& text, StringTable& table, uint64_t* invalid_utf8) {
    const size_t at = slot(text);
    uint32_t id = find(at, text, table);
    if (id != kNoIndex) return id;
    id = table.find(text);
    if (id == kNoIndex) {
      std::string fixed;
      if (sanitize_utf8(text, &fixed)) {
        ++*invalid_utf8;
        return table.intern(fixed);
      }
      id = table.intern(text);
    }
    put(at, id);
    return id;
  }

 private:
  template <class W>
  static W word(const char* p) {
    W w;
    std::memcpy(&w, p, sizeof(W));
    return w;
  }
  std::vector<uint32_t> ids_ = std::vector<uint32_t>(kSlots, kNoIndex);
};

}  // namespace gpuprof::kineto
