// JSON text of a Python object tree, byte-identical to json.dumps(obj, indent=n) (separators ","
// and ": ") or to json.dumps(obj, separators=(",", ":")), with json's other defaults (ensure_ascii,
// allow_nan, check_circular, insertion order). CPython writes indented text with its pure-Python
// encoder; this is the same algorithm over the same types, written once into one buffer, floats
// from std::to_chars's shortest digits instead of float.__repr__'s. What it does not handle (another
// type, a cycle, nesting deeper than kMaxDepth) raises TypeError or ValueError and the caller falls
// back to json.dumps (report/renderers.py, dumps_indented and dumps_compact).
#include <pybind11/pybind11.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int kMaxDepth = 512;   // containers nested deeper than this go to json.dumps
constexpr char kHex[] = "0123456789abcdef";

// A reference held for the duration of one step (the tree may run code while it is walked: a
// container subclass's __iter__ or items()).
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* o) : p(o) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() { Py_XDECREF(p); }
};

class Writer {
 public:
  // indent: the text of one level, "" for newlines alone. compact: one line, "," and ":", as
  // json.dumps(obj, separators=(",", ":")) (CPython's C encoder).
  Writer(std::string indent, bool compact) : indent_(std::move(indent)), compact_(compact) {}

  void value(PyObject* o) {
    if (PyUnicode_Check(o)) {
      string(o);
    } else if (o == Py_None) {
      out_ += "null";
    } else if (o == Py_True) {
      out_ += "true";
    } else if (o == Py_False) {
      out_ += "false";
    } else if (PyLong_Check(o)) {
      integer(o);
    } else if (PyFloat_Check(o)) {
      real(PyFloat_AS_DOUBLE(o));
    } else if (PyList_Check(o) || PyTuple_Check(o)) {
      array(o);
    } else if (PyDict_Check(o)) {
      object(o);
    } else {
      throw py::type_error(std::string("Object of type ") + Py_TYPE(o)->tp_name + " is not JSON serializable");
    }
  }

  std::string& text() { return out_; }

 private:
  std::string indent_;
  bool compact_;
  std::string out_;
  std::vector<PyObject*> open_;   // the containers being written (json's check_circular)
  int level_ = 0;
  std::string line_ = "\n";   // '\n' and the indent of the current level

  void newline() {
    if (!compact_) out_ += line_;
  }

  void enter(PyObject* o) {
    if (level_ >= kMaxDepth)
      throw py::value_error("nested deeper than " + std::to_string(kMaxDepth) + " containers");
    for (PyObject* p : open_)
      if (p == o) throw py::value_error("Circular reference detected");
    open_.push_back(o);
    ++level_;
    line_ += indent_;
  }

  void leave() {
    open_.pop_back();
    --level_;
    line_.resize(line_.size() - indent_.size());
    newline();
  }

  // _json.encode_basestring_ascii: printable ASCII as is except '"' and '\\'; the usual short
  // escapes; every other code point as "\u" and four lowercase hex digits (above the BMP, a
  // UTF-16 surrogate pair of two such escapes).
  void string(PyObject* s) {
    if (PyUnicode_READY(s) < 0) throw py::error_already_set();
    const Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const int kind = PyUnicode_KIND(s);
    const void* data = PyUnicode_DATA(s);
    out_ += '"';
    if (kind == PyUnicode_1BYTE_KIND) {
      const auto* c = static_cast<const unsigned char*>(data);
      Py_ssize_t i = 0;
      while (i < n) {
        Py_ssize_t j = i;
        while (j < n && c[j] >= ' ' && c[j] <= '~' && c[j] != '"' && c[j] != '\\') ++j;
        out_.append(reinterpret_cast<const char*>(c + i), static_cast<size_t>(j - i));
        if (j < n) escape(c[j++]);
        i = j;
      }
    } else {
      for (Py_ssize_t i = 0; i < n; ++i) {
        const Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '"' && c != '\\') out_ += static_cast<char>(c);
        else escape(c);
      }
    }
    out_ += '"';
  }

  void hex4(Py_UCS4 v) {
    out_ += "\\u";
    out_ += kHex[(v >> 12) & 0xf];
    out_ += kHex[(v >> 8) & 0xf];
    out_ += kHex[(v >> 4) & 0xf];
    out_ += kHex[v & 0xf];
  }

  void escape(Py_UCS4 c) {
    switch (c) {
      case '\\': out_ += "\\\\"; return;
      case '"': out_ += "\\\""; return;
      case '\b': out_ += "\\b"; return;
      case '\f': out_ += "\\f"; return;
      case '\n': out_ += "\\n"; return;
      case '\r': out_ += "\\r"; return;
      case '\t': out_ += "\\t"; return;
      default: break;
    }
    if (c >= 0x10000) {
      const Py_UCS4 v = c - 0x10000;
      hex4(0xd800 | ((v >> 10) & 0x3ff));
      hex4(0xdc00 | (v & 0x3ff));
    } else {
      hex4(c);
    }
  }

  // int.__repr__, for int and its subclasses (bool is handled before).
  void integer(PyObject* o) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) {
      if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
      char buf[24];
      out_.append(buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
      return;
    }
    Ref text(PyLong_Type.tp_repr(o));
    if (!text.p) throw py::error_already_set();
    Py_ssize_t len = 0;
    const char* s = PyUnicode_AsUTF8AndSize(text.p, &len);
    if (!s) throw py::error_already_set();
    out_.append(s, static_cast<size_t>(len));
  }

  // json's floatstr: NaN, Infinity, -Infinity, else float.__repr__.
  void real(double x) {
    if (std::isnan(x)) {
      out_ += "NaN";
    } else if (std::isinf(x)) {
      out_ += x > 0 ? "Infinity" : "-Infinity";
    } else {
#if defined(__cpp_lib_to_chars)
      float_repr(x);
#else
      char* s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
      if (!s) throw py::error_already_set();
      out_ += s;
      PyMem_Free(s);
#endif
    }
  }

