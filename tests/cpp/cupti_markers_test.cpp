// NVTX ranges through CUPTI's marker activity: hand-built CUpti_ActivityMarker2 records (the CUDA 13
// header's own struct) decode into Nvtx events with the name of the start, the start's thread and
// the exact start / end times; gpuprof's own domain is left out; unmatched records follow the rules
// of cupti_decode.h.
#ifdef GPUPROF_HAVE_CUPTI

#include <gtest/gtest.h>

#include <cstring>

#include "cupti_decode.h"

using namespace gpuprof;
using namespace gpuprof::collect::cupti;

namespace {

ApiNames no_names() {
  return ApiNames([](CUpti_CallbackDomain, uint32_t) { return std::string(); });
}

// One marker record as CUPTI writes it for an NVTX call on host thread `tid`.
CUpti_ActivityMarker2 marker(CUpti_ActivityFlag flag, uint32_t id, uint64_t ts, uint32_t tid, const char* name,
                             const char* domain) {
  CUpti_ActivityMarker2 m;
  std::memset(&m, 0, sizeof(m));
  m.kind = CUPTI_ACTIVITY_KIND_MARKER;
  m.flags = flag;
  m.id = id;
  m.timestamp = ts;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.processId = 100;
  m.objectId.pt.threadId = tid;
  m.name = name;     // NULL on END records
  m.domain = domain;   // NULL for the default domain
  return m;
}

DecodeResult::What feed(const CUpti_ActivityMarker2& m, ApiNames& names, Trace& t, MarkerRanges& ranges) {
  return decode_record(*reinterpret_cast<const CUpti_Activity*>(&m), names, t, &ranges).what;
}

}  // namespace

// nvtxRangePushA("forward") at 1000 ns and nvtxRangePop at 4500 ns on thread 0xBEEF: CUPTI writes
// START (id 7, name) and END (id 7, no name). One Nvtx event [1000, 4500) named "forward".
TEST(CuptiMarkers, PushPopPairBecomesOneRangeOnTheStartingThread) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 7, 1000, 0xBEEF, "forward", nullptr), names, t, ranges),
            DecodeResult::What::Ignored);   // waiting for its end
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(ranges.open_ranges(), 1u);
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 7, 4500, 0xBEEF, nullptr, nullptr), names, t, ranges),
            DecodeResult::What::Event);
  ASSERT_EQ(t.events.size(), 1u);
  const Event& e = t.events[0];
  EXPECT_EQ(e.kind, EventKind::Nvtx);
  EXPECT_EQ(t.name_of(e), "forward");
  EXPECT_EQ(e.start_ns, 1000);
  EXPECT_EQ(e.dur_ns, 3500);
  EXPECT_EQ(e.tid, 0xBEEFu);
  EXPECT_EQ(e.device, -1);   // a host range
  EXPECT_EQ(ranges.open_ranges(), 0u);
}

// nvtxRangeStartA on thread 1 and nvtxRangeEnd on thread 2 (a start/end range may end elsewhere),
// the start in one CUPTI buffer and the end in the next one, with a nested push/pop range of
// another id closing in between: the outer range keeps its name and starting thread.
TEST(CuptiMarkers, StartEndRangeAcrossTwoBuffersKeepsNameAndStartingThread) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  // Buffer 1: the outer start, then an inner range opened and closed.
  const CUpti_ActivityMarker2 buffer1[] = {
      marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 1, 10'000, 1, "data loading", "myapp"),
      marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 2, 11'000, 1, "decode", nullptr),
      marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 2, 12'500, 1, nullptr, nullptr)};
  for (const auto& m : buffer1) feed(m, names, t, ranges);
  ASSERT_EQ(t.events.size(), 1u);   // the inner range only
  EXPECT_EQ(ranges.open_ranges(), 1u);   // the outer one waits across the flush
  // Buffer 2: the outer end, from another thread.
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 1, 30'000, 2, nullptr, "myapp"), names, t, ranges);
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.name_of(t.events[0]), "decode");
  EXPECT_EQ(t.events[0].start_ns, 11'000);
  EXPECT_EQ(t.events[0].dur_ns, 1'500);
  const Event& outer = t.events[1];
  EXPECT_EQ(outer.kind, EventKind::Nvtx);
  EXPECT_EQ(t.name_of(outer), "data loading");
  EXPECT_EQ(outer.start_ns, 10'000);
  EXPECT_EQ(outer.dur_ns, 20'000);
  EXPECT_EQ(outer.tid, 1u);
  EXPECT_EQ(ranges.close_span(), 0u);
}

// nvtxMarkA("checkpoint") at 7777 ns: a zero-length Nvtx event.
TEST(CuptiMarkers, InstantaneousMarkerIsAZeroLengthEvent) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  EXPECT_EQ(
      feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 9, 7777, 42, "checkpoint", nullptr), names, t, ranges),
      DecodeResult::What::Event);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].kind, EventKind::Nvtx);
  EXPECT_EQ(t.name_of(t.events[0]), "checkpoint");
  EXPECT_EQ(t.events[0].start_ns, 7777);
  EXPECT_EQ(t.events[0].dur_ns, 0);
  EXPECT_EQ(t.events[0].tid, 42u);
  EXPECT_EQ(ranges.open_ranges(), 0u);
}

