// The Kineto importer on hand-written traces (each expectation worked out in a comment) and on
// the real traces in ../shared/traces.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/chrome_export.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/analysis/modules.h"
#include "gpuprof/io/kineto_import.h"
#include "trace_dump.h"

using namespace gpuprof;

namespace {

Trace import_text(const std::string& json, ImportStats* stats = nullptr) {
  return import_kineto_json(json, "test.json", {}, stats);
}

std::string error_of(const std::string& json, const ImportOptions& o = {}) {
  try {
    import_kineto_json(json, "bad.json", o);
  } catch (const TraceImportError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ScaledDecimal, MicrosecondsToNanosecondsExactly) {
  int64_t v = 0;
  // 1623142623460111.5 us: a double keeps only 1623142623460111.5 +- 0.125; the digits give it exactly.
  ASSERT_TRUE(parse_scaled_decimal("1623142623460111.5", 3, &v));
  EXPECT_EQ(v, 1623142623460111500);
  ASSERT_TRUE(parse_scaled_decimal("4458676522690.655", 3, &v));
  EXPECT_EQ(v, 4458676522690655);
  // A fourth decimal rounds half away from zero: 1.2345 us = 1234.5 ns -> 1235; -1.2345 -> -1235.
  ASSERT_TRUE(parse_scaled_decimal("1.2345", 3, &v));
  EXPECT_EQ(v, 1235);
  ASSERT_TRUE(parse_scaled_decimal("-1.2345", 3, &v));
  EXPECT_EQ(v, -1235);
  // Exponent notation: 1.5e3 us = 1500 us = 1500000 ns.
  ASSERT_TRUE(parse_scaled_decimal("1.5e3", 3, &v));
  EXPECT_EQ(v, 1500000);
  ASSERT_TRUE(parse_scaled_decimal("0", 3, &v));
  EXPECT_EQ(v, 0);
  // Past int64 (9.22e18): 1e16 us = 1e19 ns does not fit; nor does a 30-digit integer.
  EXPECT_FALSE(parse_scaled_decimal("10000000000000000", 3, &v));
  // 16 digits at the edge: 9223372036854775.807 us is INT64_MAX ns; one more does not fit.
  ASSERT_TRUE(parse_scaled_decimal("9223372036854775.807", 3, &v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_FALSE(parse_scaled_decimal("9223372036854775.808", 3, &v));
  EXPECT_FALSE(parse_scaled_decimal("9999999999999999", 3, &v));
  EXPECT_FALSE(parse_scaled_decimal("123456789012345678901234567890", 0, &v));
  EXPECT_TRUE(parse_scaled_decimal("9223372036854775807", 0, &v));
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_FALSE(parse_scaled_decimal("9223372036854775808", 0, &v));
  EXPECT_FALSE(parse_scaled_decimal("abc", 0, &v));
  EXPECT_FALSE(parse_scaled_decimal("", 0, &v));
  EXPECT_FALSE(parse_scaled_decimal("1.5x", 0, &v));
}

TEST(ScaledDecimal, EightDigitsAtATimeAgreeWithDigitByDigit) {
  // The fast path converts eight digits at once; every 8- to 20-character run of digits with one
  // byte changed to something else (a neighbour of '0' or '9', a sign, a dot, a high byte that
  // carries when 6 is added) must give what the digit-by-digit definition gives.
  auto reference = [](const std::string& s, int64_t* out) {
    if (s.empty()) return false;
    __int128 v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
      if (v > INT64_MAX) return false;
    }
    *out = int64_t(v);
    return true;
  };
  const char others[] = {'/', ':', '.', '-', '+', 'e', ' ', '\0', char(0xFA), char(0xFF), char(0x39 + 0x80)};
  uint64_t seed = 12345;
  int checked = 0;
  for (size_t len = 1; len <= 20; ++len) {
    for (int trial = 0; trial < 200; ++trial) {
      std::string s(len, '0');
      for (char& c : s) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        c = char('0' + (seed >> 33) % 10);
      }
      if (trial % 2 == 1) {   // one byte replaced
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        s[(seed >> 33) % len] = others[(seed >> 40) % sizeof(others)];
      }
      int64_t got = -7, want = -7;
      const bool ok = parse_scaled_decimal(s, 0, &got);
      const bool plain_digits = s.find_first_not_of("0123456789") == std::string::npos;
      if (plain_digits) {
        ASSERT_EQ(ok, reference(s, &want)) << s;
        if (ok) ASSERT_EQ(got, want) << s;
      } else if (s.find_first_not_of("0123456789.") == std::string::npos && s.find('.') != std::string::npos) {
        // "123.45": a decimal point is fine; what it reads must not depend on the fast path.
        int64_t again = 0;
        ASSERT_EQ(ok, parse_scaled_decimal(std::string_view(s.data(), s.size()), 0, &again)) << s;
      } else if (s.find_first_of("/: \xFA\xFF\xB9") != std::string::npos || s.find('\0') != std::string::npos) {
        ASSERT_FALSE(ok) << s;   // never a number
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4000);
  int64_t v = 0;
  ASSERT_TRUE(parse_scaled_decimal("1669783687389324", 3, &v));   // two chunks of eight, scaled
  EXPECT_EQ(v, 1669783687389324000);
  ASSERT_TRUE(parse_scaled_decimal("12345678", 0, &v));
  EXPECT_EQ(v, 12345678);
  ASSERT_TRUE(parse_scaled_decimal("99999999.999", 3, &v));
  EXPECT_EQ(v, 99999999999);
  EXPECT_FALSE(parse_scaled_decimal("1234567:", 0, &v));          // ':' is '9' + 1
  EXPECT_FALSE(parse_scaled_decimal("/2345678", 0, &v));          // '/' is '0' - 1
}

TEST(KinetoImport, OldDialectKernelsCopiesAndLinks) {
  // The 2021 dialect: capitalised cats, string tids ("stream 7"), `external id` in lower case.
  const std::string json = R"J({"schemaVersion":1,
    "deviceProperties":[{"id":0,"name":"Tesla V100","totalGlobalMem":34084028416,"computeMajor":7,
       "computeMinor":0,"maxThreadsPerMultiprocessor":2048,"regsPerMultiprocessor":65536,
       "sharedMemPerMultiprocessor":98304,"numSms":80,"warpSize":32}],
    "traceEvents":[
     {"ph":"X","cat":"Operator","name":"ProfilerStep#5","pid":1,"tid":"25738","ts":1000,"dur":100},
     {"ph":"X","cat":"Operator","name":"aten::conv2d","pid":1,"tid":"25738","ts":1010,"dur":20,"args":{"External id":7}},
     {"ph":"X","cat":"Runtime","name":"cudaLaunchKernel","pid":1,"tid":"25738","ts":1015,"dur":5,
       "args":{"cbid":211,"correlation":42,"external id":7}},
     {"ph":"X","cat":"Kernel","name":"volta_scudnn","pid":0,"tid":"stream 7","ts":1030.25,"dur":50.5,
       "args":{"device":0,"stream":7,"correlation":42,"external id":7,"registers per thread":38,
       "shared memory":1024,"blocks per SM":0.625,"warps per SM":5.0,"grid":[50,1,1],"block":[256,1,1],
       "est. achieved occupancy %":25}},
     {"ph":"X","cat":"Memcpy","name":"Memcpy HtoD (Pageable -> Device)","pid":0,"tid":"stream 7","ts":1090,"dur":5,
       "args":{"device":0,"stream":7,"correlation":43,"bytes":19267584}},
     {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":1001,"args":{"Device Type":1,"Device Id":0,
       "Addr":139926520725504,"Bytes":512,"Total Allocated":4096,"Total Reserved":8192}},
     {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":1002,"args":{"Device Type":0,"Device Id":-1,
       "Bytes":-1,"Total Allocated":0}},
     {"ph":"s","id":42,"pid":1,"tid":1,"ts":1015,"cat":"async","name":"launch"},
     {"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"python"}}
    ]})J";
  ImportStats stats;
  Trace t = import_text(json, &stats);
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[0].kind, EventKind::StepMarker);   // ProfilerStep as Operator
  EXPECT_EQ(t.events[0].start_ns, 1000000);
  EXPECT_EQ(t.events[0].tid, 25738u);
  EXPECT_EQ(t.events[1].kind, EventKind::HostOp);
  EXPECT_EQ(t.events[1].external_id, 7u);
  EXPECT_EQ(t.events[2].kind, EventKind::Runtime);
  EXPECT_EQ(t.events[2].correlation, 42u);
  EXPECT_EQ(t.events[2].external_id, 7u);
  const Event& k = t.events[3];
  EXPECT_EQ(k.kind, EventKind::Kernel);
  EXPECT_EQ(k.start_ns, 1030250);   // 1030.25 us
  EXPECT_EQ(k.dur_ns, 50500);
  EXPECT_EQ(k.device, 0);
  EXPECT_EQ(k.tid, 7u);
  ASSERT_LT(k.aux, t.kernels.size());
  const KernelInfo& ki = t.kernels[k.aux];
  EXPECT_EQ(ki.grid[0], 50);
  EXPECT_EQ(ki.block[0], 256);
  EXPECT_EQ(ki.registers_per_thread, 38);
  EXPECT_EQ(ki.shared_mem_bytes, 1024);
  EXPECT_FLOAT_EQ(ki.blocks_per_sm, 0.625f);
  EXPECT_FLOAT_EQ(ki.warps_per_sm, 5.0f);
  EXPECT_FLOAT_EQ(ki.est_occupancy_pct, 25.0f);
  const Event& c = t.events[4];
  ASSERT_EQ(c.kind, EventKind::Memcpy);
  const CopyInfo& ci = t.copies[c.aux];
  EXPECT_EQ(ci.bytes, 19267584);
  EXPECT_EQ(ci.kind, CopyKind::HtoD);
  EXPECT_EQ(ci.src, MemoryKind::Pageable);
  EXPECT_EQ(ci.dst, MemoryKind::Device);
  ASSERT_EQ(t.memory.size(), 2u);
  EXPECT_EQ(t.memory[1].bytes_delta, -1);   // a one-byte free on the host allocator
  EXPECT_EQ(t.memory[1].device, -1);
  EXPECT_EQ(t.memory[0].ts_ns, 1001000);
  EXPECT_EQ(t.memory[0].bytes_delta, 512);
  EXPECT_EQ(t.memory[0].total_allocated, 4096);
  EXPECT_EQ(t.memory[0].total_reserved, 8192);
  EXPECT_EQ(t.memory[0].device, 0);
  EXPECT_EQ(t.memory[0].addr, 139926520725504u);   // the block's address and the allocating thread
  EXPECT_EQ(t.memory[0].tid, 1u);
  EXPECT_EQ(t.memory[1].addr, 0u);                 // not recorded: 0
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].name, "Tesla V100");
  EXPECT_EQ(t.devices[0].num_sms, 80);
  EXPECT_EQ(t.devices[0].max_threads_per_sm, 2048);
  EXPECT_EQ(t.devices[0].shared_mem_per_sm, 98304);
  EXPECT_EQ(stats.records, 9u);
  EXPECT_EQ(stats.ignored_records, 2u);   // the flow start and the process_name metadata
  EXPECT_EQ(t.skipped_events, 0u);
  EXPECT_EQ(t.metadata.at("schemaVersion"), "1");
  EXPECT_EQ(t.metadata.at("pid"), "1");   // the host process, for the exporter's host rows
}

