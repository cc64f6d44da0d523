// gpuprof's own JSON reader: an event (SAX) parser over TextStream, in situ, with no dependency.
//
// The handler sees Null(), Bool(b), RawNumber(text, n), String(s, n), Key(s, n), StartObject(),
// EndObject(), StartArray(), EndArray(); each returns false to stop the parse (JsonError::Stopped).
// Strings are unescaped where they lie in the stream's chunk (TextStream keeps every token whole in
// one chunk) and handed over NUL-terminated; numbers are handed over as their exact text, checked
// against JSON's grammar. The parser keeps its nesting on a heap stack, not the call stack, so no
// input can overflow it (the importer's handler refuses more than 64 levels anyway).
//
// Offsets and error kinds are those the importer has always reported (docs/analyze.md):
// the byte where the problem is known, counted in the JSON text.
#pragma once

#include <cstdint>
#include <vector>

#include "text_stream.h"

namespace gpuprof::io {

enum class JsonError : uint8_t {
  None,
  Empty,
  RootNotSingular,
  ValueInvalid,
  MissName,
  MissColon,
  MissCommaOrBrace,
  MissCommaOrBracket,
  BadHex,
  BadSurrogate,
  BadEscape,
  MissQuote,
  ControlInString,
  NumberTooBig,
  MissFraction,
  MissExponent,
  Stopped
};

inline const char* json_error_text(JsonError e) {
  switch (e) {
    case JsonError::None: return "no error";
    case JsonError::Empty: return "The document is empty.";
    case JsonError::RootNotSingular: return "The document root must not be followed by other values.";
    case JsonError::ValueInvalid: return "Invalid value.";
    case JsonError::MissName: return "Missing a name for object member.";
    case JsonError::MissColon: return "Missing a colon after a name of object member.";
    case JsonError::MissCommaOrBrace: return "Missing a comma or '}' after an object member.";
    case JsonError::MissCommaOrBracket: return "Missing a comma or ']' after an array element.";
    case JsonError::BadHex: return "Incorrect hex digit after \\u escape in string.";
    case JsonError::BadSurrogate: return "The surrogate pair in string is invalid.";
    case JsonError::BadEscape: return "Invalid escape character in string.";
    case JsonError::MissQuote: return "Missing a closing quotation mark in string.";
    case JsonError::ControlInString: return "Invalid encoding in string.";
    case JsonError::NumberTooBig: return "Number too big to be stored in double.";
    case JsonError::MissFraction: return "Miss fraction part in number.";
    case JsonError::MissExponent: return "Miss exponent in number.";
    case JsonError::Stopped: return "Terminate parsing due to Handler error.";
  }
  return "invalid JSON";
}

struct JsonResult {
  JsonError error = JsonError::None;
  size_t offset = 0;
  explicit operator bool() const { return error == JsonError::None; }
};

template <class Handler>
class JsonSax {
 public:
  JsonSax(TextStream& in, Handler& h) : in_(in), h_(h) {}

  JsonResult parse() {
    in_.skip_whitespace();
    if (in_.Peek() == '\0') {
      fail(JsonError::Empty, in_.Tell());
      return res_;
    }
    if (!value()) return res_;
    in_.skip_whitespace();
    if (in_.Peek() != '\0') fail(JsonError::RootNotSingular, in_.Tell());
    return res_;
  }

  // The rest of a document whose text, as the stream gives it, begins just after a complete value
  // nested in the containers `open` (outermost first; 1 for an object, 0 for an array): for a
  // second thread that reads the second half of a file from between two of its values. What it
  // reads is what parse() would read from there in that nesting.
  JsonResult parse_rest(std::vector<uint8_t> open) {
    open_ = std::move(open);
    if (!value(true)) return res_;
    in_.skip_whitespace();
    if (in_.Peek() != '\0') fail(JsonError::RootNotSingular, in_.Tell());
    return res_;
  }

