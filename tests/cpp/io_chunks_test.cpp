// The importer's text chunks (cpp/src/io/text_stream.h): the text is parsed in situ, one chunk
// (1 MiB) at a time, each cut where no string or number can be split. These traces put strings,
// escapes and numbers across every kind of cut: newline cuts, cuts in text without newlines, and
// a string longer than a chunk. Each must read exactly like the same events laid out one per line.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

// `n` complete events; names carry escapes (\" \\ \n \u00e9) and structural characters (, : { } [ ])
// that a cut must not be fooled by. Timestamps have three decimals (exact ns conversion).
std::string events_json(int n, const char* sep) {
  std::string s = R"({"schemaVersion": 1,)";
  s += sep;
  s += R"("traceEvents": [)";
  for (int i = 0; i < n; ++i) {
    if (i) s += ",";
    s += sep;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  R"({"ph": "X", "cat": "cpu_op", "name": "op{%d}, \"q\": [a\\b]\n\u00e9 %d", )"
                  R"("pid": 7, "tid": 7, "ts": %d.%03d, "dur": %d.%03d, "args": {"External id": %d}})",
                  i % 97, i, 1000000 + i * 3, i % 1000, 2, (i * 7) % 1000, i + 1);
    s += buf;
  }
  s += sep;
  s += "]}";
  return s;
}

void expect_same_events(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    const Event& x = a.events[i];
    const Event& y = b.events[i];
    ASSERT_EQ(a.strings.at(x.name), b.strings.at(y.name)) << "event " << i;
    ASSERT_EQ(x.start_ns, y.start_ns) << "event " << i;
    ASSERT_EQ(x.dur_ns, y.dur_ns) << "event " << i;
    ASSERT_EQ(x.external_id, y.external_id) << "event " << i;
  }
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), std::streamsize(text.size()));
  return path;
}

}  // namespace

TEST(ImportChunks, TextWithoutNewlinesReadsLikeOneEventPerLine) {
  // 40000 events of about 170 bytes: 6.5 MB, so six or seven chunks, none of which holds a
  // newline (the cut falls after the last structural character outside a string).
  const std::string one_line = events_json(40000, "");
  const std::string per_line = events_json(40000, "\n");
  ASSERT_EQ(one_line.find('\n'), std::string::npos);
  ASSERT_GT(one_line.size(), 6u << 20);
  const Trace a = import_kineto_json(one_line, "one_line.json");
  const Trace b = import_kineto_json(per_line, "per_line.json");
  ASSERT_EQ(a.events.size(), 40000u);
  expect_same_events(a, b);
  // Event 12345: name "op{26}, "q": [a\b]<newline>é 12345", ts 1037035.345 us, dur 2.415 us.
  EXPECT_EQ(a.strings.at(a.events[12345].name), "op{26}, \"q\": [a\\b]\n\xc3\xa9 12345");
  EXPECT_EQ(a.events[12345].start_ns, 1037035345);
  EXPECT_EQ(a.events[12345].dur_ns, 2415);
  // The same from files (the file reader's chunks rather than memory's).
  expect_same_events(import_kineto_trace(write_temp("one_line.json", one_line)), b);
  expect_same_events(import_kineto_trace(write_temp("per_line.json", per_line)), b);
}

TEST(ImportChunks, AStringLongerThanAChunkIsKeptWhole) {
  // A 3 MiB name with escapes along it and no safe cut inside: the chunk grows to hold it.
  std::string name;
  std::string expected;
  for (int i = 0; i < (3 << 20) / 8; ++i) {
    name += "abc\\\"d, ";   // JSON text: abc\"d,<space>  (9 bytes) -> abc"d,<space> (8 bytes)
    expected += "abc\"d, ";
  }
  for (const char* sep : {"", "\n"}) {
    const std::string json = std::string(R"({"traceEvents": [)") + sep +
                             R"({"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1},)" + sep +
                             R"({"ph": "X", "cat": "cpu_op", "name": ")" + name + R"(", "ts": 2.5, "dur": 3},)" +
                             sep + R"({"ph": "X", "cat": "cpu_op", "name": "y", "ts": 4, "dur": 1}]})";
    const Trace t = import_kineto_json(json, "long.json");
    ASSERT_EQ(t.events.size(), 3u) << "separator '" << sep << "'";
    EXPECT_EQ(t.strings.at(t.events[1].name), expected);
    EXPECT_EQ(t.events[1].start_ns, 2500);
    EXPECT_EQ(t.events[1].dur_ns, 3000);
    EXPECT_EQ(t.strings.at(t.events[2].name), "y");
  }
}