TEST(KinetoImport, InputDimsBecomeTheOpsInputShapesAsRecordShapesWritesThem) {
  // "Input Dims" (record_shapes) as Python prints the list, the form a live session's record_shapes
  // gives and the plugin groups by: "[[32, 3, 224, 224], [64, 3, 7, 7]]". Both spellings; a tensor
  // list nests a level deeper; an op without inputs has "[]"; an op without the arg has none (""),
  // and only host ops keep them (a step marker's and a runtime call's are not input shapes).
  const std::string json = R"J({"traceEvents":[
     {"ph":"X","cat":"Operator","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":100,"args":{"Input Dims":[]}},
     {"ph":"X","cat":"cpu_op","name":"aten::conv2d","pid":1,"tid":1,"ts":1,"dur":10,
       "args":{"Input Dims":[[32,3,224,224],[64,3,7,7],[],[],[]],"External id":3}},
     {"ph":"X","cat":"cpu_op","name":"aten::cat","pid":1,"tid":1,"ts":12,"dur":5,
       "args":{"Input dims":[[[2,3],[4,3]],[]]}},
     {"ph":"X","cat":"cpu_op","name":"aten::empty","pid":1,"tid":1,"ts":18,"dur":1,"args":{"Input Dims":[]}},
     {"ph":"X","cat":"cpu_op","name":"aten::zeros","pid":1,"tid":1,"ts":20,"dur":1,"args":{"External id":4}},
     {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":1,
       "args":{"Input Dims":[[1]],"correlation":9}},
     {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":30,"dur":1,
       "args":{"Input Dims":[[5, 3], [], []],"Input type":["float","Scalar",""]}}
    ]})J";
  Trace t = import_text(json);
  ASSERT_EQ(t.events.size(), 7u);
  auto shapes = [&](size_t i) { return t.events[i].aux < t.strings.size() ? t.strings.at(t.events[i].aux) : ""; };
  EXPECT_EQ(t.events[0].kind, EventKind::StepMarker);
  EXPECT_EQ(t.events[0].aux, kNoIndex);
  EXPECT_EQ(shapes(1), "[[32, 3, 224, 224], [64, 3, 7, 7], [], [], []]");
  EXPECT_EQ(t.events[1].external_id, 3u);   // the args after it are still read
  EXPECT_EQ(shapes(2), "[[[2, 3], [4, 3]], []]");
  EXPECT_EQ(shapes(3), "[]");
  EXPECT_EQ(t.events[4].aux, kNoIndex);
  EXPECT_EQ(t.events[5].kind, EventKind::Runtime);
  EXPECT_EQ(t.events[5].correlation, 9u);
  EXPECT_EQ(t.events[5].aux, kNoIndex);
  EXPECT_EQ(shapes(6), "[[5, 3], [], []]");   // what record_shapes gives live for dense + 1
}