// gpuprof's own ranges (ProfilerStep#N, gpuprof.range) come in the "gpuprof" domain and are already
// StepMarker / UserRange events: neither their start, their end nor a mark becomes an event, and
// a user range of the same name in another domain still does.
TEST(CuptiMarkers, GpuprofsOwnDomainIsLeftOut) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 3, 100, 1, "ProfilerStep#4", kOwnNvtxDomain), names, t, ranges);
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 4, 150, 1, "ProfilerStep#4", nullptr), names, t, ranges);
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 5, 160, 1, "mark", "gpuprof"), names, t, ranges);
  EXPECT_EQ(ranges.open_ranges(), 1u);   // the user's only
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 4, 800, 1, nullptr, nullptr), names, t, ranges);
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 3, 900, 1, nullptr, "gpuprof"), names, t, ranges),
            DecodeResult::What::Ignored);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].start_ns, 150);
  EXPECT_EQ(t.events[0].dur_ns, 650);
}

// A pop whose push came before collection began (CUPTI never recorded the start) closes nothing.
TEST(CuptiMarkers, EndWithoutStartIsIgnored) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 11, 500, 1, nullptr, nullptr), names, t, ranges),
            DecodeResult::What::Ignored);
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(ranges.open_ranges(), 0u);
}

// A range pushed in the span and popped after it ended: at the span's end it is dropped and
// counted (close_span), and its end, arriving in the next span, is then an end without a start.
TEST(CuptiMarkers, StartNeverEndedIsCountedAtTheSpanEnd) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 21, 1000, 1, "epoch", nullptr), names, t, ranges);
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 22, 2000, 1, "step", nullptr), names, t, ranges);
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 22, 3000, 1, nullptr, nullptr), names, t, ranges);
  EXPECT_EQ(t.events.size(), 1u);
  EXPECT_EQ(ranges.close_span(), 1u);   // "epoch"
  EXPECT_EQ(ranges.close_span(), 0u);
  Trace next;
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 21, 9000, 1, nullptr, nullptr), names, next, ranges),
            DecodeResult::What::Ignored);
  EXPECT_TRUE(next.events.empty());
}

// Without timestamps (CUPTI writes 0 when it could not take one) nothing is placed at the clock's
// origin: the start is forgotten and reported Untimed, as are a mark and an untimed end.
TEST(CuptiMarkers, UntimedMarkersMakeNoEvent) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 1, 0, 1, "a", nullptr), names, t, ranges),
            DecodeResult::What::Untimed);
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 2, 0, 1, "b", nullptr), names, t, ranges),
            DecodeResult::What::Untimed);
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_START, 3, 50, 1, "c", nullptr), names, t, ranges);
  EXPECT_EQ(feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_END, 3, 0, 1, nullptr, nullptr), names, t, ranges),
            DecodeResult::What::Untimed);
  EXPECT_TRUE(t.events.empty());
  EXPECT_EQ(ranges.open_ranges(), 0u);
}

// Without a MarkerRanges (decode_record's default), marker records are ignored, not misread.
TEST(CuptiMarkers, IgnoredWithoutMarkerState) {
  auto names = no_names();
  Trace t;
  const auto m = marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 1, 10, 1, "x", nullptr);
  EXPECT_EQ(decode_record(*reinterpret_cast<const CUpti_Activity*>(&m), names, t).what,
            DecodeResult::What::Ignored);
  EXPECT_TRUE(t.events.empty());
}

// Marker threads are CUPTI thread ids, mapped to OS thread ids like API records.
TEST(CuptiMarkers, ThreadIdsAreMappedToOsThreadIds) {
  auto names = no_names();
  MarkerRanges ranges;
  Trace t;
  feed(marker(CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 1, 10, 0xBEEF, "x", nullptr), names, t, ranges);
  map_api_threads(t, {{0xBEEFu, 4242u}});
  EXPECT_EQ(t.events[0].tid, 4242u);
}

#endif  // GPUPROF_HAVE_CUPTI
