// The importer's per-event shortcuts give what the general paths give: kernels' launch properties
// read as doubles (a short decimal read without from_chars), names interned through the
// importer's cache (texts that share its slot), and integers read by the short-integer loop.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpuprof/io/kineto_import.h"

using namespace gpuprof;

namespace {

std::string kernel_event(const std::string& name, const std::string& blocks_per_sm, int64_t ts) {
  return R"({"ph":"X","cat":"kernel","name":")" + name + R"(","pid":0,"tid":7,"ts":)" + std::to_string(ts) +
         R"(,"dur":1,"args":{"device":0,"stream":7,"blocks per SM":)" + blocks_per_sm + "}}";
}

Trace import_events(const std::vector<std::string>& events) {
  std::string json = R"({"traceEvents":[)";
  for (size_t i = 0; i < events.size(); ++i) json += (i ? "," : "") + events[i];
  json += "]}";
  return import_kineto_json(json, "test.json", {});
}

}  // namespace

TEST(ImportShortcuts, ShortDecimalsReadAsDoublesAsStrtodReadsThem) {
  // Short decimals (the shortcut: at most 15 digits, no exponent) and texts past it (16 digits,
  // an exponent), each against the C library's correctly rounded strtod, as a float.
  const std::vector<std::string> texts = {"0.1",
                                          "2.675",
                                          "1.2",
                                          "9.6",
                                          "50",
                                          "-0",
                                          "0",
                                          "0.625",
                                          "99.99",
                                          "123456789012345",
                                          "0.000000000000001",
                                          "-3.3",
                                          "1234567890123456",
                                          "1.5e3",
                                          "12345678.9012345"};
  std::vector<std::string> events;
  for (size_t i = 0; i < texts.size(); ++i) events.push_back(kernel_event("k", texts[i], int64_t(1000 + i)));
  const Trace t = import_events(events);
  ASSERT_EQ(t.kernels.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const float expected = float(std::strtod(texts[i].c_str(), nullptr));
    EXPECT_EQ(t.kernels[t.events[i].aux].blocks_per_sm, expected) << texts[i];
  }
}