TEST(KinetoImport, AutogradLinksAndModuleCallsForTheModuleView) {
  // What torch.profiler(with_stack=True) writes for a Linear's forward and backward: the module
  // call as a python_function "nn.Module: Linear_0", the forward op with its autograd sequence
  // number (and "Fwd thread id" 0), the backward op with the same number and the forward thread.
  // Host ops keep the link in their correlation slot (event.h); a runtime call keeps its
  // correlation id. Exported and read back, the link and the module view stay the same.
  const std::string json = R"J({"traceEvents":[
     {"ph":"X","cat":"python_function","name":"nn.Module: Linear_0","pid":1,"tid":1,"ts":0,"dur":50,
       "args":{"Python parent id":1,"Python id":4,"Python module id":0}},
     {"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":1,"tid":1,"ts":10,"dur":30,
       "args":{"External id":2,"Sequence number":7,"Fwd thread id":0}},
     {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":12,"dur":2,
       "args":{"correlation":9,"External id":2}},
     {"ph":"X","cat":"cpu_op","name":"autograd::engine::evaluate_function: AddmmBackward0","pid":1,"tid":2,
       "ts":100,"dur":40,"args":{"External id":3,"Sequence number":7,"Fwd thread id":1}},
     {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":110,"dur":20,"args":{"External id":4}}
    ]})J";
  const Trace t = import_text(json);
  ASSERT_EQ(t.events.size(), 5u);
  EXPECT_EQ(t.events[0].kind, EventKind::PythonFunction);
  AutogradLink fwd = autograd_link(t.events[1]), bwd = autograd_link(t.events[3]);
  EXPECT_TRUE(fwd.present && !fwd.backward);
  EXPECT_EQ(fwd.sequence_nr, 7u);
  EXPECT_EQ(fwd.thread, 0u);   // a forward op's own thread is not in the trace
  EXPECT_TRUE(bwd.present && bwd.backward);
  EXPECT_EQ(bwd.sequence_nr, 7u);
  EXPECT_EQ(bwd.thread, 1u);
  EXPECT_FALSE(autograd_link(t.events[4]).present);
  EXPECT_EQ(t.events[2].correlation, 9u);
  auto view_of = [](const Trace& trace) {
    const ModuleView v = module_view(trace, link_launches(trace));
    EXPECT_EQ(v.rows.size(), 1u);
    return v.rows.empty() ? ModuleRow{} : v.rows[0];
  };
  const ModuleRow linear = view_of(t);
  EXPECT_EQ(linear.type, "Linear");
  EXPECT_EQ(linear.host_total_ns, 90'000);   // forward call 50 us, its backward op 40 us
  const Trace again = import_kineto_json(export_chrome_json(t), "again.json");
  ASSERT_EQ(again.events.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(again.events[i].correlation, t.events[i].correlation) << i;
  EXPECT_EQ(view_of(again).host_total_ns, 90'000);
}

TEST(KinetoImport, NewDialectNumericTidsAndTopLevelFields) {
  const std::string json = R"J({"schemaVersion":1,"distributedInfo":{"backend":"nccl","rank":1,"world_size":2},
    "traceEvents":[
     {"ph":"X","cat":"user_annotation","name":"ProfilerStep#3","pid":10,"tid":11,"ts":4458676522690.655,"dur":1.5},
     {"ph":"X","cat":"CUDA_RUNTIME","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":4458676522690.7,"dur":0.2,"args":{"correlation":5}},
     {"ph":"X","cat":"cuda_driver","name":"cuLaunchKernel","pid":10,"tid":11,"ts":4458676522690.9,"dur":0.1},
     {"ph":"X","cat":"kernel","name":"ncclKernel_AllReduce","pid":1,"tid":7,"ts":4458676522691,"dur":2,"args":{"device":1,"stream":7,"correlation":5}},
     {"ph":"X","cat":"gpu_user_annotation","name":"ProfilerStep#3","pid":1,"tid":7,"ts":4458676522691,"dur":2},
     {"ph":"X","cat":"python_function","name":"train.py(10): step","pid":10,"tid":11,"ts":4458676522690.655,"dur":1},
     {"ph":"X","cat":"cuda_sync","name":"cudaDeviceSynchronize","pid":1,"tid":7,"ts":4458676522693,"dur":1},
     {"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":4458676522600,"dur":200}
    ],"displayTimeUnit":"ms","baseTimeNanoseconds":1711964646000000000})J";
  Trace t = import_text(json);
  ASSERT_EQ(t.events.size(), 8u);
  EXPECT_EQ(t.events[0].kind, EventKind::StepMarker);
  EXPECT_EQ(t.events[0].start_ns, 4458676522690655);
  EXPECT_EQ(t.events[0].dur_ns, 1500);
  EXPECT_EQ(t.events[1].kind, EventKind::Runtime);   // cat compared case-insensitively
  EXPECT_EQ(t.events[2].kind, EventKind::Driver);
  EXPECT_EQ(t.events[3].kind, EventKind::Kernel);
  EXPECT_EQ(t.events[3].device, 1);
  EXPECT_EQ(t.events[4].kind, EventKind::GpuUserRange);   // a GPU-side step range is no step marker
  EXPECT_EQ(t.events[5].kind, EventKind::PythonFunction);
  EXPECT_EQ(t.events[6].kind, EventKind::Sync);
  EXPECT_EQ(t.events[7].kind, EventKind::Other);
  EXPECT_EQ(t.metadata.at("distributedInfo"), R"J({"backend":"nccl","rank":1,"world_size":2})J");
  EXPECT_EQ(t.metadata.at("displayTimeUnit"), "ms");
  EXPECT_EQ(t.metadata.at("baseTimeNanoseconds"), "1711964646000000000");
  EXPECT_EQ(t.metadata.at("import.time_unit"), "us");
}

TEST(KinetoImport, NanosecondTimestampsByMagnitude) {
  // 1.7e18 cannot be microseconds (year ~55,000): the file is read as nanoseconds.
  const std::string json = R"J({"traceEvents":[
     {"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1712195495519689000,"dur":63813},
     {"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1712195495519700000,"dur":5}]})J";
  Trace t = import_text(json);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].start_ns, 1712195495519689000);
  EXPECT_EQ(t.events[0].dur_ns, 63813);
  EXPECT_EQ(t.metadata.at("import.time_unit"), "ns");
}

