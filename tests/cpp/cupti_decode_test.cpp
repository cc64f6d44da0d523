// The CUPTI decoder, fed records built by hand from the CUPTI headers' own structs: every field a
// record carries must land in the right place of the Event / KernelInfo / CopyInfo.
#ifdef GPUPROF_HAVE_CUPTI

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "cupti_decode.h"

using namespace gpuprof;
using namespace gpuprof::collect::cupti;

namespace {

// A resolver standing in for cuptiGetCallbackName, with the names CUPTI 13 returns.
ApiNames test_names() {
  return ApiNames([](CUpti_CallbackDomain d, uint32_t cbid) -> std::string {
    static const std::map<std::pair<int, uint32_t>, std::string> table = {
        {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000}, "cudaLaunchKernel_v7000"},
        {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020}, "cudaGetDevice_v3020"},
        {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel}, "cuLaunchKernel"},
        {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2}, "cuMemcpyHtoD_v2"},
        {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent}, "cuCtxGetCurrent"},
        {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDeviceGetAttribute}, "cuDeviceGetAttribute"}};
    auto it = table.find({int(d), cbid});
    return it == table.end() ? std::string() : it->second;
  });
}

template <typename T>
T zeroed() {
  T r;
  std::memset(&r, 0, sizeof(r));
  return r;
}

const CUpti_Activity& as_activity(const void* r) { return *static_cast<const CUpti_Activity*>(r); }

}  // namespace

