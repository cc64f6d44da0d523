// The Kineto vocabulary's copy names: direction and memory kinds read from a copy's or a set's name.
// Out of line (kineto_vocabulary.h has the per-key lookups): the handler parses each distinct name
// once and keeps the answer.
#include "kineto_vocabulary.h"

#include <utility>

namespace gpuprof::kineto {

namespace {

CopyKind copy_kind_from(std::string_view s) {
  static const std::pair<const char*, CopyKind> kinds[] = {{"HtoD", CopyKind::HtoD},
                                                           {"DtoH", CopyKind::DtoH},
                                                           {"DtoD", CopyKind::DtoD},
                                                           {"HtoH", CopyKind::HtoH},
                                                           {"PtoP", CopyKind::PtoP}};
  for (const auto& [text, kind] : kinds)
    if (s.find(text) != std::string_view::npos) return kind;
  return CopyKind::Unknown;
}

}  // namespace

MemoryKind memory_kind_from(std::string_view s) {
  static const std::pair<const char*, MemoryKind> kinds[] = {{"Pageable", MemoryKind::Pageable},
                                                             {"Pinned", MemoryKind::Pinned},
                                                             {"Device", MemoryKind::Device},
                                                             {"Managed", MemoryKind::Managed},
                                                             {"Array", MemoryKind::Array}};
  for (const auto& [text, kind] : kinds)
    if (s.find(text) != std::string_view::npos) return kind;
  return MemoryKind::Unknown;   // "Host" (ROCm) does not say pageable or pinned
}

CopyInfo copy_info_from_name(std::string_view name) {
  CopyInfo c;
  c.kind = copy_kind_from(name);
  const size_t open = name.find('('), arrow = name.find("->"), close = name.rfind(')');
  if (open != std::string_view::npos && arrow != std::string_view::npos && arrow > open) {
    c.src = memory_kind_from(name.substr(open + 1, arrow - open - 1));
    const size_t end = close != std::string_view::npos && close > arrow ? close : name.size();
    c.dst = memory_kind_from(name.substr(arrow + 2, end - arrow - 2));
  }
  return c;
}

}  // namespace gpuprof::kineto