#if defined(__cpp_lib_to_chars)
  // float.__repr__ of a finite double (PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0)), from
  // the shortest round-trip digits std::to_chars gives (the same digits: the shortest string that
  // reads back as x, the nearest to x among them): positional with at least one decimal when the
  // decimal point falls in (-4, 16] of the digits' start, else d.ddde+XX with a two-digit exponent.
  void float_repr(double x) {
    char buf[40];   // the longest, -2.2250738585072014e-308, is 24 characters
    const char* end = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific).ptr;
    const char* p = buf;
    char text[48];   // at most 17 digits, 20 zeros, a sign, a point and an exponent
    char* o = text;
    if (*p == '-') *o++ = *p++;
    char digits[24];
    int n = 0;
    for (; p < end && *p != 'e'; ++p)
      if (*p != '.') digits[n++] = *p;
    const bool negative_exp = p + 1 < end && p[1] == '-';
    int exp10 = 0;
    for (const char* q = p + 2; q < end; ++q) exp10 = exp10 * 10 + (*q - '0');   // after 'e' and its sign
    if (negative_exp) exp10 = -exp10;
    const int decpt = exp10 + 1;   // digits = 0.d1d2... x 10^decpt
    if (decpt <= -4 || decpt > 16) {
      *o++ = digits[0];
      if (n > 1) {
        *o++ = '.';
        for (int i = 1; i < n; ++i) *o++ = digits[i];
      }
      *o++ = 'e';
      *o++ = negative_exp ? '-' : '+';
      const int e = negative_exp ? -exp10 : exp10;
      if (e >= 100) *o++ = static_cast<char>('0' + e / 100);
      *o++ = static_cast<char>('0' + e / 10 % 10);
      *o++ = static_cast<char>('0' + e % 10);
    } else if (decpt <= 0) {
      *o++ = '0';
      *o++ = '.';
      for (int i = 0; i < -decpt; ++i) *o++ = '0';
      for (int i = 0; i < n; ++i) *o++ = digits[i];
    } else if (decpt < n) {
      for (int i = 0; i < decpt; ++i) *o++ = digits[i];
      *o++ = '.';
      for (int i = decpt; i < n; ++i) *o++ = digits[i];
    } else {
      for (int i = 0; i < n; ++i) *o++ = digits[i];
      for (int i = n; i < decpt; ++i) *o++ = '0';
      *o++ = '.';
      *o++ = '0';
    }
    out_.append(text, static_cast<size_t>(o - text));
  }
