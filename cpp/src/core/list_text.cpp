#include "gpuprof/core/list_text.h"

namespace gpuprof {

namespace {

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  // Parses one value into `tree`; returns its index, or kNoIndex on malformed text.
  uint32_t value(ListTree& tree, int depth) {
    skip_space();
    if (i_ >= s_.size() || depth > 64) return kNoIndex;
    const uint32_t at = static_cast<uint32_t>(tree.nodes.size());
    tree.nodes.emplace_back();
    const char c = s_[i_];
    if (c == '[' || c == '(' || c == '{') {
      const char close = c == '[' ? ']' : c == '(' ? ')' : '}';
      ++i_;
      tree.nodes[at].kind = ListNode::Kind::List;
      uint32_t last = kNoIndex;
      skip_space();
      if (i_ < s_.size() && s_[i_] == close) {
        ++i_;
        return at;
      }
      while (true) {
        const uint32_t child = value(tree, depth + 1);
        if (child == kNoIndex) return kNoIndex;
        if (last == kNoIndex) tree.nodes[at].first_child = child;
        else tree.nodes[last].next_sibling = child;
        last = child;
        skip_space();
        if (i_ >= s_.size()) return kNoIndex;
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (s_[i_] == close) {
          ++i_;
          return at;
        }
        return kNoIndex;
      }
    }
    if (c == '\'' || c == '"') {
      // Python's repr quotes with ', or with " when the text holds a '. The end is the quote
      // followed by a separator or the end (a quote inside the text is taken as text).
      size_t j = i_ + 1;
      while (j < s_.size()) {
        if (s_[j] == c) {
          size_t k = j + 1;
          while (k < s_.size() && s_[k] == ' ') ++k;
          if (k >= s_.size() || s_[k] == ',' || s_[k] == ']' || s_[k] == ')' || s_[k] == '}') break;
        }
        ++j;
      }
      if (j >= s_.size()) return kNoIndex;
      tree.nodes[at].kind = ListNode::Kind::String;
      tree.nodes[at].text = s_.substr(i_ + 1, j - i_ - 1);
      i_ = j + 1;
      return at;
    }
    // A bare word: a number, None, True or False.
    size_t j = i_;
    while (j < s_.size() && s_[j] != ',' && s_[j] != ']' && s_[j] != ')' && s_[j] != '}' && s_[j] != ' ') ++j;
    const std::string_view word = s_.substr(i_, j - i_);
    i_ = j;
    if (word.empty()) return kNoIndex;
    if (word == "None" || word == "null") tree.nodes[at].kind = ListNode::Kind::None;
    else if (word == "True" || word == "true") tree.nodes[at].kind = ListNode::Kind::True;
    else if (word == "False" || word == "false") tree.nodes[at].kind = ListNode::Kind::False;
    else tree.nodes[at].kind = ListNode::Kind::Number;
    tree.nodes[at].text = word;
    return at;
  }

  bool at_end() {
    skip_space();
    return i_ == s_.size();
  }

 private:
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::vector<uint32_t> ListTree::children(uint32_t i) const {
  std::vector<uint32_t> out;
  if (i >= nodes.size() || nodes[i].kind != ListNode::Kind::List) return out;
  for (uint32_t c = nodes[i].first_child; c != kNoIndex; c = nodes[c].next_sibling) out.push_back(c);
  return out;
}

ListTree parse_list_text(std::string_view text) {
  ListTree tree;
  Reader r(text);
  tree.nodes.reserve(text.size() / 2 + 1);   // about a node per two characters ("1, ", "[]")
  if (r.value(tree, 0) == kNoIndex || !r.at_end()) tree.nodes.clear();
  return tree;
}

}  // namespace gpuprof