TEST(KinetoImport, OneNanosecondOutlierDoesNotSwitchAMicrosecondFile) {
  // The unit is the majority's of the first 64 nonzero timestamps, not the first one's: an event
  // with a 1.7e18 timestamp first in a file of microseconds is skipped and counted, and the other
  // events keep their microseconds (it used to make every time in the file 1000x too short).
  for (const bool outlier_first : {true, false}) {
    std::string json = R"J({"traceEvents":[)J";
    const std::string outlier =
        R"J({"ph":"X","cat":"cpu_op","name":"x","pid":1,"tid":1,"ts":1712195495519689000,"dur":1})J";
    if (outlier_first) json += outlier + ",";
    for (int i = 0; i < 5; ++i)
      json += R"J({"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":)J" +
              std::to_string(1712195495519689 + i * 10) + R"J(,"dur":5},)J";
    if (!outlier_first) json += outlier + ",";
    json += R"J({"ph":"M","name":"process_name","pid":1,"args":{"name":"p"}}]})J";
    ImportStats st;
    Trace t = import_kineto_json(json, "input.json", {}, &st);
    ASSERT_EQ(t.events.size(), 5u) << outlier_first;
    EXPECT_EQ(t.events[0].start_ns, 1712195495519689000);
    EXPECT_EQ(t.events[0].dur_ns, 5000);
    EXPECT_EQ(t.metadata.at("import.time_unit"), "us");
    EXPECT_EQ(st.skipped_by_reason["timestamp in nanoseconds in a microsecond trace"], 1u);
  }
}

TEST(KinetoImport, OneMicrosecondOutlierInANanosecondFileIsSkipped) {
  // The other way round: a file of nanoseconds keeps them; a nonzero timestamp below 1e17 in it
  // (1973 in nanoseconds) is an outlier, skipped and counted. Zero timestamps are no outliers.
  const std::string json = R"J({"traceEvents":[
     {"ph":"X","cat":"cpu_op","name":"us","pid":1,"tid":1,"ts":1712195495519689,"dur":1},
     {"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1712195495519689000,"dur":63813},
     {"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":1712195495519700000,"dur":5},
     {"ph":"X","cat":"cpu_op","name":"zero","pid":1,"tid":1,"ts":0,"dur":7}]})J";
  ImportStats st;
  Trace t = import_kineto_json(json, "input.json", {}, &st);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].start_ns, 1712195495519689000);
  EXPECT_EQ(t.events[0].dur_ns, 63813);
  EXPECT_EQ(t.events[2].dur_ns, 7);
  EXPECT_EQ(t.metadata.at("import.time_unit"), "ns");
  EXPECT_EQ(st.skipped_by_reason["timestamp in microseconds in a nanosecond trace"], 1u);
}

TEST(KinetoImport, ArrayFormatIsAccepted) {
  // The Trace Event Format's JSON Array Format: a bare list of events.
  Trace t = import_text(R"J([{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":5,"dur":1}])J");
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].start_ns, 5000);
}

TEST(KinetoImport, UnusableEventsAreSkippedAndCounted) {
  const std::string json = R"J({"traceEvents":[
     {"ph":"X","cat":"cpu_op","name":"no ts","pid":1,"tid":1,"dur":1},
     {"ph":"X","cat":"cpu_op","name":"no dur","pid":1,"tid":1,"ts":1},
     {"ph":"X","cat":"cpu_op","name":"negative","pid":1,"tid":1,"ts":1,"dur":-3},
     {"ph":"X","cat":"kernel","name":"huge id","pid":0,"tid":7,"ts":1,"dur":1,"args":{"correlation":123456789012345678901234567890}},
     {"ph":"X","cat":"cpu_op","name":"far future","pid":1,"tid":1,"ts":1e30,"dur":1},
     {"ph":"B","cat":"cpu_op","name":"begin","pid":1,"tid":1,"ts":1},
     {"ph":"X","cat":"cpu_op","name":"bad )J"
                           "\xff\xfe"
                           R"J( name","pid":1,"tid":1,"ts":2,"dur":1},
     42,
     {"ph":"X","cat":"cpu_op","name":"ok","pid":1,"tid":1,"ts":3,"dur":1}
    ]})J";
  ImportStats stats;
  Trace t = import_text(json, &stats);
  // Kept: the badly encoded name (repaired) and "ok".
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.name_of(t.events[0]), "bad \xEF\xBF\xBD\xEF\xBF\xBD name");
  EXPECT_EQ(t.skipped_events, 7u);
  EXPECT_EQ(stats.skipped_by_reason.at("missing ts"), 1u);
  EXPECT_EQ(stats.skipped_by_reason.at("missing dur"), 1u);
  EXPECT_EQ(stats.skipped_by_reason.at("negative dur"), 1u);
  EXPECT_EQ(stats.skipped_by_reason.at("number out of 64-bit range"), 1u);
  EXPECT_EQ(stats.skipped_by_reason.at("time out of range"), 1u);
  EXPECT_EQ(stats.skipped_by_reason.at("not an object"), 1u);
  EXPECT_EQ(t.metadata.at("import.invalid_utf8_strings"), "1");
}

TEST(KinetoImport, ValidNonAsciiNamesAreKeptAndNotCountedAsInvalid) {
  // "cafe" with an e-acute (2 bytes), a check mark (3 bytes) and a rocket (4 bytes): valid UTF-8,
  // kept byte for byte; only the name with a stray 0xff byte is repaired and counted.
  const std::string valid = "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80";
  const std::string json = R"J({"traceEvents":[{"ph":"X","cat":"cpu_op","name":")J" + valid +
                           R"J(","pid":1,"tid":1,"ts":1,"dur":1},
     {"ph":"X","cat":"cpu_op","name":"bad )J"
                           "\xff"
                           R"J(","pid":1,"tid":1,"ts":2,"dur":1}]})J";
  Trace t = import_text(json);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.name_of(t.events[0]), valid);
  EXPECT_EQ(t.name_of(t.events[1]), "bad \xEF\xBF\xBD");
  EXPECT_EQ(t.metadata.at("import.invalid_utf8_strings"), "1");
}

