#include "gpuprof/core/trace.h"

#include <algorithm>

namespace gpuprof {

StringTable::StringTable() { intern(""); }

StringTable::StringTable(const StringTable& other) : strings_(other.strings_) {
  ids_.reserve(strings_.size());
  for (size_t i = 0; i < strings_.size(); ++i) ids_.emplace(strings_[i], static_cast<uint32_t>(i));
}

StringTable& StringTable::operator=(const StringTable& other) {
  if (this != &other) {
    StringTable copy(other);
    *this = std::move(copy);
  }
  return *this;
}

uint32_t StringTable::intern(std::string_view s) {
  auto it = ids_.find(s);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(s);
  ids_.emplace(strings_.back(), id);
  return id;
}

uint32_t StringTable::find(std::string_view s) const {
  auto it = ids_.find(s);
  return it == ids_.end() ? kNoIndex : it->second;
}

const OpArgs* Trace::op_args_of(uint32_t event) const {
  const auto it = std::lower_bound(op_args.begin(), op_args.end(), event,
                                   [](const OpArgs& a, uint32_t e) { return a.event < e; });
  return it != op_args.end() && it->event == event ? &*it : nullptr;
}

}  // namespace gpuprof