TEST(CuptiDecode, KernelCarriesLaunchGeometryRegistersSharedMemoryAndCorrelation) {
  auto k = zeroed<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1'000'000;
  k.end = 1'250'000;
  k.deviceId = 1;
  k.streamId = 7;
  k.gridX = 120, k.gridY = 2, k.gridZ = 1;
  k.blockX = 256, k.blockY = 1, k.blockZ = 1;
  k.registersPerThread = 40;
  k.staticSharedMemory = 4096;
  k.dynamicSharedMemory = 8192;
  k.correlationId = 77;
  k.name = "_Z11spin_kernelx";
  Trace t;
  auto names = test_names();
  const DecodeResult r = decode_record(as_activity(&k), names, t);
  ASSERT_EQ(r.what, DecodeResult::What::Event);
  ASSERT_EQ(t.events.size(), 1u);
  const Event& e = t.events[0];
  EXPECT_EQ(e.kind, EventKind::Kernel);
  EXPECT_EQ(t.name_of(e), "spin_kernel(long long)");   // demangled
  EXPECT_EQ(e.start_ns, 1'000'000);
  EXPECT_EQ(e.dur_ns, 250'000);
  EXPECT_EQ(e.device, 1);
  EXPECT_EQ(e.tid, 7u);   // device events: the stream
  EXPECT_EQ(e.correlation, 77u);
  EXPECT_EQ(e.external_id, 0u);
  ASSERT_EQ(e.aux, 0u);
  ASSERT_EQ(t.kernels.size(), 1u);
  const KernelInfo& ki = t.kernels[0];
  EXPECT_EQ(ki.grid[0], 120);
  EXPECT_EQ(ki.grid[1], 2);
  EXPECT_EQ(ki.grid[2], 1);
  EXPECT_EQ(ki.block[0], 256);
  EXPECT_EQ(ki.block[1], 1);
  EXPECT_EQ(ki.block[2], 1);
  EXPECT_EQ(ki.blocks(), 240);
  EXPECT_EQ(ki.registers_per_thread, 40);
  EXPECT_EQ(ki.shared_mem_bytes, 4096 + 8192);   // static + dynamic
  EXPECT_EQ(ki.est_occupancy_pct, -1.0f);         // not Kineto's to give here
  EXPECT_EQ(ki.graph_id, 0u);                     // launched on its own
}

TEST(CuptiDecode, AGraphKernelKeepsItsGraphIdAndItsLaunchCorrelation) {
  // A kernel replayed from a CUDA graph: CUPTI gives the graph's id and the correlation id of the
  // cudaGraphLaunch call, which every kernel of that replay shares.
  Trace t;
  auto names = test_names();
  for (uint64_t node = 1; node <= 2; ++node) {
    auto k = zeroed<CUpti_ActivityKernel10>();
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 1'000 * node;
    k.end = k.start + 500;
    k.correlationId = 91;
    k.graphId = 12;
    k.graphNodeId = node;
    k.name = "_Z4nodev";
    ASSERT_EQ(decode_record(as_activity(&k), names, t).what, DecodeResult::What::Event);
  }
  ASSERT_EQ(t.kernels.size(), 2u);
  for (const Event& e : t.events) {
    EXPECT_EQ(e.correlation, 91u);
    EXPECT_EQ(t.kernels[e.aux].graph_id, 12u);
  }
}

TEST(CuptiDecode, UnmangledKernelNameIsKeptAndNullNameIsNamed) {
  auto k = zeroed<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1'000;
  k.end = 2'000;
  k.name = "ampere_sgemm_128x64_tn";
  Trace t;
  auto names = test_names();
  decode_record(as_activity(&k), names, t);
  k.name = nullptr;
  decode_record(as_activity(&k), names, t);
  EXPECT_EQ(t.name_of(t.events[0]), "ampere_sgemm_128x64_tn");
  EXPECT_EQ(t.name_of(t.events[1]), "<unnamed kernel>");
  EXPECT_EQ(t.events[1].aux, 1u);
}

TEST(CuptiDecode, KernelNamesAreDemangledOnceAndRecheckedWhenTheAddressIsReused) {
  auto names = test_names();
  char buffer[32] = "_Z11spin_kernelx";
  const std::string& first = names.kernel_name(buffer);
  EXPECT_EQ(first, "spin_kernel(long long)");
  EXPECT_EQ(&names.kernel_name(buffer), &first);   // cached: the same string object
  std::strcpy(buffer, "_Z4gemmPf");                 // another kernel's name at the same address
  EXPECT_EQ(names.kernel_name(buffer), "gemm(float*)");
  EXPECT_EQ(names.kernel_name(nullptr), "<unnamed kernel>");
}

TEST(CuptiDecode, PageableAndPinnedHostToDeviceCopiesAreTellable) {
  auto m = zeroed<CUpti_ActivityMemcpy6>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 64ull << 20;
  m.start = 5'000;
  m.end = 5'000 + 3'000'000;
  m.deviceId = 0;
  m.streamId = 13;
  m.correlationId = 5900;          // the driver call (cuMemcpyHtoDAsync) inside ...
  m.runtimeCorrelationId = 900;    // ... the runtime call (cudaMemcpyAsync): the one we link to
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&m), names, t).what, DecodeResult::What::Event);
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  m.correlationId = 901;           // made through the driver API directly: no runtime call
  m.runtimeCorrelationId = 0;
  decode_record(as_activity(&m), names, t);

  ASSERT_EQ(t.events.size(), 2u);
  ASSERT_EQ(t.copies.size(), 2u);
  const Event& pageable = t.events[0];
  EXPECT_EQ(pageable.kind, EventKind::Memcpy);
  EXPECT_EQ(t.name_of(pageable), "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(pageable.start_ns, 5'000);
  EXPECT_EQ(pageable.dur_ns, 3'000'000);
  EXPECT_EQ(pageable.device, 0);
  EXPECT_EQ(pageable.tid, 13u);
  EXPECT_EQ(pageable.correlation, 900u);
  EXPECT_EQ(pageable.aux, 0u);
  EXPECT_EQ(t.copies[0].bytes, int64_t(64) << 20);
  EXPECT_EQ(t.copies[0].kind, CopyKind::HtoD);
  EXPECT_EQ(t.copies[0].src, MemoryKind::Pageable);
  EXPECT_EQ(t.copies[0].dst, MemoryKind::Device);

  EXPECT_EQ(t.name_of(t.events[1]), "Memcpy HtoD (Pinned -> Device)");
  EXPECT_EQ(t.events[1].aux, 1u);
  EXPECT_EQ(t.events[1].correlation, 901u);
  EXPECT_EQ(t.copies[1].src, MemoryKind::Pinned);
}

