// Result rows as Python dicts, for the bindings: a row type's field table (one line per column:
// its key and how its value is read from the row) turns rows into dicts with the table's keys in the
// table's order. Unknown numbers are None (null in JSON), never a sentinel like -1.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpuprof::bindings {

namespace py = pybind11;

inline double us(int64_t ns) { return double(ns) / 1000.0; }

inline py::object or_none(double v) { return v < 0.0 ? py::none() : py::object(py::float_(v)); }
inline py::object or_none(int64_t v) { return v < 0 ? py::none() : py::object(py::int_(v)); }

template <class Row>
struct Field {
  const char* key;
  std::function<py::object(const Row&)> value;
};

// The member as it is (an int stays an int, a double a float, a bool a bool, a string a str).
template <class Row, class T>
Field<Row> member(const char* key, T Row::* m) {
  return {key, [m](const Row& r) { return py::cast(r.*m); }};
}
// A time in ns as microseconds (a float).
template <class Row>
Field<Row> micros(const char* key, int64_t Row::* ns) {
  return {key, [ns](const Row& r) { return py::object(py::float_(us(r.*ns))); }};
}
// None where the member is negative (not known), else the member.
template <class Row, class T>
Field<Row> known(const char* key, T Row::* m) {
  return {key, [m](const Row& r) { return or_none(r.*m); }};
}
// None where the member is 0 or less (not known), else the member.
template <class Row>
Field<Row> positive(const char* key, int64_t Row::* m) {
  return {key, [m](const Row& r) { return or_none(r.*m > 0 ? r.*m : int64_t(-1)); }};
}
// None where the string is empty, else the string.
template <class Row>
Field<Row> nonempty(const char* key, std::string Row::* m) {
  return {key, [m](const Row& r) { return (r.*m).empty() ? py::object(py::none()) : py::object(py::str(r.*m)); }};
}

template <class Row>
py::dict row_dict(const Row& row, const std::vector<Field<Row>>& fields) {
  py::dict d;
  for (const Field<Row>& f : fields) d[f.key] = f.value(row);
  return d;
}

template <class Row>
py::list row_dicts(const std::vector<Row>& rows, const std::vector<Field<Row>>& fields) {
  py::list out;
  for (const Row& r : rows) out.append(row_dict(r, fields));
  return out;
}

}  // namespace gpuprof::bindings