TEST(KinetoImport, ErrorsNameTheFileAndThePlace) {
  {
    const std::string e = error_of("");
    EXPECT_NE(e.find("bad.json: the file is empty"), std::string::npos) << e;
  }
  {
    // The missing comma: byte 52 is the `"` of "ts" in the second event (16 + 25 + 1 + 10 bytes
    // before it).
    const std::string e = error_of(R"J({"traceEvents":[{"ph":"X","ts":1,"dur":1},{"ph":"X" "ts":2}]})J");
    EXPECT_NE(e.find("bad.json: invalid JSON at byte 52 (in traceEvents[1])"), std::string::npos) << e;
  }
  {
    const std::string e = error_of(R"J({"traceEvents":[{"ph":"X","ts":1,"dur":1},)J");
    EXPECT_NE(e.find("ends early"), std::string::npos) << e;
  }
  {
    const std::string e = error_of(R"J("just a string")J");
    EXPECT_NE(e.find("top-level JSON value is a string"), std::string::npos) << e;
  }
  {
    const std::string e = error_of(R"J({"schemaVersion":1})J");
    EXPECT_NE(e.find("no traceEvents list"), std::string::npos) << e;
  }
  {
    const std::string e = error_of(std::string(1000, '[') + std::string(1000, ']'));
    EXPECT_NE(e.find("nested more than 64 levels"), std::string::npos) << e;
  }
  {
    // The same inside an op's "Input Dims" (read by its own list writer, one bit a level in a 64-bit
    // word: before the limit covered it, level 64 shifted past the word's end).
    const std::string e = error_of(R"J({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":1,)J"
                                   R"J("dur":1,"args":{"Input Dims":)J" +
                                   std::string(100, '[') + std::string(100, ']') + "}}]}");
    EXPECT_NE(e.find("nested more than 64 levels"), std::string::npos) << e;
  }
  {
    // The size limit stands in for "a 2 GB file": the read stops at the limit, never buffering.
    ImportOptions o;
    o.max_bytes = 100;
    std::string big = R"J({"traceEvents":[)J";
    for (int i = 0; i < 50; ++i)
      big += R"J({"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1},)J";
    big += "{}]}";
    const std::string e = error_of(big, o);
    EXPECT_NE(e.find("larger than the limit of 100 bytes"), std::string::npos) << e;
  }
}

#ifdef GPUPROF_SHARED_TRACES
TEST(KinetoImport, TruncatedAndCorruptGzip) {
  const std::string src = std::string(GPUPROF_SHARED_TRACES) + "/hta_mi250_rocm/rank0.json.gz";
  std::ifstream in(src, std::ios::binary);
  if (!in) GTEST_SKIP() << "shared traces not found at " << src;
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = testing::TempDir() + "/cut.json.gz";
  {
    std::ofstream out(cut, std::ios::binary);
    out.write(gz.data(), std::streamsize(gz.size() / 2));
  }
  try {
    import_kineto_trace(cut);
    FAIL() << "a truncated gzip file was accepted";
  } catch (const TraceImportError& e) {
    EXPECT_NE(std::string(e.what()).find("gzip data ends early"), std::string::npos) << e.what();
    EXPECT_GT(e.byte_offset, 0);
  }
  const std::string bad = testing::TempDir() + "/bad.json.gz";
  {
    std::string broken = gz;
    for (size_t i = 100; i < 200; ++i) broken[i] = char(0x55);
    std::ofstream out(bad, std::ios::binary);
    out.write(broken.data(), std::streamsize(broken.size()));
  }
  try {
    import_kineto_trace(bad);
    FAIL() << "a corrupt gzip file was accepted";
  } catch (const TraceImportError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("corrupt gzip") != std::string::npos || m.find("invalid JSON") != std::string::npos) << m;
  }
}

TEST(KinetoImport, EveryRealTraceReadsAndAddsUp) {
  const char* files[] = {"hta_2xv100_ddp/rank0.json.gz",
                         "hta_a100_nccl/rank0.json.gz",
                         "hta_cpu_only/rank-34.pt.trace.json.gz",
                         "hta_mi250_rocm/rank0.json.gz",
                         "hta_v100_ns/rank-0.pt.trace.json.gz",
                         "tb_resnet50_v100_nw0/worker0.1623143089861.pt.trace.json.gz",
                         "tb_resnet50_v100_nw0/worker0.1623143566756.pt.trace.json.gz"};
  for (const char* f : files) {
    const std::string path = std::string(GPUPROF_SHARED_TRACES) + "/" + f;
    if (!std::ifstream(path)) GTEST_SKIP() << "shared traces not found at " << path;
    Trace t = import_kineto_trace(path);
    EXPECT_GT(t.events.size(), 0u) << f;
    EXPECT_EQ(t.skipped_events, 0u) << f;
    const BreakdownResult r = compute_breakdown(t);
    ASSERT_FALSE(r.steps.empty()) << f;
    for (const StepBreakdown& s : r.steps) {
      int64_t sum = 0;
      for (int64_t v : s.ns) {
        EXPECT_GE(v, 0) << f << " step " << s.step;
        sum += v;
      }
      EXPECT_EQ(sum, s.total_ns()) << f << " step " << s.step;
    }
  }
}

TEST(ChromeExport, RoundTripKeepsEveryEvent) {
  const std::string path = std::string(GPUPROF_SHARED_TRACES) + "/hta_mi250_rocm/rank0.json.gz";
  if (!std::ifstream(path)) GTEST_SKIP() << "shared traces not found at " << path;
  const Trace a = import_kineto_trace(path);
  const std::string out = testing::TempDir() + "/rt.json.gz";
  export_chrome_trace(a, out);
  const Trace b = import_kineto_trace(out);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].start_ns, b.events[i].start_ns);
    EXPECT_EQ(a.events[i].dur_ns, b.events[i].dur_ns);
    EXPECT_EQ(a.events[i].kind, b.events[i].kind);
    EXPECT_EQ(a.events[i].correlation, b.events[i].correlation);
    EXPECT_EQ(a.name_of(a.events[i]), b.name_of(b.events[i]));
  }
  EXPECT_EQ(a.devices.size(), b.devices.size());
  EXPECT_EQ(a.kernels.size(), b.kernels.size());
}
#endif

TEST(KinetoImport, RandomEditsOfATraceNeverCrash) {
  // A deterministic mini-fuzzer (the atheris test drives the binding for longer): 3000 copies of a
  // small trace with random byte edits and cuts. Each must import or throw TraceImportError, and
  // what imports must analyse and export. Run under -fsanitize=address,undefined to check memory.
  const std::string seed = R"J({"schemaVersion":1,"deviceProperties":[{"id":0,"name":"G","numSms":80}],
    "distributedInfo":{"backend":"nccl","rank":0},"traceEvents":[
     {"ph":"X","cat":"cpu_op","name":"ProfilerStep#1","pid":1,"tid":"1","ts":1.5,"dur":100},
     {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":3,"args":{"correlation":9}},
     {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":"stream 7","ts":6,"dur":50,"args":{"device":0,
       "correlation":9,"grid":[1,2,3],"block":[64,1,1],"blocks per SM":0.5}},
     {"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD (Pinned -> Device)","pid":0,"tid":7,"ts":60,"dur":5,"args":{"bytes":64}},
     {"ph":"i","s":"t","name":"[memory]","pid":1,"tid":1,"ts":3,"args":{"Device Type":1,"Device Id":0,"Bytes":-8}},
     {"ph":"s","id":9,"pid":1,"tid":1,"ts":2,"cat":"ac2g","name":"ac2g"}]})J";
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {   // xorshift: reproducible without <random>'s platform variance
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return n == 0 ? 0 : state % n;
  };
  const char alphabet[] = "{}[]:,\"\\-+.eE0123456789 \x00\xff\xc3tfnul";
  int imported = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = seed;
    const int edits = 1 + int(next(5));
    for (int k = 0; k < edits && !text.empty(); ++k) {
      const size_t pos = next(text.size());
      const char c = alphabet[next(sizeof alphabet - 1)];
      switch (next(4)) {
        case 0: text[pos] = c; break;
        case 1: text.insert(text.begin() + long(pos), c); break;
        case 2: text.erase(pos, 1 + next(8)); break;
        default: text.resize(pos); break;
      }
    }
    try {
      Trace t = import_kineto_json(text, "mutant.json");
      compute_breakdown(t);
      const Trace again = import_kineto_json(export_chrome_json(t), "again.json");
      EXPECT_EQ(again.events.size(), t.events.size());
      ++imported;
    } catch (const TraceImportError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("mutant.json: ", 0), 0u) << e.what();
      ++refused;
    }
  }
  // Both outcomes occur: the edits are neither all harmless nor all fatal.
  EXPECT_GT(imported, 100);
  EXPECT_GT(refused, 100);
}