TEST(CuptiDecode, PeerToPeerCopiesComeAsMemcpy2RecordsWithTheirOwnLayout) {
  // CUPTI reports copies between two GPUs only as CUPTI_ACTIVITY_KIND_MEMCPY2 records
  // (CUpti_ActivityMemcpyPtoP4: src/dst device and context ids where Memcpy6 has
  // runtimeCorrelationId), so reading them as MEMCPY records would take the wrong fields.
  auto m = zeroed<CUpti_ActivityMemcpyPtoP4>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 256ull << 20;
  m.start = 10'000;
  m.end = 10'000 + 5'000'000;
  m.deviceId = 1;
  m.srcDeviceId = 0;
  m.dstDeviceId = 1;
  m.streamId = 21;
  m.correlationId = 4242;
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&m), names, t).what, DecodeResult::What::Event);
  // The same copy reported as device-to-device between two GPUs is still peer to peer.
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
  decode_record(as_activity(&m), names, t);
  // Within one GPU a DtoD stays DtoD.
  m.srcDeviceId = 1;
  decode_record(as_activity(&m), names, t);
  ASSERT_EQ(t.events.size(), 3u);
  const Event& e = t.events[0];
  EXPECT_EQ(e.kind, EventKind::Memcpy);
  EXPECT_EQ(t.name_of(e), "Memcpy PtoP (Device -> Device)");
  EXPECT_EQ(e.start_ns, 10'000);
  EXPECT_EQ(e.dur_ns, 5'000'000);
  EXPECT_EQ(e.device, 1);
  EXPECT_EQ(e.tid, 21u);
  EXPECT_EQ(e.correlation, 4242u);
  ASSERT_EQ(t.copies.size(), 3u);
  EXPECT_EQ(t.copies[0].bytes, int64_t(256) << 20);
  EXPECT_EQ(t.copies[0].kind, CopyKind::PtoP);
  EXPECT_EQ(t.copies[1].kind, CopyKind::PtoP);
  EXPECT_EQ(t.copies[2].kind, CopyKind::DtoD);
  EXPECT_EQ(t.name_of(t.events[2]), "Memcpy DtoD (Device -> Device)");
  // Untimed like the others.
  m.start = 0;
  m.end = 0;
  EXPECT_EQ(decode_record(as_activity(&m), names, t).what, DecodeResult::What::Untimed);
}

TEST(CuptiDecode, CopyAndMemoryKindsMapOntoGpuprofKinds) {
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH), CopyKind::DtoH);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_ATOH), CopyKind::DtoH);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_HTOA), CopyKind::HtoD);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD), CopyKind::DtoD);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH), CopyKind::HtoH);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP), CopyKind::PtoP);
  EXPECT_EQ(copy_kind_of(CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN), CopyKind::Unknown);
  EXPECT_EQ(memory_kind_of(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED), MemoryKind::Managed);
  EXPECT_EQ(memory_kind_of(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC), MemoryKind::Device);
  EXPECT_EQ(memory_kind_of(CUPTI_ACTIVITY_MEMORY_KIND_ARRAY), MemoryKind::Array);
  EXPECT_EQ(memory_kind_of(CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN), MemoryKind::Unknown);
}

TEST(CuptiDecode, MemsetKeepsBytesAndTarget) {
  auto m = zeroed<CUpti_ActivityMemset4>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.value = 0;
  m.bytes = 4096;
  m.start = 100;
  m.end = 1'100;
  m.deviceId = 2;
  m.streamId = 3;
  m.correlationId = 5;
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&m), names, t).what, DecodeResult::What::Event);
  const Event& e = t.events.at(0);
  EXPECT_EQ(e.kind, EventKind::Memset);
  EXPECT_EQ(t.name_of(e), "Memset (Device)");
  EXPECT_EQ(e.start_ns, 100);
  EXPECT_EQ(e.dur_ns, 1'000);
  EXPECT_EQ(e.device, 2);
  EXPECT_EQ(e.tid, 3u);
  EXPECT_EQ(e.correlation, 5u);
  ASSERT_EQ(e.aux, 0u);
  EXPECT_EQ(t.copies[0].bytes, 4096);
  EXPECT_EQ(t.copies[0].dst, MemoryKind::Device);
}