 private:
  // Containers open on the heap stack `open_`: true for an object. After a value inside a
  // container, `after_value()` reads the separator and the next key, or the closing bracket.
  bool value(bool after_value = false) {
    for (;;) {
      bool opened = false;
      if (after_value) {   // parse_rest(): a value has just ended
        after_value = false;
        goto closing;
      }
      switch (in_.Peek()) {
        case 'n':
          if (!literal("null", 0)) return false;
          break;
        case 't':
          if (!literal("true", 1)) return false;
          break;
        case 'f':
          if (!literal("false", 2)) return false;
          break;
        case '"':
          if (!string(false)) return false;
          break;
        case '{':
        case '[': {
          const bool object = in_.Take() == '{';
          if (!(object ? h_.StartObject() : h_.StartArray())) return fail(JsonError::Stopped, in_.Tell());
          in_.skip_whitespace();
          if (in_.Peek() == (object ? '}' : ']')) {
            in_.Take();
            if (!(object ? h_.EndObject() : h_.EndArray())) return fail(JsonError::Stopped, in_.Tell());
            break;   // an empty container is one whole value
          }
          open_.push_back(object ? 1 : 0);
          if (object && !member_key()) return false;
          opened = true;
          break;
        }
        default:
          if (!number()) return false;
          break;
      }
      if (opened) continue;   // parse the first element
    closing:
      // A value is complete: close containers for as long as they end here.
      for (;;) {
        if (open_.empty()) return true;
        const bool object = open_.back() != 0;
        if (in_.skip_separator(',')) {   // the common ", " before the next element
          if (object && !member_key()) return false;
          break;
        }
        in_.skip_whitespace();
        const char c = in_.Peek();
        if (c == ',') {
          in_.Take();
          in_.skip_whitespace();
          if (object && !member_key()) return false;
          break;   // the next element
        }
        if (c == (object ? '}' : ']')) {
          in_.Take();
          open_.pop_back();
          if (!(object ? h_.EndObject() : h_.EndArray())) return fail(JsonError::Stopped, in_.Tell());
          continue;
        }
        return fail(object ? JsonError::MissCommaOrBrace : JsonError::MissCommaOrBracket, in_.Tell());
      }
    }
  }

  // At a member's name (white space skipped): the key, the colon, white space before the value.
  bool member_key() {
    if (in_.Peek() != '"') return fail(JsonError::MissName, in_.Tell());
    if (!string(true)) return false;
    if (in_.skip_separator(':')) return true;   // ": " and a value
    in_.skip_whitespace();
    if (in_.Peek() != ':') return fail(JsonError::MissColon, in_.Tell());
    in_.Take();
    in_.skip_whitespace();
    return true;
  }