// ---- two threads for a large plain text (ImportOptions::split_min_bytes) -------------------------
namespace {

// A Kineto-style text of n events: steps, ops, runtime calls, kernels with launch args, copies,
// memory instants and metadata records, with deviceProperties and other keys after traceEvents.
// `edit(i, ev)` may change event i's text.
std::string kineto_text(int n, const std::function<void(int, std::string&)>& edit = nullptr,
                        const std::string& ts_base = "1700000000000000") {
  std::string out = "{\"schemaVersion\": 1, \"traceName\": \"first\",\n\"traceEvents\": [\n";
  for (int i = 0; i < n; ++i) {
    const std::string ts = ts_base.substr(0, ts_base.size() - 6) + std::to_string(100000 + i * 7);
    std::string ev;
    switch (i % 7) {
      case 0:
        ev = "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#" + std::to_string(i / 7) +
             "\", \"pid\": 10, \"tid\": 11, \"ts\": " + ts + ", \"dur\": 6.5}";
        break;
      case 1:
        ev = "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::op" + std::to_string(i % 13) +
             "\", \"pid\": 10, \"tid\": 11, \"ts\": " + ts +
             ".250, \"dur\": 3, \"args\": {\"External id\": " + std::to_string(i) + ", \"Input Dims\": [[4, " +
             std::to_string(i % 11) + "], []], \"Input type\": [\"float\", \"\"]" +
             (i % 3 == 0 ? ", \"Sequence number\": " + std::to_string(i) + ", \"Concrete Inputs\": [\"\", \"[" +
                               std::to_string(i % 5) + ", 1]\"], \"flops\": " + std::to_string(i * 8)
                         : std::string()) +
             "}}";
        break;
      case 2:
        ev = "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 10, \"tid\": "
             "11, \"ts\": " +
             ts + ", \"dur\": 1, \"args\": {\"External id\": " + std::to_string(i - 1) +
             ", \"correlation\": " + std::to_string(i) + "}}";
        break;
      case 3:
        ev = "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"kernel_" + std::to_string(i % 5) +
             "\", \"pid\": 0, \"tid\": 7, \"ts\": " + ts +
             ", \"dur\": 2, \"args\": {\"device\": 0, \"stream\": 7, "
             "\"correlation\": " +
             std::to_string(i - 1) + ", \"grid\": [" + std::to_string(i) +
             ", 1, 1], "
             "\"block\": [128, 1, 1], \"registers per thread\": 32, \"shared memory\": 0, \"blocks per SM\": 1.5, "
             "\"warps per SM\": 6, \"est. achieved occupancy %\": 40}}";
        break;
      case 4:
        ev =
            "{\"ph\": \"X\", \"cat\": \"gpu_memcpy\", \"name\": \"Memcpy HtoD (Pageable -> Device)\", \"pid\": 0, "
            "\"tid\": 7, \"ts\": " +
            ts + ", \"dur\": 1, \"args\": {\"device\": 0, \"stream\": 7, \"bytes\": " + std::to_string(1024 * i) +
            "}}";
        break;
      case 5:
        ev = "{\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", \"pid\": 10, \"tid\": 11, "
             "\"ts\": " +
             ts + ", \"args\": {\"Bytes\": " + std::to_string(512 * i) +
             ", \"Total Allocated\": " + std::to_string(4096 * i) +
             ", \"Total Reserved\": 1048576, \"Device Type\": 1, \"Device Id\": 0}}";
        break;
      default:
        ev = "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 10, \"tid\": 11, \"args\": {\"name\": \"t\"}}";
        break;
    }
    if (edit) edit(i, ev);
    out += "  " + ev + (i + 1 < n ? ",\n" : "\n");
  }
  out +=
      "],\n\"deviceProperties\": [{\"id\": 0, \"name\": \"GPU\", \"totalGlobalMem\": 1000, \"computeMajor\": 9, "
      "\"computeMinor\": 0, \"numSms\": 132}],\n\"traceName\": \"last\", \"baseTimeNanoseconds\": 17}\n";
  return out;
}

ImportOptions one_thread() {
  ImportOptions o;
  o.split_min_bytes = 0;
  return o;
}

ImportOptions two_threads() {
  ImportOptions o;
  o.split_min_bytes = 1;
  o.gzip_split_cpus = 1;   // a gzip file too, without measuring first
  return o;
}

bool two_cpus() { return sysconf(_SC_NPROCESSORS_ONLN) >= 2; }

}  // namespace

TEST(SplitImport, TwoThreadsGiveWhatOneGives) {
  const std::string text = kineto_text(2000);
  ImportStats one, two;
  const std::string a = test_support::dump_import(text, one_thread(), &one);
  const std::string b = test_support::dump_import(text, two_threads(), &two);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(one.split);
  if (two_cpus()) EXPECT_TRUE(two.split);   // the path under test was taken
  // Everything is there: 2000 records; the 286 metadata records ignored, memory instants kept as
  // samples; kernels, copies and names (re-interned in order of first use) in file order.
  EXPECT_EQ(two.records, 2000u);
  EXPECT_NE(b.find("meta 'traceName' = 'last'"), std::string::npos);   // the later key wins
  EXPECT_NE(b.find("dev 0 'GPU'"), std::string::npos);                      // after traceEvents
}

TEST(SplitImport, ABoundaryGuessedWrongIsReadByTheFirstThread) {
  // Text that looks like "}, {" inside strings and inside args lists all around the middle: the
  // second thread may start inside a string or a nested list; the first thread finds it was not
  // between two events and reads on alone. The result is the same.
  for (const int every : {1, 2, 3}) {
    const std::string text = kineto_text(1500, [every](int i, std::string& ev) {
      if (i % every == 0 && ev.find("\"cpu_op\"") != std::string::npos)
        ev.insert(ev.find("aten::op"), "x}, {\\\"y\\\": 1}, {z ");
      if (i % every == 1 && ev.find("\"args\": {") != std::string::npos)
        ev.insert(ev.find("\"args\": {") + 9, "\"list\": [{\"a\": 1}, {\"b\": 2},\n {\"c\": [3]}], ");
    });
    EXPECT_EQ(test_support::dump_import(text, one_thread()), test_support::dump_import(text, two_threads()))
        << every;
  }
  // A bare list of events (the Trace Event Format's array form): never in {"traceEvents": [...]}.
  std::string bare = kineto_text(1000);
  bare =
      "[" + bare.substr(bare.find("[\n") + 2, bare.find("],\n\"deviceProperties\"") - bare.find("[\n") - 2) + "]";
  EXPECT_EQ(test_support::dump_import(bare, one_thread()), test_support::dump_import(bare, two_threads()));
}

