#include "gpuprof/core/event.h"

#include <array>
#include <cctype>

namespace gpuprof {
namespace {

constexpr std::array<const char*, 15> kEventKinds = {
    "host_op", "user_range", "step", "python_function", "runtime",  "driver",      "kernel", "memcpy",
    "memset",  "sync",       "nvtx", "gpu_user_range",  "overhead", "input_stage", "other"};
constexpr std::array<const char*, 6> kCopyKinds = {"unknown", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"};
constexpr std::array<const char*, 6> kMemoryKinds = {"unknown", "pageable", "pinned",
                                                     "device",  "managed",  "array"};

bool equal_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

template <typename Enum, size_t N>
bool parse(const std::array<const char*, N>& names, std::string_view s, Enum* out) {
  for (size_t i = 0; i < N; ++i)
    if (equal_ci(s, names[i])) {
      *out = static_cast<Enum>(i);
      return true;
    }
  return false;
}

}  // namespace

const char* event_kind_key(EventKind k) { return kEventKinds[static_cast<size_t>(k)]; }
bool parse_event_kind(std::string_view s, EventKind* out) { return parse(kEventKinds, s, out); }
const char* copy_kind_key(CopyKind k) { return kCopyKinds[static_cast<size_t>(k)]; }
bool parse_copy_kind(std::string_view s, CopyKind* out) {
  if (s.empty()) {
    *out = CopyKind::Unknown;
    return true;
  }
  return parse(kCopyKinds, s, out);
}
const char* memory_kind_key(MemoryKind k) { return kMemoryKinds[static_cast<size_t>(k)]; }
bool parse_memory_kind(std::string_view s, MemoryKind* out) {
  if (s.empty()) {
    *out = MemoryKind::Unknown;
    return true;
  }
  return parse(kMemoryKinds, s, out);
}

}  // namespace gpuprof