  bool literal(const char* word, int kind) {
    in_.Take();
    for (const char* p = word + 1; *p; ++p) {
      if (in_.Peek() != *p) return fail(JsonError::ValueInvalid, in_.Tell());
      in_.Take();
    }
    const bool ok = kind == 0 ? h_.Null() : h_.Bool(kind == 1);
    return ok || fail(JsonError::Stopped, in_.Tell());
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // JSON's number grammar; the text goes to the handler as it lies in the chunk.
  bool number() {
    size_t n = 0;   // the number starts n bytes before the read position (one chunk)
    auto take = [&] {
      in_.Take();
      ++n;
    };
    if (in_.Peek() == '-') take();
    size_t int_digits = 0;
    if (in_.Peek() == '0') {
      take();
      int_digits = 1;
    } else if (in_.Peek() >= '1' && in_.Peek() <= '9') {
      int_digits = in_.skip_digits();
      n += int_digits;
    } else {
      return fail(JsonError::ValueInvalid, in_.Tell());
    }
    // A double holds integers below 1.8e308: 309 digits or more cannot be one.
    if (int_digits > 309) return fail(JsonError::NumberTooBig, in_.Tell() - n);
    size_t frac_digits = 0;
    if (in_.Peek() == '.') {
      take();
      if (!digit(in_.Peek())) return fail(JsonError::MissFraction, in_.Tell());
      frac_digits = in_.skip_digits();
      n += frac_digits;
    }
    if (in_.Peek() == 'e' || in_.Peek() == 'E') {
      take();
      bool minus = false;
      if (in_.Peek() == '+' || in_.Peek() == '-') {
        minus = in_.Peek() == '-';
        take();
      }
      if (!digit(in_.Peek())) return fail(JsonError::MissExponent, in_.Tell());
      // A positive exponent past 308 (plus the significant fraction digits, at most 17, that
      // bring the value back down) is out of a double's range.
      const int64_t max_exp = 308 + static_cast<int64_t>(frac_digits < 17 ? frac_digits : 17);
      int64_t e = 0;
      while (digit(in_.Peek())) {
        if (e < 1000000000) e = e * 10 + (in_.Peek() - '0');
        take();
        if (!minus && e > max_exp) return fail(JsonError::NumberTooBig, in_.Tell() - n);
      }
    }
    if (!h_.RawNumber(in_.last_read(n), n)) return fail(JsonError::Stopped, in_.Tell());
    return true;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool hex4(unsigned* out, size_t escape_at) {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex(in_.Peek());
      if (d < 0) return fail(JsonError::BadHex, escape_at);
      v = (v << 4) | unsigned(d);
      in_.Take();
    }
    *out = v;
    return true;
  }

  void put_utf8(unsigned cp) {
    if (cp < 0x80) {
      in_.Put(char(cp));
    } else if (cp < 0x800) {
      in_.Put(char(0xC0 | (cp >> 6)));
      in_.Put(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      in_.Put(char(0xE0 | (cp >> 12)));
      in_.Put(char(0x80 | ((cp >> 6) & 0x3F)));
      in_.Put(char(0x80 | (cp & 0x3F)));
    } else {
      in_.Put(char(0xF0 | (cp >> 18)));
      in_.Put(char(0x80 | ((cp >> 12) & 0x3F)));
      in_.Put(char(0x80 | ((cp >> 6) & 0x3F)));
      in_.Put(char(0x80 | (cp & 0x3F)));
    }
  }

  // In situ: the decoded text is written over the string's own text (it only shrinks), then a NUL.
  // Bytes are kept as they are (invalid UTF-8 is the handler's to clean); a lone low surrogate
  // escape is encoded as its three bytes, which the handler's clean-up replaces.
  // Inline for what most strings are, plain text up to the closing quote (one scan, no escape);
  // a string with an escape, or one the chunk's end cuts, goes on in escaped_string().
  __attribute__((always_inline)) bool string(bool key) {
    in_.Take();   // the opening quote
    char* const head = in_.PutBegin();
    in_.scan_unescaped();
    if (in_.Peek() != '"') return escaped_string(key, head);
    return string_end(key, head);
  }

  __attribute__((always_inline)) bool string_end(bool key, char* head) {
    in_.Take();
    in_.Put('\0');
    const size_t len = in_.PutEnd(head) - 1;
    const bool ok = key ? h_.Key(head, len) : h_.String(head, len);
    return ok || fail(JsonError::Stopped, in_.Tell());
  }

  [[gnu::noinline]] bool escaped_string(bool key, char* const head) {
    for (bool scanned = true;; scanned = false) {
      if (!scanned) in_.scan_unescaped();
      const char c = in_.Peek();
      if (c == '"') return string_end(key, head);
      if (c == '\\') {
        const size_t escape_at = in_.Tell();
        in_.Take();
        const char e = in_.Peek();
        char plain = 0;
        switch (e) {
          case '"': plain = '"'; break;
          case '\\': plain = '\\'; break;
          case '/': plain = '/'; break;
          case 'b': plain = '\b'; break;
          case 'f': plain = '\f'; break;
          case 'n': plain = '\n'; break;
          case 'r': plain = '\r'; break;
          case 't': plain = '\t'; break;
          case 'u': {
            in_.Take();
            unsigned cp = 0;
            if (!hex4(&cp, escape_at)) return false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (in_.Peek() != '\\') return fail(JsonError::BadSurrogate, escape_at);
              in_.Take();
              if (in_.Peek() != 'u') return fail(JsonError::BadSurrogate, escape_at);
              in_.Take();
              unsigned lo = 0;
              if (!hex4(&lo, escape_at)) return false;
              if (lo < 0xDC00 || lo > 0xDFFF) return fail(JsonError::BadSurrogate, escape_at);
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(cp);
            continue;
          }
          default: return fail(JsonError::BadEscape, escape_at);
        }
        in_.Take();
        in_.Put(plain);
      } else if (static_cast<unsigned char>(c) < 0x20) {
        // (a control character is reported as an invalid escape, as the importer always has)
        return fail(c == '\0' ? JsonError::MissQuote : JsonError::BadEscape, in_.Tell());
      } else {
        in_.Put(in_.Take());
      }
    }
  }

  bool fail(JsonError e, size_t at) {
    res_.error = e;
    res_.offset = at;
    return false;
  }

  TextStream& in_;
  Handler& h_;
  std::vector<uint8_t> open_;   // 1: object
  JsonResult res_;
};

// Compact JSON text, for metadata values kept whole (the importer's capture of top-level values).
class JsonWriter {
 public:
  void clear() {
    out_.clear();
    levels_.clear();
  }
  const std::string& text() const { return out_; }
  void start(bool object) {
    prefix();
    out_.push_back(object ? '{' : '[');
    levels_.push_back({object, 0});
  }
  void end() {
    out_.push_back(levels_.back().object ? '}' : ']');
    levels_.pop_back();
  }
  void null() {
    prefix();
    out_ += "null";
  }
  void boolean(bool b) {
    prefix();
    out_ += b ? "true" : "false";
  }
  void raw_number(std::string_view t) {
    prefix();
    out_.append(t.data(), t.size());
  }
  void string(std::string_view s) {
    prefix();
    static const char digits[] = "0123456789ABCDEF";
    out_.push_back('"');
    for (const char ch : s) {
      const unsigned char c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\b': out_ += "\\b"; break;
        case '\f': out_ += "\\f"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            out_ += "\\u00";
            out_.push_back(digits[c >> 4]);
            out_.push_back(digits[c & 15]);
          } else {
            out_.push_back(ch);
          }
      }
    }
    out_.push_back('"');
  }
  void key(std::string_view s) { string(s); }

 private:
  struct Level {
    bool object;
    uint64_t values;
  };
  void prefix() {
    if (levels_.empty()) return;
    Level& l = levels_.back();
    if (l.values > 0) out_.push_back(l.object ? (l.values % 2 == 0 ? ',' : ':') : ',');
    ++l.values;
  }
  std::string out_;
  std::vector<Level> levels_;
};

}  // namespace gpuprof::io