#endif

  // An exact list or tuple: the items it holds. A subclass, as json's encoders read it: indented
  // (pure Python), its own truth value, then its __iter__; compact (the C encoder), list(o) first.
  void array(PyObject* o) {
    if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
      items(o, o);
      return;
    }
    if (compact_) {
      Ref held(PySequence_List(o));
      if (!held.p) throw py::error_already_set();
      items(o, held.p);
      return;
    }
    const int empty = PyObject_Not(o);
    if (empty < 0) throw py::error_already_set();
    if (empty) {
      out_ += "[]";
      return;
    }
    enter(o);
    out_ += '[';
    Ref it(PyObject_GetIter(o));
    if (!it.p) throw py::error_already_set();
    bool first = true;
    while (true) {
      Ref v(PyIter_Next(it.p));
      if (!v.p) break;
      item(v.p, first);
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    leave();
    out_ += ']';
  }

  // The items of `seq`, an exact list or tuple (`o` itself, or the list made from it).
  void items(PyObject* o, PyObject* seq) {
    if (Py_SIZE(seq) == 0) {
      out_ += "[]";
      return;
    }
    enter(o);
    out_ += '[';
    bool first = true;
    if (PyTuple_Check(seq)) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); ++i) item(PyTuple_GET_ITEM(seq, i), first);
    } else {
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(seq); ++i) {
        PyObject* held = PyList_GET_ITEM(seq, i);
        Py_INCREF(held);
        Ref v(held);
        item(v.p, first);
      }
    }
    leave();
    out_ += ']';
  }

  // Before each member or item: the comma after the one before, then its line.
  void next(bool& first) {
    if (!first) out_ += ',';
    first = false;
    newline();
  }

  void item(PyObject* v, bool& first) {
    next(first);
    value(v);
  }

  // A key as json writes it: str as is; float, bool, None and int converted; else TypeError.
  void key(PyObject* k) {
    if (PyUnicode_Check(k)) {
      string(k);
      return;
    }
    // The converted key between quotes: digits, signs, '.', 'e' and letters need no escape.
    if (PyFloat_Check(k)) {
      out_ += '"';
      real(PyFloat_AS_DOUBLE(k));
      out_ += '"';
    } else if (k == Py_True) {
      out_ += "\"true\"";
    } else if (k == Py_False) {
      out_ += "\"false\"";
    } else if (k == Py_None) {
      out_ += "\"null\"";
    } else if (PyLong_Check(k)) {
      out_ += '"';
      integer(k);
      out_ += '"';
    } else {
      throw py::type_error(std::string("keys must be str, int, float, bool or None, not ") + Py_TYPE(k)->tp_name);
    }
  }

  void object(PyObject* o) {
    const bool exact = PyDict_CheckExact(o);
    // Empty: by its size for a dict and in compact text (the C encoder's test), by `not o` for an
    // indented subclass (the Python encoder's).
    if ((exact || compact_) ? PyDict_GET_SIZE(o) == 0 : PyObject_Not(o) == 1) {
      if (!exact && PyErr_Occurred()) throw py::error_already_set();
      out_ += "{}";
      return;
    }
    if (!exact && !compact_ && PyErr_Occurred()) throw py::error_already_set();
    enter(o);
    out_ += '{';
    bool first = true;
    auto member = [&](PyObject* k, PyObject* v) {
      next(first);
      key(k);
      out_ += compact_ ? ":" : ": ";
      value(v);
    };
    if (exact) {
      Py_ssize_t pos = 0;
      PyObject* k = nullptr;
      PyObject* v = nullptr;
      while (PyDict_Next(o, &pos, &k, &v)) {
        Py_INCREF(k);
        Py_INCREF(v);
        Ref kr(k);
        Ref vr(v);
        member(kr.p, vr.p);
      }
    } else {
      // A subclass (OrderedDict ...): its own items(), in its own order, as json does.
      Ref items(PyObject_CallMethod(o, "items", nullptr));
      if (!items.p) throw py::error_already_set();
      Ref it(PyObject_GetIter(items.p));
      if (!it.p) throw py::error_already_set();
      while (true) {
        Ref pair(PyIter_Next(it.p));
        if (!pair.p) break;
        if (!PyTuple_Check(pair.p) || PyTuple_GET_SIZE(pair.p) != 2)
          throw py::type_error("items() of a dict subclass must give (key, value) pairs");
        member(PyTuple_GET_ITEM(pair.p, 0), PyTuple_GET_ITEM(pair.p, 1));
      }
      if (PyErr_Occurred()) throw py::error_already_set();
    }
    leave();
    out_ += '}';
  }
};

py::str ascii_str(const std::string& s) {
  // Every byte is ASCII (ensure_ascii): the str is made without decoding.
  PyObject* r = PyUnicode_New(static_cast<Py_ssize_t>(s.size()), 127);
  if (!r) throw py::error_already_set();
  std::memcpy(PyUnicode_DATA(r), s.data(), s.size());
  return py::reinterpret_steal<py::str>(r);
}

}  // namespace

void bind_json_writer(py::module_& m) {
  m.def(
      "json_dumps_indented",
      [](py::handle obj, int indent) {
        Writer w(std::string(static_cast<size_t>(indent > 0 ? indent : 0), ' '), false);
        w.value(obj.ptr());
        return ascii_str(w.text());
      },
      py::arg("obj"), py::arg("indent"),
      "json.dumps(obj, indent=indent), byte for byte, for dict (str, int, float, bool or None keys), "
      "list, tuple, str, int, float, bool and None; TypeError for another type, ValueError for a cycle "
      "or nesting deeper than 512 containers.");
  m.def(
      "json_dumps_compact",
      [](py::handle obj) {
        Writer w(std::string(), true);
        w.value(obj.ptr());
        return ascii_str(w.text());
      },
      py::arg("obj"),
      "json.dumps(obj, separators=(',', ':')), byte for byte, for the same types as json_dumps_indented "
      "(the same TypeError and ValueError).");
}