TEST(SplitImport, ErrorsAndUnitsComeOutAsFromOneThread) {
  const int n = 1500;
  // A broken event in the second half, then one in the first: the same message, offset and index.
  for (const int bad : {n * 3 / 4, n / 4, n - 1}) {
    const std::string text = kineto_text(n, [bad](int i, std::string& ev) {
      if (i == bad) ev.erase(ev.find("\"name\": \"") + 8, 1);   // a missing quote
    });
    const std::string one = test_support::dump_import(text, one_thread());
    EXPECT_EQ(one.rfind("error ", 0), 0u) << one;
    EXPECT_EQ(one, test_support::dump_import(text, two_threads())) << bad;
  }
  // Timestamps in ns in the second half only (the unit is the first 64 nonzero timestamps'
  // majority's): the second thread's own vote differs, so the first thread reads those events
  // itself (and skips them as nanoseconds in a microsecond trace).
  const std::string mixed = kineto_text(n, [n](int i, std::string& ev) {
    if (i > n / 2) {
      const size_t ts = ev.find("\"ts\": ");
      if (ts != std::string::npos) ev.insert(ts + 6, "10");   // 1.7e15 us -> 1.017e17: nanoseconds
    }
  });
  ImportStats st;
  EXPECT_EQ(test_support::dump_import(mixed, one_thread()), test_support::dump_import(mixed, two_threads(), &st));
  EXPECT_FALSE(st.split);   // refused: the first thread read on
  // Only zero timestamps before the middle: the first thread has no vote on the unit where the
  // second thread starts; the second thread's votes decide it, as they would for one thread.
  const std::string zeros = kineto_text(n, [n](int i, std::string& ev) {
    if (i < n / 2) {
      const size_t ts = ev.find("\"ts\": ");
      if (ts != std::string::npos) ev.replace(ts + 6, ev.find_first_of(",}", ts) - ts - 6, "0");
    }
  });
  EXPECT_EQ(test_support::dump_import(zeros, one_thread()), test_support::dump_import(zeros, two_threads(), &st));
  if (two_cpus()) EXPECT_TRUE(st.split);
  // Three nanosecond outliers and otherwise zeros before the middle: the first thread's 3 votes
  // and the second thread's first 61 decide microseconds, as one thread's first 64 votes do; the
  // outliers are skipped the same way.
  const std::string outliers = kineto_text(n, [n](int i, std::string& ev) {
    const size_t ts = ev.find("\"ts\": ");
    if (i < n / 2 && ts != std::string::npos)
      ev.replace(ts + 6, ev.find_first_of(",}", ts) - ts - 6, i % 200 == 7 ? "1712195495519689000" : "0");
  });
  const std::string outliers_one = test_support::dump_import(outliers, one_thread());
  EXPECT_EQ(outliers_one, test_support::dump_import(outliers, two_threads(), &st));
  if (two_cpus()) EXPECT_TRUE(st.split);
  EXPECT_NE(outliers_one.find("timestamp in nanoseconds in a microsecond trace"), std::string::npos)
      << outliers_one;
  // Invalid UTF-8 in names on both sides: counted once each, cleaned the same.
  const std::string utf = kineto_text(n, [](int i, std::string& ev) {
    const size_t at = ev.find("aten::op");
    if (i % 97 == 1 && at != std::string::npos) ev.insert(at, "\xff\xfe");
  });
  const std::string utf_one = test_support::dump_import(utf, one_thread());
  EXPECT_EQ(utf_one, test_support::dump_import(utf, two_threads(), &st));
  if (two_cpus()) EXPECT_TRUE(st.split);
  EXPECT_NE(utf_one.find("meta 'import.invalid_utf8_strings' = '3'"), std::string::npos);   // ops i = 1, 680, 1359
}

TEST(SplitImport, AFileReadInTwoHalvesIsTheTextReadInOne) {
  const std::string text = kineto_text(3000);
  char path[] = "/tmp/gpuprof_split_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  close(fd);
  ImportStats st;
  const Trace t = import_kineto_trace(path, two_threads(), &st);
  if (two_cpus()) EXPECT_TRUE(st.split);
  EXPECT_EQ(st.json_bytes, text.size());
  ImportStats one;
  const Trace u = import_kineto_json(text, "input.json", one_thread(), &one);
  ASSERT_EQ(t.events.size(), u.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    EXPECT_EQ(t.events[i].name, u.events[i].name);
    EXPECT_EQ(t.events[i].start_ns, u.events[i].start_ns);
    EXPECT_EQ(t.events[i].aux, u.events[i].aux);
  }
  EXPECT_EQ(t.metadata, u.metadata);
  std::remove(path);
}

