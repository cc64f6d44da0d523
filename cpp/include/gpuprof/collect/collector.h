// The live collector: per-thread event buffers that any producer (the RecordFunction hooks, the
// Python step markers, later CUPTI) appends to, and that a session drains into a Trace.
//
// Hot path (host_enter/host_exit/record): no lock, no allocation once a thread's buffer and name
// cache are warm. Memory is bounded: past the session's event budget, events are counted as dropped.
// Names live in a table per session (start() begins a new one; each thread's cache follows it), so
// a run of many sessions, each with names of its own (ProfilerStep#N), costs the same per session
// at its end as at its start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpuprof/core/event.h"
#include "gpuprof/core/trace.h"

namespace gpuprof::collect {

// The one clock: CLOCK_MONOTONIC in nanoseconds. Device timestamps are put on it too, and every
// timestamp in a drained Trace is on it.
int64_t now_ns();

// What producers stamp events with: raw TSC ticks where the kernel itself keeps time with an
// invariant TSC (clocksource "tsc"; reading it costs about half of clock_gettime), else now_ns().
// drain() converts ticks to now_ns() nanoseconds, so callers never see ticks in a Trace.
int64_t ticks();
bool ticks_are_tsc();
// The ticks -> now_ns() line the last drain() used for its host events (a fresh one before any
// drain): records stamped with ticks() elsewhere (CUPTI's timestamp callback) are converted with
// it, so they land exactly where that drain's host events did.
int64_t drained_ticks_to_ns(int64_t t);
int64_t drained_tick_duration_to_ns(int64_t d);

struct SessionConfig {
  uint64_t max_events = 4'000'000;   // over all threads; ~48 bytes each
};

// Session control, from the thread that owns the profiling session.
void start(const SessionConfig& config);   // begin a new epoch: earlier, undrained events are discarded
void stop();                               // producers stop appending (in-flight ones may finish)
bool active();
// Moves every thread's events of the current epoch into a new Trace (names, thread events,
// dropped count). Call after stop(); calling it while active gives a consistent prefix.
Trace drain();
// The events recorded since the cursor's last drain_new() of this epoch (all of the epoch's at the
// first call, or at the first after start()), as drain() gives them: on the now_ns() clock, memory
// samples and op inputs split out. `into`'s events, memory, storages, host memory and op inputs are
// replaced; its names are kept across calls and extended with the names interned since (a new
// epoch starts them afresh), so a call copies only what is new. Exited threads' buffers stay for
// drain(). From the thread that owns the session, while it records: the step journal's per-step
// drain (analysis/step_journal.h).
struct DrainCursor {
  uint64_t epoch = 0;
  std::unordered_map<uint64_t, uint64_t> read;   // thread index -> its events read so far
};
void drain_new(DrainCursor& cursor, Trace& into);

// Producers, from any thread; timestamps are ticks(). `key` matches an exit to its enter (e.g. the
// RecordFunction's address); the event gets a process-unique external id, returned by host_enter.
uint64_t host_enter(const void* key, std::string_view name, EventKind kind, int64_t ts_ns,
                    std::string_view shapes = {});
void host_exit(const void* key, int64_t ts_ns);
// The RecordFunction hooks' hot path: the same as host_enter / host_exit with ticks() read inside
// (after the bookkeeping on enter, before it on exit, so that the range holds as little of the
// profiler's own time as possible). `name` is a NUL-terminated string (RecordFunction::name());
// each thread first looks it up by its address, and a hit counts only when the text there is still
// the text that was interned from that address (a name's storage can be reused for another name:
// a std::string inside a RecordFunction on the stack), so a stale name is never reported.
uint64_t host_enter_now(const void* key, const char* name, EventKind kind);
// record_shapes: `dims` lists, for each input, its number of dimensions and then the dimensions
// (0 for a non-tensor or a tensor whose sizes are not read): {2, 64, 3, 0} is "[[64, 3], []]"
// and an empty list "[]". Each thread keeps the text it interned for each list it has seen, so
// the text is written once per distinct list, not once per op. dims == nullptr: no shapes.
uint64_t host_enter_now(const void* key, const char* name, EventKind kind, const int64_t* dims, size_t n_dims);
void host_exit_now(const void* key);
// The same, for a host op whose autograd link (event.h: pack_autograd_link) the caller read from
// the RecordFunction: kept in the event's correlation slot. The module view's hooks use it.
void host_exit_now(const void* key, uint64_t autograd_link);
// FLOPs
// The inputs of the op innermost open on the calling thread, recorded from inside that op (the
// hooks' capture of the ops FLOPs are counted for, torch_hooks.cpp). `key` is any list of integers
// that tells one call's inputs from another's (sizes, dtypes, scalars); each thread keeps what it
// recorded for each key, so `format` turns a key into the texts only the first time it is seen:
// the input sizes (`dims` as host_enter_now takes them; kept unless record_shapes gave them
// already), the input types and scalar inputs as Kineto writes them (trace.h, OpArgs). Also marks
// whether the op recorded autograd history. Ignored unless the innermost open op is named `name`
// (the op's own name).
struct OpInputTexts {
  std::vector<int64_t> dims;
  std::string types;
  std::string concrete;
};
using OpInputsFormatter = void (*)(const int64_t* key, size_t n, OpInputTexts* out);
void host_op_inputs(const char* name, const int64_t* key, size_t n, OpInputsFormatter format, bool grad_recorded);
// The text host_enter_now records for a dims list (see above); for tests.
std::string shapes_text(const int64_t* dims, size_t n_dims);
// A complete event (step markers, imported or synthesised ranges).
void record(EventKind kind, std::string_view name, int64_t start_ns, int64_t end_ns, uint64_t external_id = 0);

// A collective call's own facts, for the host event whose enter returned `info.external_id` (the
// hooks read them when `record_param_comms` or a backend's own range starts). A few a step, so
// kept under a lock; drained into Trace::collectives.
void record_collective(CollectiveInfo info);
// A backend's collective range (gloo:all_reduce) was just entered on this thread under `key`: it is
// counted open until its exit. Such a range ends on the backend's own thread after the collective's
// result was handed over, so the training thread can reach a span's end before the exit is
// recorded: a session waits a little for open_collectives() to reach 0 before it stops.
void mark_open_collective(const void* key);
int64_t open_collectives();

// One level of a device allocator, from the allocating thread (torch's caching allocator reports
// every malloc and free): the size of this block (negative when freed), the allocator's totals
// after it (-1: not known) and the block's address (0: not known). Drained into Trace::memory.
void record_memory(int64_t ts, int64_t bytes_delta, int64_t total_allocated, int64_t total_reserved, int device,
                   uint64_t addr = 0);
// A storage of a known role (a parameter, a gradient, optimizer state) seen at `ts`. Drained into
// Trace::storages.
void record_storage(int64_t ts, uint64_t addr, int64_t bytes, int device, StorageRole role);
// The process's resident set size now (/proc/self/statm), -1 where it cannot be read.
int64_t host_rss_bytes();
// Samples host_rss_bytes() at `ts`; drained into Trace::host_memory.
void record_host_rss(int64_t ts);

// Counters for tests and the report.
struct Stats {
  uint64_t events = 0;
  uint64_t dropped = 0;
  uint64_t threads = 0;
};
Stats stats();

}  // namespace gpuprof::collect