TEST(ImportChunks, ANumberEndingTheTextIsReadWhereItLies) {
  // The last chunk ends inside a number: in-situ parsing hands it over from the chunk's end, so
  // the import must fail with the usual messages, reading nothing past the text.
  try {
    import_kineto_json("1234567890123456789012345", "number.json");
    FAIL() << "a bare number was accepted";
  } catch (const TraceImportError& e) {
    EXPECT_NE(std::string(e.what()).find("top-level JSON value is a number"), std::string::npos) << e.what();
  }
  const std::string cut = R"({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 123456)";
  for (const std::string& path : {write_temp("cut.json", cut)}) {
    try {
      import_kineto_trace(path);
      FAIL() << "a truncated trace was accepted";
    } catch (const TraceImportError& e) {
      EXPECT_NE(std::string(e.what()).find("the text ends early"), std::string::npos) << e.what();
    }
  }
}

TEST(ImportChunks, IndentsOfEveryWidthReadLikeNone) {
  // Indented text (a newline and an indent before each event): indents of 0 to 17 spaces (the
  // shortcut takes up to seven after a newline, in one load), tabs, "\r\n", blank lines; 40000
  // events (six or seven chunks, each cut after a newline, before an indent).
  const std::string one_line = events_json(40000, "");
  const std::string per_line = events_json(40000, "\n");
  const std::vector<std::string> indents = {
      "\n",          "\n ",        "\n  ",        "\n   ",
      "\n       ",   "\n        ", "\n         ", "\n" + std::string(17, ' '),
      "\r\n  ",      "\n\t",       "\n \t ",      "\n    \n    ",
      "\n  \r\n   ", " \n  ",      "\n   \n"};
  std::string indented;
  size_t k = 0;
  for (const char c : per_line) {
    if (c == '\n') indented += indents[k++ % indents.size()];
    else indented += c;
  }
  ASSERT_GT(k, 40000u);
  const Trace a = import_kineto_json(one_line, "one_line.json");
  const Trace b = import_kineto_json(indented, "indented.json");
  ASSERT_EQ(a.events.size(), 40000u);
  expect_same_events(a, b);
  expect_same_events(a, import_kineto_trace(write_temp("indented.json", indented)));
}

TEST(ImportChunks, SeparatorsAndTheirErrorsWhereverTheyFall) {
  // ": " and ", " (and the compact ':' and ',') take a shortcut; anything else, the general path.
  // Each bad text is refused with the byte the reader knows is wrong, as the general path finds it.
  auto offset_of = [](const std::string& json) -> int64_t {
    try {
      import_kineto_json(json, "bad.json");
    } catch (const TraceImportError& e) {
      return e.byte_offset;
    }
    return -2;
  };
  const std::string head = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2)";
  EXPECT_EQ(offset_of(head + R"(, "pid" 5}]})"), int64_t(head.size() + 8));    // no colon: at "5"
  EXPECT_EQ(offset_of(head + R"(, "pid":: 5}]})"), int64_t(head.size() + 8));  // a second ':' for a value
  EXPECT_EQ(offset_of(head + R"(,, "pid": 5}]})"), int64_t(head.size() + 1));  // a second comma: no name
  EXPECT_EQ(offset_of(head + R"( "pid": 5}]})"), int64_t(head.size() + 1));   // no comma: at the name
  EXPECT_EQ(offset_of(head + R"(,  "pid":  5 , "x" :1}]})"), -2);              // spaces anywhere: fine
  EXPECT_EQ(offset_of(head + ",\t\"pid\":\t5}]}"), -2);
  // The same events spaced every way read alike.
  const std::vector<std::string> forms = {
      R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2,"pid":5}]})",
      R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2, "pid": 5}]})",
      R"({ "traceEvents" : [ { "ph" : "X" , "cat" : "cpu_op" , "name" : "a" , "ts" : 1 , "dur" : 2 , "pid" : 5 } ] })",
      "{\"traceEvents\":\n[{\"ph\":\r\n\"X\",\"cat\":  "
      "\"cpu_op\",\"name\":\t\"a\",\"ts\":1,\n\"dur\":2,\"pid\":5}]}"};
  for (const std::string& f : forms) {
    const Trace t = import_kineto_json(f, "forms.json");
    ASSERT_EQ(t.events.size(), 1u) << f;
    EXPECT_EQ(t.events[0].start_ns, 1000) << f;
    EXPECT_EQ(t.events[0].dur_ns, 2000) << f;
    EXPECT_EQ(t.strings.at(t.events[0].name), "a") << f;
  }
}