// ---- two threads for a large gzip file: the second inflates from the start itself --------------
namespace {

// `text` gzip-compressed into a new file (by the gzip program); "" when it cannot be.
std::string gzip_file(const std::string& text, const std::string& name) {
  // (named per process: ctest may run this test binary several times at once)
  const std::string plain = testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
  {
    std::ofstream out(plain, std::ios::binary);
    out.write(text.data(), std::streamsize(text.size()));
  }
  if (std::system(("gzip -n -f '" + plain + "' 2>/dev/null").c_str()) != 0) return "";
  return plain + ".gz";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}   // namespace

TEST(SplitImport, AGzipFileReadByTwoThreadsIsReadAsByOne) {
  const std::string text = kineto_text(4000);
  const std::string gz = gzip_file(text, "split.json");
  if (gz.empty()) GTEST_SKIP() << "no gzip program to write the test file";
  ImportStats one, two;
  const std::string a = test_support::dump_import_file(gz, one_thread(), &one);
  EXPECT_EQ(a, test_support::dump_import_file(gz, two_threads(), &two));
  EXPECT_EQ(a.rfind("records 4000 ", 0), 0u) << a.substr(0, 200);
  EXPECT_TRUE(two.compressed);
  EXPECT_EQ(two.json_bytes, text.size());
  EXPECT_FALSE(one.split);
  if (two_cpus()) EXPECT_TRUE(two.split);   // the path under test was taken
  // With fewer CPUs than gzip_split_cpus a gzip file is read by one thread.
  ImportOptions few = two_threads();
  few.gzip_split_cpus = 1 << 20;
  ImportStats st;
  EXPECT_EQ(a, test_support::dump_import_file(gz, few, &st));
  EXPECT_FALSE(st.split);
  // And as the same text read from memory or as a plain file.
  EXPECT_EQ(a.substr(a.find('\n')), test_support::dump_import(text, one_thread()).substr(a.find('\n')));
}

TEST(SplitImport, AGzipFileUnderAnEventCapIsReadAsByOne) {
  // The Python import always passes a cap (its memory budget's). The second thread keeps at most
  // half of it; the halves are joined only when together they keep no more than the cap.
  const auto events_in = [](const std::string& dump) {
    size_t n = 0;
    for (size_t at = dump.find("\nev "); at != std::string::npos; at = dump.find("\nev ", at + 1)) ++n;
    return n;
  };
  const auto capped = [](ImportOptions o, size_t cap) {
    o.max_events = cap;
    return o;
  };
  const std::string text = kineto_text(4000);
  const std::string gz = gzip_file(text, "capped.json");
  if (gz.empty()) GTEST_SKIP() << "no gzip program to write the test file";
  const size_t kept = events_in(test_support::dump_import_file(gz, one_thread()));
  ASSERT_GT(kept, 2000u);   // steps, ops, launches, kernels, copies: 5 of each 7 records
  ImportStats st;
  // A cap the trace just reaches: both threads read, the second less than half of it (3/7 of the text).
  const std::string at_cap = test_support::dump_import_file(gz, capped(one_thread(), kept));
  EXPECT_EQ(at_cap, test_support::dump_import_file(gz, capped(two_threads(), kept), &st));
  EXPECT_EQ(events_in(at_cap), kept);
  if (two_cpus()) EXPECT_TRUE(st.split);
  // One event fewer: one thread stops at the cap; so do two, with the same message, offset and index.
  const std::string over = test_support::dump_import_file(gz, capped(one_thread(), kept - 1));
  EXPECT_EQ(over.rfind("error ", 0), 0u) << over.substr(0, 200);
  EXPECT_NE(over.find("the max_events limit"), std::string::npos) << over;
  EXPECT_EQ(over, test_support::dump_import_file(gz, capped(two_threads(), kept - 1)));
  // The first 4/7 of the text all metadata records (ignored): the second half holds every kept
  // event, more than half the cap; the second thread stops and the first reads that half itself.
  const std::string late = kineto_text(4000, [](int i, std::string& ev) {
    if (i < 2400)
      ev = "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 10, \"tid\": 11, \"args\": {\"name\": \"t\"}}";
  });
  const std::string late_gz = gzip_file(late, "capped_late.json");
  const size_t late_kept = events_in(test_support::dump_import_file(late_gz, one_thread()));
  ASSERT_GT(late_kept, 1000u);
  const std::string late_one = test_support::dump_import_file(late_gz, capped(one_thread(), late_kept));
  EXPECT_EQ(late_one, test_support::dump_import_file(late_gz, capped(two_threads(), late_kept), &st));
  EXPECT_EQ(events_in(late_one), late_kept);
  EXPECT_FALSE(st.split);   // refused: the second half kept more than half the cap
}

TEST(SplitImport, AGzipFileWithBoundariesInStringsOrErrorsIsReadAsByOne) {
  const int n = 3000;
  std::vector<std::pair<std::string, std::string>> texts;
  // "}, {" inside strings and nested lists everywhere: the second thread may start in one.
  texts.emplace_back("strings", kineto_text(n, [](int i, std::string& ev) {
                       if (ev.find("\"cpu_op\"") != std::string::npos)
                         ev.insert(ev.find("aten::op"), "x}, {\\\"y\\\": 1}, {z ");
                       if (i % 2 == 1 && ev.find("\"args\": {") != std::string::npos)
                         ev.insert(ev.find("\"args\": {") + 9,
                                   "\"list\": [{\"a\": 1}, {\"b\": 2},\n {\"c\": [3]}], ");
                     }));
  // A broken event in the second half, in the first, and the last.
  for (const int bad : {n * 3 / 4, n / 4, n - 1})
    texts.emplace_back("bad" + std::to_string(bad), kineto_text(n, [bad](int i, std::string& ev) {
                         if (i == bad) ev.erase(ev.find("\"name\": \"") + 8, 1);
                       }));
  // Nanosecond timestamps in the second half only: the first thread reads on.
  texts.emplace_back("units", kineto_text(n, [n](int i, std::string& ev) {
                       const size_t ts = ev.find("\"ts\": ");
                       if (i > n / 2 && ts != std::string::npos) ev.insert(ts + 6, "10");
                     }));
  for (const auto& [name, text] : texts) {
    const std::string gz = gzip_file(text, name + ".json");
    if (gz.empty()) GTEST_SKIP() << "no gzip program to write the test file";
    EXPECT_EQ(test_support::dump_import_file(gz, one_thread()), test_support::dump_import_file(gz, two_threads()))
        << name;
  }
}

TEST(SplitImport, DamagedOrUnusualGzipFilesAreReadAsByOne) {
  const std::string text = kineto_text(3000);
  const std::string gz = gzip_file(text, "damaged.json");
  if (gz.empty()) GTEST_SKIP() << "no gzip program to write the test file";
  const std::string bytes = read_bytes(gz);
  const std::string path = testing::TempDir() + "/" + std::to_string(getpid()) + "_damaged_copy.json.gz";
  auto same = [&](const std::string& what, const std::string& file_bytes, bool expect_error) {
    write_bytes(path, file_bytes);
    const std::string one = test_support::dump_import_file(path, one_thread());
    EXPECT_EQ(one, test_support::dump_import_file(path, two_threads())) << what;
    EXPECT_EQ(one.rfind("error ", 0) == 0, expect_error) << what << ": " << one.substr(0, 300);
  };
  // Cut off in the second half (its trailer, so its length, is gone) and in the first.
  same("cut at 3/4", bytes.substr(0, bytes.size() * 3 / 4), true);
  same("cut at 1/4", bytes.substr(0, bytes.size() / 4), true);
  // A flipped byte in the second half's compressed data, and in the first's.
  for (const size_t at : {bytes.size() * 3 / 4, bytes.size() / 3}) {
    std::string broken = bytes;
    broken[at] = char(broken[at] ^ 0x55);
    same("flipped byte at " + std::to_string(at), broken, true);
  }
  // A length in the trailer that is not the text's: the second thread starts elsewhere (or, past
  // the end, nowhere), and the length check fails at the end for both.
  for (const uint32_t len : {uint32_t(text.size() / 8), uint32_t(text.size() * 3), uint32_t(0)}) {
    std::string lying = bytes;
    for (int k = 0; k < 4; ++k) lying[lying.size() - 4 + k] = char((len >> (8 * k)) & 0xFF);
    same("trailer length " + std::to_string(len), lying, true);
  }
  // Two members back to back (`cat a.gz b.gz`): the last member's length is only part of the text.
  const std::string small = gzip_file("\n", "member.json");
  same("two members", bytes + read_bytes(small), false);
  same("a short member first", read_bytes(small) + bytes, false);
}