TEST(CuptiDecode, RuntimeCallIsNamedWithoutVersionSuffixOnItsThread) {
  auto a = zeroed<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.start = 10'000;
  a.end = 14'500;
  a.processId = 4242;
  a.threadId = 4243;
  a.correlationId = 77;
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&a), names, t).what, DecodeResult::What::Event);
  const Event& e = t.events.at(0);
  EXPECT_EQ(e.kind, EventKind::Runtime);
  EXPECT_EQ(t.name_of(e), "cudaLaunchKernel");
  EXPECT_EQ(e.start_ns, 10'000);
  EXPECT_EQ(e.dur_ns, 4'500);
  EXPECT_EQ(e.tid, 4243u);
  EXPECT_EQ(e.device, -1);   // a host-side call
  EXPECT_EQ(e.correlation, 77u);
  EXPECT_EQ(e.aux, kNoIndex);
}

TEST(CuptiDecode, StateQueryRuntimeCallsAreLeftOutAsKinetoDoes) {
  auto a = zeroed<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020;
  a.start = 1, a.end = 2;
  Trace t;
  auto names = test_names();
  EXPECT_EQ(decode_record(as_activity(&a), names, t).what, DecodeResult::What::Ignored);
  EXPECT_TRUE(t.events.empty());
}

TEST(CuptiDecode, DriverCallIsADriverEvent) {
  auto a = zeroed<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  a.cbid = CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2;
  a.start = 20;
  a.end = 50;
  a.threadId = 9;
  a.correlationId = 3;
  Trace t;
  auto names = test_names();
  decode_record(as_activity(&a), names, t);
  a.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  decode_record(as_activity(&a), names, t);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].kind, EventKind::Driver);
  EXPECT_EQ(t.name_of(t.events[0]), "cuMemcpyHtoD");
  EXPECT_EQ(t.events[0].dur_ns, 30);
  EXPECT_EQ(t.events[0].tid, 9u);
  EXPECT_EQ(t.events[0].correlation, 3u);
  EXPECT_EQ(t.name_of(t.events[1]), "cuLaunchKernel");
}

