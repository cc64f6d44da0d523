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

Cat classify_cat_any_case(std::string_view c) {
  struct Entry {
    std::string_view name;
    Cat cat;
  };
  static constexpr Entry entries[] = {
      {"cpu_op", Cat::CpuOp},
      {"operator", Cat::CpuOp},
      {"user_annotation", Cat::UserAnnotation},
      {"python_function", Cat::PythonFunction},
      {"cuda_runtime", Cat::Runtime},
      {"runtime", Cat::Runtime},
      {"cuda_driver", Cat::Driver},
      {"kernel", Cat::Kernel},
      {"gpu_memcpy", Cat::Memcpy},
      {"memcpy", Cat::Memcpy},
      {"gpu_memset", Cat::Memset},
      {"memset", Cat::Memset},
      {"cuda_sync", Cat::Sync},
      {"gpu_user_annotation", Cat::GpuUserAnnotation},
      {"overhead", Cat::Overhead},
      {"cuda_profiler_range", Cat::Overhead},
      {"nvtx", Cat::Nvtx},   // gpuprof's export of NVTX ranges (Kineto writes none)
      {"gpuprof_input", Cat::InputStage},   // gpuprof's export of the input pipeline's stages
      {"gpuprof_critical_path", Cat::Derived},
  };
  for (const auto& e : entries)
    if (eq_ci(c, e.name)) return e.cat;
  return Cat::Unknown;
}

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
