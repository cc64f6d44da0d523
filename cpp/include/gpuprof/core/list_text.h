// Lists as Python prints them: "[[32, 3, 224, 224], [], 'float', None, True]". A host op's input
// shapes, types and concrete inputs are kept in a Trace in this form (trace.h: Kineto's "Input
// Dims", "Input type" and "Concrete Inputs", and what the live hooks record), and read back here:
// by the FLOP rules (flops.h) and by the Chrome-trace export, which writes them as JSON again.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "gpuprof/core/event.h"

namespace gpuprof {

struct ListNode {
  enum class Kind : uint8_t { List, Number, String, None, True, False };
  Kind kind = Kind::List;
  std::string_view text;             // a number's or string's text (a string without its quotes)
  uint32_t first_child = kNoIndex;   // lists only
  uint32_t next_sibling = kNoIndex;
};

// The parsed text: nodes[0] is the outermost value. Empty when the text is not such a list
// (a value nested deeper than 64 levels counts as not one). Views point into the text.
struct ListTree {
  std::vector<ListNode> nodes;
  bool ok() const { return !nodes.empty(); }
  // The children of list node `i`, in order.
  std::vector<uint32_t> children(uint32_t i) const;
};
ListTree parse_list_text(std::string_view text);

}  // namespace gpuprof