TEST(CuptiDecode, DriverBookkeepingCallsAreLeftOut) {
  ApiNames names([](CUpti_CallbackDomain, uint32_t cbid) -> std::string {
    return cbid == 1 ? "cuCtxGetCurrent" : cbid == 2 ? "cuModuleGetFunction" : "";
  });
  auto a = zeroed<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  Trace t;
  for (uint32_t cbid : {1u, 2u, 999'999u}) {   // 999999: unknown to the resolver
    a.cbid = cbid;
    EXPECT_EQ(decode_record(as_activity(&a), names, t).what, DecodeResult::What::Ignored);
  }
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(names.name(CUPTI_CB_DOMAIN_DRIVER_API, 999'999), "cuda driver api #999999");
  EXPECT_TRUE(is_work_driver_api("cuLaunchKernelEx"));
  EXPECT_TRUE(is_work_driver_api("cuMemcpyDtoHAsync"));
  EXPECT_TRUE(is_work_driver_api("cuGraphLaunch"));
  EXPECT_FALSE(is_work_driver_api("cuDeviceGetAttribute"));
}

TEST(CuptiDecode, SynchronizationNamesItsType) {
  auto s = zeroed<CUpti_ActivitySynchronization2>();
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  s.start = 1'000;
  s.end = 91'000;
  s.correlationId = 61;
  s.contextId = 1;
  s.streamId = 7;
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&s), names, t).what, DecodeResult::What::Event);
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE;
  decode_record(as_activity(&s), names, t);
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  decode_record(as_activity(&s), names, t);
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
  decode_record(as_activity(&s), names, t);
  const Event& e = t.events.at(0);
  EXPECT_EQ(e.kind, EventKind::Sync);
  EXPECT_EQ(t.name_of(e), "Stream Sync");
  EXPECT_EQ(e.start_ns, 1'000);
  EXPECT_EQ(e.dur_ns, 90'000);
  EXPECT_EQ(e.tid, 7u);
  EXPECT_EQ(e.correlation, 61u);
  EXPECT_EQ(e.device, -1);
  EXPECT_EQ(t.name_of(t.events.at(1)), "Event Sync");
  EXPECT_EQ(t.name_of(t.events.at(2)), "Context Sync");
  EXPECT_EQ(t.name_of(t.events.at(3)), "Stream Wait Event");
}

TEST(CuptiDecode, OverheadNamesItsKindAndThread) {
  auto o = zeroed<CUpti_ActivityOverhead3>();
  o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  o.objectId.pt.processId = 100;
  o.objectId.pt.threadId = 101;
  o.start = 7'000;
  o.end = 9'500;
  Trace t;
  auto names = test_names();
  ASSERT_EQ(decode_record(as_activity(&o), names, t).what, DecodeResult::What::Event);
  const Event& e = t.events.at(0);
  EXPECT_EQ(e.kind, EventKind::Overhead);
  EXPECT_EQ(t.name_of(e), "CUPTI buffer flush");
  EXPECT_EQ(e.start_ns, 7'000);
  EXPECT_EQ(e.dur_ns, 2'500);
  EXPECT_EQ(e.tid, 101u);
}

TEST(CuptiDecode, ExternalCorrelationLinksACorrelationToAHostOp) {
  auto x = zeroed<CUpti_ActivityExternalCorrelation>();
  x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  x.externalId = 123456789012ull;
  x.correlationId = 77;
  Trace t;
  auto names = test_names();
  const DecodeResult r = decode_record(as_activity(&x), names, t);
  EXPECT_EQ(r.what, DecodeResult::What::ExternalCorrelation);
  EXPECT_EQ(r.correlation, 77u);
  EXPECT_EQ(r.external_id, 123456789012ull);
  EXPECT_TRUE(t.events.empty());
  // Another tool's kind (e.g. Kineto's user annotations on CUSTOM1) is not ours.
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
  EXPECT_EQ(decode_record(as_activity(&x), names, t).what, DecodeResult::What::Ignored);
}

TEST(CuptiDecode, UnusedKindsAreIgnoredAndUnfinishedRecordsGetZeroDuration) {
  CUpti_Activity other;
  other.kind = CUPTI_ACTIVITY_KIND_MARKER;
  Trace t;
  auto names = test_names();
  EXPECT_EQ(decode_record(other, names, t).what, DecodeResult::What::Ignored);
  auto k = zeroed<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 500;
  k.end = 0;   // CUPTI leaves end at 0 for a kernel that never completed
  decode_record(as_activity(&k), names, t);
  EXPECT_EQ(t.events.at(0).dur_ns, 0);
}

TEST(CuptiDecode, DeviceRecordsWithoutStartTimeAreUntimedNotEventsAtTimeZero) {
  // CUPTI leaves start and end at 0 when it could not time a kernel, copy or set (the header:
  // "A value of 0 for both the start and end timestamps indicates that timestamp information could
  // not be collected"), and a forced flush hands over records the device has not run yet. As an
  // event at 0 ns such a record would sit at the clock's origin, before every step, stretch the
  // trace's span to it and count a 0 us call in the kernel table: it is counted as dropped instead.
  Trace t;
  auto names = test_names();
  auto k = zeroed<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = 12;
  k.name = "_Z11spin_kernelx";
  EXPECT_EQ(decode_record(as_activity(&k), names, t).what, DecodeResult::What::Untimed);
  auto m = zeroed<CUpti_ActivityMemcpy6>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 4096;
  EXPECT_EQ(decode_record(as_activity(&m), names, t).what, DecodeResult::What::Untimed);
  auto s = zeroed<CUpti_ActivityMemset4>();
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  EXPECT_EQ(decode_record(as_activity(&s), names, t).what, DecodeResult::What::Untimed);
  EXPECT_TRUE(t.events.empty());
  EXPECT_TRUE(t.kernels.empty());
  EXPECT_TRUE(t.copies.empty());
  // With a start time the same kernel is an event.
  k.start = 2'000;
  k.end = 3'000;
  EXPECT_EQ(decode_record(as_activity(&k), names, t).what, DecodeResult::What::Event);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].start_ns, 2'000);
}

namespace {
// A TSC at 3 ticks per ns that read 0 when CLOCK_MONOTONIC read 1 s: the line drain() would use.
struct ThreeTicksPerNs : gpuprof::collect::cupti::TickLine {
  int64_t time(int64_t t) const override { return 1'000'000'000 + t / 3; }
  int64_t duration(int64_t d) const override { return d / 3; }
};
}  // namespace

TEST(CuptiDecode, DeviceRecordsGoThroughTheHostLineAndRealtimeStampedOnesAreMoved) {
  // A machine up for 2 days: CLOCK_MONOTONIC reads ~1.7e14 ns at drain, CLOCK_REALTIME ~1.76e18,
  // the TSC ~5.2e14 ticks.
  const int64_t now_mono = int64_t(2) * 86'400 * 1'000'000'000;
  const int64_t real_now = int64_t(1'763'700'000) * 1'000'000'000;
  const int64_t real_minus_mono = real_now - now_mono;
  const ThreeTicksPerNs clock;
  const int64_t launch_ticks = 3 * (now_mono - 1'000'000'000 - 1'000'000);   // 1 ms before drain
  Trace staged;
  // A runtime call the callback stamped in ticks (3 us long), and the kernel it launched 5 us
  // later, which CUPTI converted with its realtime base (20 us long, in ns).
  staged.add(EventKind::Runtime, "cudaLaunchKernel", launch_ticks, 9'000);
  staged.add(EventKind::Kernel, "gemm", now_mono - 1'000'000 + 5'000 + real_minus_mono, 20'000);
  // A kernel the callback stamped: ticks, through the same line as host events.
  staged.add(EventKind::Kernel, "relu", launch_ticks + 3 * 30'000, 3 * 5'000);
  EXPECT_EQ(put_on_host_clock(staged, clock, real_now, real_minus_mono), 1u);
  EXPECT_EQ(staged.events[0].start_ns, now_mono - 1'000'000);
  EXPECT_EQ(staged.events[0].dur_ns, 3'000);
  EXPECT_EQ(staged.events[1].start_ns, now_mono - 1'000'000 + 5'000);   // after its launch, as it ran
  EXPECT_EQ(staged.events[1].dur_ns, 20'000);                           // already nanoseconds
  EXPECT_EQ(staged.events[2].start_ns, now_mono - 1'000'000 + 30'000);
  EXPECT_EQ(staged.events[2].dur_ns, 5'000);
}

TEST(CuptiDecode, ApiCallsTheDecoderDropsAreTheOnesCuptiIsToldNotToRecord) {
  // Exactly the decoder's filter: a record CUPTI is told not to make is one decode_record would
  // have returned Ignored for, and no other (a kept call must never lose its record).
  auto names = test_names();
  const std::vector<uint32_t> runtime =
      unused_api_cbids(names, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
  EXPECT_EQ(runtime, std::vector<uint32_t>{CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020});
  const std::vector<uint32_t> driver =
      unused_api_cbids(names, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
  // The two named calls that do no work, and no id without a name: INVALID (0) and the gaps in
  // cupti_driver_cbid.h are no API, and CUPTI documents cuptiActivityEnableDriverApi for the
  // header's ids only.
  EXPECT_EQ(driver, (std::vector<uint32_t>{CUPTI_DRIVER_TRACE_CBID_cuDeviceGetAttribute,
                                           CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent}));
  EXPECT_EQ(std::count(driver.begin(), driver.end(), uint32_t(CUPTI_DRIVER_TRACE_CBID_INVALID)), 0);
  // And the decoder agrees, record by record.
  Trace t;
  for (uint32_t cbid : {uint32_t(CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020),
                        uint32_t(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)}) {
    auto a = zeroed<CUpti_ActivityAPI>();
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = cbid;
    a.start = 1, a.end = 2;
    const bool dropped = decode_record(as_activity(&a), names, t).what == DecodeResult::What::Ignored;
    EXPECT_EQ(dropped, std::count(runtime.begin(), runtime.end(), cbid) == 1) << cbid;
  }
}

TEST(CuptiDecode, VersionSuffixStripping) {
  EXPECT_EQ(strip_version_suffix("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(strip_version_suffix("cuMemcpyHtoD_v2"), "cuMemcpyHtoD");
  EXPECT_EQ(strip_version_suffix("cudaMemcpyAsync_ptsz_v7000"), "cudaMemcpyAsync_ptsz");
  EXPECT_EQ(strip_version_suffix("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(strip_version_suffix("cu_vx"), "cu_vx");
  EXPECT_EQ(strip_version_suffix("cu_v"), "cu_v");
}

// Attribution: a host op (external id 42) launched a kernel through cudaLaunchKernel (correlation
// 77); a second launch (correlation 78) happened outside any op. After the merge the runtime call
// and the kernel of 77 carry 42, those of 78 carry nothing, names are re-interned into the target
// trace and aux indices point at the target's KernelInfo.
TEST(CuptiDecode, MergeAttributesDeviceWorkToTheHostOpThroughExternalCorrelation) {
  Trace into;
  into.add(EventKind::HostOp, "aten::mm", 0, 100'000).external_id = 42;
  into.kernels.push_back(KernelInfo{});   // an earlier kernel: aux of merged kernels must shift
  into.copies.push_back(CopyInfo{});

  Trace staged;
  auto names = test_names();
  ExternalIds ext;
  for (uint32_t corr : {77u, 78u}) {
    auto a = zeroed<CUpti_ActivityAPI>();
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    a.start = 1'000 * corr, a.end = 1'000 * corr + 500;
    a.correlationId = corr;
    decode_record(as_activity(&a), names, staged);
    auto k = zeroed<CUpti_ActivityKernel10>();
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = "gemm_kernel";
    k.gridX = int32_t(corr);
    k.start = 1'000 * corr + 2'000, k.end = 1'000 * corr + 9'000;
    k.correlationId = corr;
    decode_record(as_activity(&k), names, staged);
  }
  auto m = zeroed<CUpti_ActivityMemcpy6>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 8;
  m.start = 90'000, m.end = 91'000;
  m.correlationId = 77;
  decode_record(as_activity(&m), names, staged);
  auto x = zeroed<CUpti_ActivityExternalCorrelation>();
  x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  x.externalId = 42;
  x.correlationId = 77;
  const DecodeResult r = decode_record(as_activity(&x), names, staged);
  ext[r.correlation] = r.external_id;
  staged.dropped_events = 3;

  merge_decoded(into, std::move(staged), ext);
  ASSERT_EQ(into.events.size(), 6u);   // host op + 2 launches + 2 kernels + 1 copy
  EXPECT_EQ(into.name_of(into.events[1]), "cudaLaunchKernel");
  EXPECT_EQ(into.events[1].external_id, 42u);
  EXPECT_EQ(into.name_of(into.events[2]), "gemm_kernel");
  EXPECT_EQ(into.events[2].external_id, 42u);
  EXPECT_EQ(into.events[2].aux, 1u);
  EXPECT_EQ(into.kernels[into.events[2].aux].grid[0], 77);
  EXPECT_EQ(into.events[3].external_id, 0u);   // correlation 78: launched outside any op
  EXPECT_EQ(into.events[4].external_id, 0u);
  EXPECT_EQ(into.kernels[into.events[4].aux].grid[0], 78);
  EXPECT_EQ(into.events[5].kind, EventKind::Memcpy);
  EXPECT_EQ(into.events[5].external_id, 42u);
  EXPECT_EQ(into.events[5].aux, 1u);
  EXPECT_EQ(into.copies[1].kind, CopyKind::DtoH);
  EXPECT_EQ(into.dropped_events, 3u);
}

// CUPTI's thread ids on API records become the OS thread ids host events carry; device events'
// tid is their stream and must not be touched, nor events merged before first_event.
TEST(CuptiDecode, ApiThreadIdsAreMappedToOsThreadIds) {
  Trace t;
  t.add(EventKind::HostOp, "aten::mm", 0, 10).tid = 0xBEEF;   // before first_event: untouched
  const size_t first = t.events.size();
  t.add(EventKind::Runtime, "cudaLaunchKernel", 1, 1).tid = 0xBEEF;
  t.add(EventKind::Driver, "cuLaunchKernel", 2, 1).tid = 0xBEEF;
  t.add(EventKind::Overhead, "CUPTI buffer flush", 3, 1).tid = 0xBEEF;
  t.add(EventKind::Kernel, "k", 4, 1).tid = 0xBEEF;   // a stream that happens to equal the id
  t.add(EventKind::Runtime, "cudaMemcpyAsync", 5, 1).tid = 77;   // a thread we never saw
  map_api_threads(t, {{0xBEEFu, 4242u}}, first);
  EXPECT_EQ(t.events[0].tid, 0xBEEFu);
  EXPECT_EQ(t.events[1].tid, 4242u);
  EXPECT_EQ(t.events[2].tid, 4242u);
  EXPECT_EQ(t.events[3].tid, 4242u);
  EXPECT_EQ(t.events[4].tid, 0xBEEFu);
  EXPECT_EQ(t.events[5].tid, 77u);
}

#endif  // GPUPROF_HAVE_CUPTI