TEST(ImportShortcuts, NamesSharingACacheSlotKeepTheirOwnIds) {
  // Three 40-byte names equal in their first, middle and last eight bytes (what the cache's slot
  // is chosen by), different at byte 10: they share a slot and take turns in it; each event must
  // still carry its own name. A short name and the same names again follow.
  const std::string a = std::string(10, 'a') + "X" + std::string(29, 'b');
  const std::string b = std::string(10, 'a') + "Y" + std::string(29, 'b');
  const std::string c = std::string(10, 'a') + "Z" + std::string(29, 'b');
  const std::vector<std::string> names = {a, b, a, c, "k", b, a, "k", c, c};
  std::vector<std::string> events;
  for (size_t i = 0; i < names.size(); ++i) events.push_back(kernel_event(names[i], "1", int64_t(1000 + i)));
  const Trace t = import_events(events);
  ASSERT_EQ(t.events.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(t.strings.at(t.events[i].name), names[i]) << i;
  EXPECT_EQ(t.events[0].name, t.events[2].name);
  EXPECT_EQ(t.events[0].name, t.events[6].name);
  EXPECT_EQ(t.events[1].name, t.events[5].name);
  EXPECT_NE(t.events[0].name, t.events[1].name);
  EXPECT_NE(t.events[1].name, t.events[3].name);
  EXPECT_EQ(t.strings.size(), 5u);   // "", a, b, c, k: each interned once
}

TEST(ImportShortcuts, IntegersOfEveryLengthAndSign) {
  // Stream ids as integers of 1 to 18 digits (the short-integer loop), 19 digits (scaled_decimal),
  // negative ones (kept as "no stream": the event's tid is then its own), and a fraction.
  const std::vector<std::pair<std::string, uint32_t>> cases = {
      {"7", 7u},   {"0", 0u}, {"123456789", 123456789u}, {"-5", 9u}, {"4294967295", 4294967295u},
      {"7.0", 7u}, {"-0", 0u}};
  std::vector<std::string> events;
  for (size_t i = 0; i < cases.size(); ++i)
    events.push_back(R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":9,"ts":)" + std::to_string(1000 + i) +
                     R"(,"dur":1,"args":{"device":0,"stream":)" + cases[i].first + "}}");
  const Trace t = import_events(events);
  ASSERT_EQ(t.events.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(t.events[i].tid, cases[i].second) << cases[i].first;
  // Correlation ids past 18 digits, and past int64 (the event is skipped: a number out of range).
  const Trace big = import_events({R"({"ph":"X","cat":"cuda_runtime","name":"r","pid":1,"tid":1,"ts":1,"dur":1,)"
                                   R"("args":{"correlation":1234567890123456789}})",
                                   R"({"ph":"X","cat":"cuda_runtime","name":"r","pid":1,"tid":1,"ts":2,"dur":1,)"
                                   R"("args":{"correlation":12345678901234567890}})"});
  ASSERT_EQ(big.events.size(), 1u);
  EXPECT_EQ(big.events[0].correlation, 1234567890123456789u);
}

TEST(ImportShortcuts, CategoriesInEverySpelling) {
  // Kineto's categories as new Kineto writes them (lower case), as old Kineto wrote them (a
  // capital first letter), and any other case (the case-folding loop); lengths no category has
  // ("async", 5 bytes), names one byte off a category, and a category's prefix are none of ours.
  const std::vector<std::pair<std::string, EventKind>> cases = {
      {"kernel", EventKind::Kernel},
      {"Kernel", EventKind::Kernel},
      {"KERNEL", EventKind::Kernel},
      {"kErNeL", EventKind::Kernel},
      {"cpu_op", EventKind::HostOp},
      {"Operator", EventKind::HostOp},
      {"OPERATOR", EventKind::HostOp},
      {"Runtime", EventKind::Runtime},
      {"cuda_runtime", EventKind::Runtime},
      {"CUDA_Runtime", EventKind::Runtime},
      {"cuda_driver", EventKind::Driver},
      {"gpu_memcpy", EventKind::Memcpy},
      {"Memcpy", EventKind::Memcpy},
      {"gpu_memset", EventKind::Memset},
      {"Memset", EventKind::Memset},
      {"cuda_sync", EventKind::Sync},
      {"nvtx", EventKind::Nvtx},
      {"NVTX", EventKind::Nvtx},
      {"overhead", EventKind::Overhead},
      {"cuda_profiler_range", EventKind::Overhead},
      {"gpu_user_annotation", EventKind::GpuUserRange},
      {"Gpu_User_Annotation", EventKind::GpuUserRange},
      {"user_annotation", EventKind::UserRange},
      {"python_function", EventKind::PythonFunction},
      {"Python_function", EventKind::PythonFunction},
      {"gpuprof_input", EventKind::InputStage},
      {"async", EventKind::Other},
      {"kernek", EventKind::Other},     // the last byte differs
      {"jernel", EventKind::Other},     // the first byte differs
      {"kern", EventKind::Other},       // a prefix
      {"kernel_", EventKind::Other},    // one byte more
      {"cpu_instant_event", EventKind::Other},
      {"cpu\x7Fop", EventKind::Other},  // DEL where '_' is
      {"", EventKind::Other}};
  std::vector<std::string> events;
  for (size_t i = 0; i < cases.size(); ++i)
    events.push_back(R"({"ph":"X","cat":")" + cases[i].first + R"(","name":"e","pid":1,"tid":1,"ts":)" +
                     std::to_string(1000 + i) + R"(,"dur":1,"args":{"device":0}})");
  const Trace t = import_events(events);
  ASSERT_EQ(t.events.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(int(t.events[i].kind), int(cases[i].second)) << '"' << cases[i].first << '"';
}

TEST(ImportShortcuts, TimesInEveryShapeAreExact) {
  // ts and dur in microseconds as Kineto writes them (16 integer digits, up to three decimals: the
  // inline path) and in every other shape (more decimals, rounded half away from zero; an
  // exponent), against the exact nanoseconds. The file's unit is microseconds (its first timestamps).
  const std::vector<std::pair<std::string, int64_t>> durs = {{"16.285", 16285},
                                                             {"4.5", 4500},
                                                             {"26", 26000},
                                                             {"0", 0},
                                                             {"0.001", 1},
                                                             {"0.0004", 0},
                                                             {"0.0005", 1},
                                                             {"1.2345", 1235},
                                                             {"1.5e3", 1500000},
                                                             {"2E-3", 2},
                                                             {"12345678", 12345678000},
                                                             {"123456789.125", 123456789125},
                                                             {"99999999.999", 99999999999},
                                                             {"1234567890123456", 1234567890123456000}};
  std::vector<std::string> events;
  for (size_t i = 0; i < durs.size(); ++i) {
    events.push_back(R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1700000000000465.250)" +
                     std::to_string(i % 10) + R"(,"dur":)" + durs[i].first + "}");
  }
  const Trace t = import_events(events);
  ASSERT_EQ(t.events.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    // ts 1700000000000465.250d (d = i % 10): four decimals, rounded half away from zero
    EXPECT_EQ(t.events[i].start_ns, 1700000000000465250 + (i % 10 >= 5 ? 1 : 0)) << i;
    EXPECT_EQ(t.events[i].dur_ns, durs[i].second) << durs[i].first;
  }
}

TEST(ImportShortcuts, ListItemsOfEveryKindAndLength) {
  // "Input Dims", "Input type" and "Concrete Inputs" as Python prints them, each item written with
  // its separator in one piece: numbers, literals, objects (their values: keys are not written),
  // nested and empty lists, strings of 0 to 200 bytes (past the 64 bytes an item is put together
  // in), an escaped one.
  const std::string long_text(200, 'x');
  const std::string edge(60, 'y');   // ", '" + 60 + "'" = 64 bytes
  const std::string edge1(61, 'z');  // 65 bytes: the long path
  const std::string json = R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::op","pid":1,"tid":1,"ts":5,)"
                           R"("dur":1,"args":{"Input Dims":[[1, -2, 3.5, 1e3], [], [[]], null, true, false, )"
                           R"({"a": [1]}, 12345678901234567890],"Input type":[")" +
                           long_text + R"(", "", "float", ")" + edge + R"(", ")" + edge1 +
                           R"("],"Concrete Inputs":["a\"b", "[4, 1]"]}}]})";
  const Trace t = import_kineto_json(json, "test.json", {});
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.strings.at(t.events[0].aux),
            "[[1, -2, 3.5, 1e3], [], [[]], None, True, False, {[1]}, 12345678901234567890]");
  ASSERT_EQ(t.op_args.size(), 1u);
  EXPECT_EQ(t.strings.at(t.op_args[0].types),
            "['" + long_text + "', '', 'float', '" + edge + "', '" + edge1 + "']");
  EXPECT_EQ(t.strings.at(t.op_args[0].concrete), "['a\"b', '[4, 1]']");
}
