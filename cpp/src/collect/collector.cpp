// Per-thread, lock-free event buffers.
//
// Ownership: only the owning thread writes its buffer (events, name cache, open-range stack). The
// draining thread only reads events [0, committed) of the current epoch, published with release /
// acquire on `committed`. A new session bumps the epoch and each owner resets its own buffer the
// next time it records, so no reset ever races a writer. Buffers of exited threads stay registered
// (their events are still wanted) until a drain has read them.
#include "gpuprof/collect/collector.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define GPUPROF_HAVE_TSC 1
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpuprof::collect {
namespace {

// Allocator levels and RSS samples share the event buffers (one lock-free path, one budget); the
// drain moves them out by this flag, which never leaves the collector. Their fields: start_ns = time,
// dur_ns = bytes delta (not a duration: never scaled), correlation / external_id = total allocated
// / reserved (as int64), device = the allocator's device or kRssDevice, name | aux << 32 = the
// block's address.
constexpr uint8_t kMemoryRecordFlag = 0x80;
// FLOPs: a host op's input types and concrete inputs follow its event as a record of their own
// (name = the types' id, aux = the concrete inputs' id, external_id = the op's), which the drain
// moves into Trace::op_args.
constexpr uint8_t kOpArgsRecordFlag = 0x20;
constexpr int16_t kRssDevice = -32768;
// Known storages (parameters, gradients, optimizer state) the same way: start_ns = time, dur_ns =
// bytes, correlation = address, aux = the role.
constexpr uint8_t kStorageRecordFlag = 0x40;

constexpr size_t kChunkEvents = 4096;          // 192 KiB of events per chunk
constexpr size_t kMaxChunksPerThread = 8192;   // 32M events: the global budget binds first

struct OpenRange {
  const void* key;
  int64_t start_ns;
  uint64_t external_id;
  uint32_t name;
  uint32_t shapes;
  EventKind kind;
  bool collective = false;   // a backend's collective range: counted in g_open_collectives
  bool captured = false;     // FLOPs: the hooks captured its inputs (ThreadBuffer::captured); in padding
};

// FLOPs: what the hooks captured of an open op's inputs, until it closes. Kept beside the open
// ranges rather than in them, so an op with nothing captured (most ops) closes as it did before.
struct CapturedInputs {
  uint64_t external_id;   // the op's
  uint32_t types;
  uint32_t concrete;
  uint8_t flags;
};

struct ThreadBuffer {
  uint32_t os_tid = 0;
  uint64_t thread_index = 0;
  uint64_t epoch = 0;                       // owner only
  std::atomic<uint64_t> published_epoch{0};
  std::atomic<uint64_t> committed{0};
  std::atomic<uint64_t> dropped{0};
  std::unique_ptr<std::atomic<Event*>[]> chunks{new std::atomic<Event*>[kMaxChunksPerThread]()};
  std::vector<OpenRange> open;              // owner only
  // Owner only: text -> id in the registry's name table of `epoch`. Keyed on the thread's own copies
  // of the text (the table is replaced at each start(), possibly while this thread still looks up a
  // name of the previous epoch). Both are cleared when the thread sees a new epoch, so a long run
  // of spans with a new name each (ProfilerStep#N) costs and holds only the current span's names.
  std::unordered_map<std::string_view, uint32_t> names;
  std::deque<std::string> name_text;
  // Owner only: the names last interned from each address (host_enter_now), direct-mapped. `text`
  // is this thread's copy (in name_text): a hit needs the same address AND the same text there now.
  struct AddressSlot {
    const char* address;
    const char* text;
    size_t size;
    uint32_t id;
  };
  static constexpr size_t kAddressSlots = 512;
  AddressSlot by_address[kAddressSlots] = {};
  // Owner only: a record_shapes dims list (its bytes) -> the id of its text, keyed on this thread's
  // copies; cleared with the names at a new epoch.
  std::unordered_map<std::string_view, uint32_t> shapes;
  std::deque<std::string> shapes_keys;
  // Owner only (FLOPs): a captured op's input key (its bytes) -> the ids of its dims, types and
  // concrete inputs, keyed on this thread's copies; cleared with the names at a new epoch.
  struct OpInputIds {
    uint32_t dims, types, concrete;
  };
  std::unordered_map<std::string_view, OpInputIds> op_inputs;
  std::deque<std::string> op_input_keys;
  std::vector<CapturedInputs> captured;   // owner only: open ops' captured inputs, by external id
  uint64_t next_external = 0;               // owner only
  bool orphaned = false;                    // under Registry::mutex

  ~ThreadBuffer() {
    for (size_t i = 0; i < kMaxChunksPerThread; ++i) delete[] chunks[i].load();
  }
};

struct Registry {
  std::mutex mutex;
  std::vector<ThreadBuffer*> buffers;
  uint64_t next_thread_index = 1;
  StringTable names;                        // this epoch's names; guarded by mutex; new at each start()
  std::vector<CollectiveInfo> collectives;  // this epoch's collective facts; guarded by mutex
};

// Leaked on purpose: producers on other threads may outlive static destruction at process exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::atomic<bool> g_active{false};
// Backend collective ranges (gloo:all_reduce ...) entered in this epoch and not exited yet.
std::atomic<int64_t> g_open_collectives{0};
std::atomic<uint64_t> g_epoch{1};
std::atomic<uint64_t> g_chunks_used{0};
std::atomic<uint64_t> g_chunk_limit{0};

// ---- ticks ----------------------------------------------------------------------------------------
// The TSC is used only where the kernel vouches for it (it chose it as clocksource: invariant and
// synchronised across cores). Ticks map to CLOCK_MONOTONIC by a line through two (tsc, mono) pairs:
// one taken when the first session starts, one at each drain, so the slope's baseline is the
// process's profiling lifetime and its error negligible.
bool detect_tsc() {
#ifdef GPUPROF_HAVE_TSC
  if (const char* env = getenv("GPUPROF_CLOCK")) return std::string(env) != "monotonic";
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return (f >> source) && source == "tsc";
#else
  return false;
#endif
}
const bool g_tsc = detect_tsc();

struct ClockPair {
  int64_t tsc;
  int64_t mono;
};

// A (tsc, mono) pair read close together: the tightest of several tries, so that being preempted
// between the two reads (common on a loaded machine) cannot skew the pair by a time slice.
ClockPair read_pair() {
#ifdef GPUPROF_HAVE_TSC
  ClockPair best{0, 0};
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < 16; ++i) {
    const int64_t a = static_cast<int64_t>(__rdtsc());
    const int64_t m = now_ns();
    const int64_t b = static_cast<int64_t>(__rdtsc());
    if (b - a < best_window) {
      best_window = b - a;
      best = {a + (b - a) / 2, m};
    }
  }
  return best;
#else
  const int64_t m = now_ns();
  return {m, m};
#endif
}

std::once_flag g_base_once;
ClockPair g_base{0, 0};

ThreadBuffer* const kDeadBuffer = reinterpret_cast<ThreadBuffer*>(uintptr_t{1});
// Read on every op's enter and exit. The initial-exec model reads it at a fixed offset from the
// thread pointer instead of calling __tls_get_addr, as a shared library's thread-locals otherwise
// need. It takes 8 bytes of the static TLS space that glibc keeps spare for libraries loaded later.
#if defined(__GNUC__) && defined(__ELF__)
__attribute__((tls_model("initial-exec")))
#endif
thread_local ThreadBuffer* tl_buffer = nullptr;

struct ThreadExit {
  ~ThreadExit() {
    ThreadBuffer* b = tl_buffer;
    tl_buffer = kDeadBuffer;   // a hook firing during thread teardown records nothing
    if (b == nullptr || b == kDeadBuffer) return;
    std::lock_guard<std::mutex> lock(registry().mutex);
    b->orphaned = true;
  }
};
thread_local ThreadExit tl_exit;

ThreadBuffer* register_thread() {
  auto* b = new ThreadBuffer;
  b->os_tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  b->open.reserve(256);
  b->captured.reserve(16);
  b->names.reserve(1024);
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    b->thread_index = registry().next_thread_index++;
    registry().buffers.push_back(b);
  }
  (void)&tl_exit;   // odr-use so the thread's exit runs ~ThreadExit
  tl_buffer = b;
  return b;
}

// The calling thread's buffer, reset if a new session began since it last recorded.
inline ThreadBuffer* buffer() {
  ThreadBuffer* b = tl_buffer;
  if (__builtin_expect(b == nullptr, 0)) b = register_thread();
  if (__builtin_expect(b == kDeadBuffer, 0)) return nullptr;
  // Acquire (a plain load on x86): the reset below rewrites slots that the previous epoch's drain
  // read before start() bumped the epoch; this orders those reads before our writes (a race that
  // ThreadSanitizer found with relaxed here, .ci/tsan.sh).
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (__builtin_expect(b->epoch != epoch, 0)) {
    b->committed.store(0, std::memory_order_relaxed);
    b->dropped.store(0, std::memory_order_relaxed);
    b->open.clear();
    b->names.clear();
    b->name_text.clear();
    std::fill(std::begin(b->by_address), std::end(b->by_address), ThreadBuffer::AddressSlot{});
    b->shapes.clear();
    b->shapes_keys.clear();
    b->op_inputs.clear();
    b->op_input_keys.clear();
    b->captured.clear();
    b->epoch = epoch;
    b->published_epoch.store(epoch, std::memory_order_release);
  }
  return b;
}

// Miss path only (first time this thread sees a name): takes the registry lock.
std::unordered_map<std::string_view, uint32_t>::iterator intern_slow(ThreadBuffer* b, std::string_view name) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const uint32_t id = registry().names.intern(name);
  b->name_text.emplace_back(name);
  return b->names.emplace(b->name_text.back(), id).first;   // deque: stable storage for the key
}

// The thread's entry for `name`: its key is this thread's copy of the text.
inline std::unordered_map<std::string_view, uint32_t>::iterator intern_entry(ThreadBuffer* b,
                                                                             std::string_view name) {
  auto it = b->names.find(name);
  if (__builtin_expect(it != b->names.end(), 1)) return it;
  return intern_slow(b, name);
}

inline uint32_t intern(ThreadBuffer* b, std::string_view name) { return intern_entry(b, name)->second; }

// By address first: the text at `name` is compared with the copy interned from that address (a
// strlen and a memcmp of a few bytes, no hash); on a miss the text is interned and the slot
// remembers it.
inline uint32_t intern_address(ThreadBuffer* b, const char* name) {
  const size_t size = std::strlen(name);
  const uintptr_t a = reinterpret_cast<uintptr_t>(name);
  ThreadBuffer::AddressSlot& slot = b->by_address[((a >> 3) ^ (a >> 12)) & (ThreadBuffer::kAddressSlots - 1)];
  if (__builtin_expect(slot.address == name && slot.size == size && std::memcmp(slot.text, name, size) == 0, 1))
    return slot.id;
  const auto it = intern_entry(b, std::string_view(name, size));
  slot = {name, it->first.data(), size, it->second};
  return it->second;
}

std::string format_dims(const int64_t* dims, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n;) {
    if (i > 0) out += ", ";
    out += '[';
    const uint64_t count = static_cast<uint64_t>(dims[i++]);
    for (uint64_t d = 0; d < count && i < n; ++d) {   // a list cut short ends where it ends
      if (d > 0) out += ", ";
      out += std::to_string(dims[i++]);
    }
    out += ']';
  }
  out += ']';
  return out;
}

uint32_t intern_dims_slow(ThreadBuffer* b, std::string_view key, const int64_t* dims, size_t n) {
  const uint32_t id = intern(b, format_dims(dims, n));
  b->shapes_keys.emplace_back(key);
  b->shapes.emplace(b->shapes_keys.back(), id);
  return id;
}

__attribute__((always_inline)) inline uint32_t intern_dims(ThreadBuffer* b, const int64_t* dims, size_t n) {
  const std::string_view key(reinterpret_cast<const char*>(dims), n * sizeof(int64_t));
  auto it = b->shapes.find(key);
  if (__builtin_expect(it != b->shapes.end(), 1)) return it->second;
  return intern_dims_slow(b, key, dims, n);
}

inline void append(ThreadBuffer* b, const Event& e) {
  const uint64_t n = b->committed.load(std::memory_order_relaxed);
  const size_t chunk = n / kChunkEvents, slot = n % kChunkEvents;
  if (slot == 0) {
    if (chunk >= kMaxChunksPerThread ||
        g_chunks_used.fetch_add(1, std::memory_order_relaxed) >= g_chunk_limit.load(std::memory_order_relaxed)) {
      b->dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (b->chunks[chunk].load(std::memory_order_relaxed) == nullptr)
      b->chunks[chunk].store(new Event[kChunkEvents], std::memory_order_release);
  }
  b->chunks[chunk].load(std::memory_order_relaxed)[slot] = e;
  b->committed.store(n + 1, std::memory_order_release);
}

}  // namespace

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace {
// ticks(), inlined into the hot paths of this file (an exported function is called through the PLT).
inline int64_t tick_now() {
#ifdef GPUPROF_HAVE_TSC
  if (__builtin_expect(g_tsc, 1)) return static_cast<int64_t>(__rdtsc());
#endif
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t ticks() { return tick_now(); }

bool ticks_are_tsc() { return g_tsc; }

namespace {
// Rewrites tick timestamps as CLOCK_MONOTONIC nanoseconds.
struct TickConverter {
  ClockPair now{0, 0};
  double ns_per_tick = 1.0;

  TickConverter() {
    if (!g_tsc) return;
    std::call_once(g_base_once, [] { g_base = read_pair(); });
    now = read_pair();
    // A young process has a short baseline: lengthen it to 20 ms once so the slope is good to ~1e-5.
    while (now.mono - g_base.mono < 20'000'000) now = read_pair();
    ns_per_tick = double(now.mono - g_base.mono) / double(now.tsc - g_base.tsc);
  }
  // Anchored at the drain: the events closest to it are the ones whose offset matters most.
  int64_t time(int64_t t) const { return g_tsc ? now.mono - std::llround(double(now.tsc - t) * ns_per_tick) : t; }
  int64_t duration(int64_t d) const { return g_tsc ? std::llround(double(d) * ns_per_tick) : d; }
};

std::mutex g_last_clock_mutex;
TickConverter* g_last_clock = nullptr;   // leaked: read by GPU drains until process exit

void remember_clock(const TickConverter& c) {
  std::lock_guard<std::mutex> lock(g_last_clock_mutex);
  if (g_last_clock == nullptr) g_last_clock = new TickConverter(c);
  else *g_last_clock = c;
}

// Moves the memory records out of `events` (keeping the others' order) into the trace, and the
// op-inputs records (FLOPs) into Trace::op_args beside the op each follows.
void split_records(Trace& trace, const TickConverter& clock) {
  auto keep = trace.events.begin();
  for (auto it = trace.events.begin(); it != trace.events.end(); ++it) {
    if (it->flags & kOpArgsRecordFlag) {
      if (keep != trace.events.begin() && (keep - 1)->external_id == it->external_id) {
        OpArgs a;
        a.event = static_cast<uint32_t>(keep - 1 - trace.events.begin());
        a.types = it->name;
        a.concrete = it->aux;
        trace.op_args.push_back(a);
      }
      continue;
    }
    if (!(it->flags & (kMemoryRecordFlag | kStorageRecordFlag))) {
      if (keep != it) *keep = *it;
      ++keep;
      continue;
    }
    if (it->flags & kStorageRecordFlag) {
      KnownStorage k;
      k.ts_ns = clock.time(it->start_ns);
      k.addr = it->correlation;
      k.bytes = it->dur_ns;
      k.device = it->device;
      k.role = static_cast<StorageRole>(it->aux);
      trace.storages.push_back(k);
      continue;
    }
    if (it->device == kRssDevice) {
      trace.host_memory.push_back({clock.time(it->start_ns), static_cast<int64_t>(it->correlation)});
      continue;
    }
    MemorySample m;
    m.ts_ns = clock.time(it->start_ns);
    m.bytes_delta = it->dur_ns;
    m.total_allocated = static_cast<int64_t>(it->correlation);
    m.total_reserved = static_cast<int64_t>(it->external_id);
    m.device = it->device;
    m.addr = uint64_t(it->name) | (uint64_t(it->aux) << 32);
    m.tid = it->tid;
    trace.memory.push_back(m);
  }
  trace.events.erase(keep, trace.events.end());
  auto by_time = [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; };
  std::stable_sort(trace.memory.begin(), trace.memory.end(), by_time);
  std::stable_sort(trace.storages.begin(), trace.storages.end(), by_time);
  std::stable_sort(trace.host_memory.begin(), trace.host_memory.end(), by_time);
}
}  // namespace

int64_t drained_ticks_to_ns(int64_t t) {
  std::lock_guard<std::mutex> lock(g_last_clock_mutex);
  if (g_last_clock == nullptr) g_last_clock = new TickConverter;
  return g_last_clock->time(t);
}

int64_t drained_tick_duration_to_ns(int64_t d) {
  std::lock_guard<std::mutex> lock(g_last_clock_mutex);
  if (g_last_clock == nullptr) g_last_clock = new TickConverter;
  return g_last_clock->duration(d);
}

void start(const SessionConfig& config) {
  if (g_tsc) std::call_once(g_base_once, [] { g_base = read_pair(); });
  g_active.store(false, std::memory_order_relaxed);
  g_chunk_limit.store((config.max_events + kChunkEvents - 1) / kChunkEvents, std::memory_order_relaxed);
  g_chunks_used.store(0, std::memory_order_relaxed);
  {
    // A fresh name table per epoch: ids are only ever read with their epoch's events, and a thread
    // still recording for the previous epoch (its events are discarded) may intern into the new
    // table at worst, which costs an unused entry. Without this, every span's new names
    // (ProfilerStep#N) stayed forever and each drain copied them all: a long run slowed down.
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().names = StringTable();
    registry().collectives.clear();
    g_open_collectives.store(0, std::memory_order_relaxed);
    g_epoch.fetch_add(1, std::memory_order_acq_rel);
  }
  g_active.store(true, std::memory_order_release);
}

void stop() { g_active.store(false, std::memory_order_release); }

bool active() { return g_active.load(std::memory_order_acquire); }

namespace {
inline uint64_t open_range(ThreadBuffer* b, const void* key, uint32_t name, EventKind kind, uint32_t shapes,
                           int64_t ts) {
  OpenRange r;
  r.key = key;
  r.start_ns = ts;
  r.external_id = (b->thread_index << 40) | (++b->next_external & ((uint64_t{1} << 40) - 1));
  r.name = name;
  r.shapes = shapes;
  r.kind = kind;
  b->open.push_back(r);
  return r.external_id;
}

// The calling thread's buffer for an exit, or null when it has nothing open in this epoch.
inline ThreadBuffer* exit_buffer() {
  ThreadBuffer* b = tl_buffer;
  if (b == nullptr || b == kDeadBuffer || b->epoch != g_epoch.load(std::memory_order_relaxed)) return nullptr;
  return b;
}

// FLOPs: the inputs the hooks captured for the op `external_id`, taken off the thread's list, packed
// as (types id << 32) | (grad recorded << 31) | concrete id; 0 when none were captured for it.
// External ids grow on a thread: an entry of a larger one belongs to an op opened inside this one
// whose exit never came, and is dropped. Out of line, as is the record it becomes, so that an op
// with nothing captured (all but the matrix-class ops) closes with the code it always had.
__attribute__((noinline)) uint64_t take_captured(ThreadBuffer* b, uint64_t external_id) {
  while (!b->captured.empty() && b->captured.back().external_id > external_id) b->captured.pop_back();
  if (b->captured.empty() || b->captured.back().external_id != external_id) return 0;
  const CapturedInputs c = b->captured.back();
  b->captured.pop_back();
  return (uint64_t(c.types) << 32) | (c.flags & kGradRecordedFlag ? uint64_t(1) << 31 : 0) |
         (c.concrete & 0x7fffffffu);
}

// The captured inputs' record, right behind its op's event (split_records pairs them).
__attribute__((noinline)) void append_captured(ThreadBuffer* b, uint64_t external_id, uint64_t packed) {
  Event a;
  a.flags = kOpArgsRecordFlag;
  a.name = static_cast<uint32_t>(packed >> 32);
  a.aux = static_cast<uint32_t>(packed & 0x7fffffffu);
  a.external_id = external_id;
  a.tid = b->os_tid;
  append(b, a);
}

inline void close_range(ThreadBuffer* b, const void* key, int64_t ts, uint64_t link = 0) {
  // Ranges close in LIFO order on a thread; an exit whose enter we never saw (the session began
  // inside it, or it closes on another thread) finds no match and is ignored.
  size_t i = b->open.size();
  while (i > 0 && b->open[i - 1].key != key) --i;
  if (i == 0) return;
  const OpenRange r = b->open[i - 1];
  if (i == b->open.size()) b->open.pop_back();
  else b->open.resize(i - 1);
  if (r.collective) g_open_collectives.fetch_sub(1, std::memory_order_relaxed);
  Event e;
  e.kind = r.kind;
  e.name = r.name;
  e.start_ns = r.start_ns;
  e.dur_ns = ts - r.start_ns;
  e.external_id = r.external_id;
  e.correlation = link;   // a host op's autograd link (0: none, as for every range without one)
  e.tid = b->os_tid;
  e.aux = r.shapes;
  // FLOPs: the inputs the hooks captured for this op, if any (the matrix-class ops).
  const uint64_t captured = __builtin_expect(r.captured, 0) ? take_captured(b, r.external_id) : 0;
  if (__builtin_expect(captured != 0, 0) && (captured & (uint64_t(1) << 31))) e.flags = kGradRecordedFlag;
  append(b, e);
  if (__builtin_expect(captured != 0, 0)) append_captured(b, r.external_id, captured);
}
}  // namespace

uint64_t host_enter(const void* key, std::string_view name, EventKind kind, int64_t ts_ns,
                    std::string_view shapes) {
  if (!g_active.load(std::memory_order_relaxed)) return 0;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  const uint32_t name_id = intern(b, name);
  return open_range(b, key, name_id, kind, shapes.empty() ? kNoIndex : intern(b, shapes), ts_ns);
}

void host_exit(const void* key, int64_t ts_ns) {
  if (ThreadBuffer* b = exit_buffer()) close_range(b, key, ts_ns);
}

uint64_t host_enter_now(const void* key, const char* name, EventKind kind) {
  if (!g_active.load(std::memory_order_relaxed)) return 0;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  const uint32_t name_id = intern_address(b, name);
  return open_range(b, key, name_id, kind, kNoIndex, tick_now());
}

uint64_t host_enter_now(const void* key, const char* name, EventKind kind, const int64_t* dims, size_t n_dims) {
  if (!g_active.load(std::memory_order_relaxed)) return 0;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  const uint32_t name_id = intern_address(b, name);
  const uint32_t shapes_id = dims == nullptr ? kNoIndex : intern_dims(b, dims, n_dims);
  return open_range(b, key, name_id, kind, shapes_id, tick_now());
}

std::string shapes_text(const int64_t* dims, size_t n_dims) { return format_dims(dims, n_dims); }

// intern_dims for the capture's first sight of a key (rare), so that the record_shapes path keeps its
// inlined copy.
static __attribute__((noinline)) uint32_t intern_dims_outline(ThreadBuffer* b, const int64_t* dims, size_t n) {
  return intern_dims(b, dims, n);
}

void host_op_inputs(const char* name, const int64_t* key, size_t n, OpInputsFormatter format, bool grad_recorded) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadBuffer* b = exit_buffer();
  if (b == nullptr || b->open.empty()) return;
  OpenRange& r = b->open.back();
  if (r.name != intern_address(b, name)) return;
  const std::string_view k(reinterpret_cast<const char*>(key), n * sizeof(int64_t));
  auto it = b->op_inputs.find(k);
  if (__builtin_expect(it == b->op_inputs.end(), 0)) {   // first time this thread sees these inputs
    OpInputTexts texts;
    format(key, n, &texts);
    static const int64_t kNoInputs = 0;
    const ThreadBuffer::OpInputIds ids{
        intern_dims_outline(b, texts.dims.empty() ? &kNoInputs : texts.dims.data(), texts.dims.size()),
        texts.types.empty() ? 0u : intern(b, texts.types),
        texts.concrete.empty() ? 0u : intern(b, texts.concrete)};
    b->op_input_keys.emplace_back(k);
    it = b->op_inputs.emplace(b->op_input_keys.back(), ids).first;
  }
  if (r.shapes == kNoIndex) r.shapes = it->second.dims;
  if (r.captured && !b->captured.empty() && b->captured.back().external_id == r.external_id)
    b->captured.pop_back();
  r.captured = true;
  b->captured.push_back({r.external_id, it->second.types, it->second.concrete,
                         static_cast<uint8_t>(grad_recorded ? kGradRecordedFlag : 0)});
}

void host_exit_now(const void* key) {
  const int64_t ts = tick_now();
  if (ThreadBuffer* b = exit_buffer()) close_range(b, key, ts);
}

void host_exit_now(const void* key, uint64_t autograd_link) {
  const int64_t ts = tick_now();
  if (ThreadBuffer* b = exit_buffer()) close_range(b, key, ts, autograd_link);
}

void record(EventKind kind, std::string_view name, int64_t start_ns, int64_t end_ns, uint64_t external_id) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Event e;
  e.kind = kind;
  e.name = intern(b, name);
  e.start_ns = start_ns;
  e.dur_ns = end_ns - start_ns;
  e.external_id = external_id;
  e.tid = b->os_tid;
  append(b, e);
}

void mark_open_collective(const void* key) {
  ThreadBuffer* b = exit_buffer();
  if (b == nullptr || b->open.empty() || b->open.back().key != key || b->open.back().collective) return;
  b->open.back().collective = true;
  g_open_collectives.fetch_add(1, std::memory_order_relaxed);
}

int64_t open_collectives() { return g_open_collectives.load(std::memory_order_relaxed); }

void record_collective(CollectiveInfo info) {
  if (!g_active.load(std::memory_order_relaxed) || info.external_id == 0) return;
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().collectives.push_back(std::move(info));
}

void record_memory(int64_t ts, int64_t bytes_delta, int64_t total_allocated, int64_t total_reserved, int device,
                   uint64_t addr) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Event e;
  e.flags = kMemoryRecordFlag;
  e.start_ns = ts;
  e.dur_ns = bytes_delta;
  e.correlation = static_cast<uint64_t>(total_allocated);
  e.external_id = static_cast<uint64_t>(total_reserved);
  e.device = static_cast<int16_t>(device);
  e.name = static_cast<uint32_t>(addr);
  e.aux = static_cast<uint32_t>(addr >> 32);
  e.tid = b->os_tid;
  append(b, e);
}

void record_storage(int64_t ts, uint64_t addr, int64_t bytes, int device, StorageRole role) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  Event e;
  e.flags = kStorageRecordFlag;
  e.start_ns = ts;
  e.dur_ns = bytes;
  e.correlation = addr;
  e.device = static_cast<int16_t>(device);
  e.aux = static_cast<uint32_t>(role);
  e.tid = b->os_tid;
  append(b, e);
}

int64_t host_rss_bytes() {
  // statm: size resident shared ... in pages. One read(2) of a short file: a few microseconds,
  // taken once per step boundary.
  static const long page = sysconf(_SC_PAGESIZE);
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 && page > 0 ? static_cast<int64_t>(resident) * page : -1;
}

void record_host_rss(int64_t ts) {
  if (!g_active.load(std::memory_order_relaxed)) return;   // no /proc read outside a session
  const int64_t rss = host_rss_bytes();
  if (rss >= 0) record_memory(ts, 0, rss, -1, kRssDevice, 0);
}

Trace drain() {
  Trace trace;
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto& buffers = registry().buffers;
  size_t total = 0;
  for (ThreadBuffer* b : buffers)
    if (b->published_epoch.load(std::memory_order_acquire) == epoch)
      total += b->committed.load(std::memory_order_acquire);
  trace.events.reserve(total);
  for (ThreadBuffer* b : buffers) {
    if (b->published_epoch.load(std::memory_order_acquire) != epoch) continue;
    const uint64_t n = b->committed.load(std::memory_order_acquire);
    for (uint64_t done = 0; done < n;) {
      const Event* chunk = b->chunks[done / kChunkEvents].load(std::memory_order_acquire);
      const uint64_t take = std::min<uint64_t>(kChunkEvents, n - done);
      trace.events.insert(trace.events.end(), chunk, chunk + take);
      done += take;
    }
    trace.dropped_events += b->dropped.load(std::memory_order_relaxed);
  }
  const TickConverter clock;
  remember_clock(clock);
  split_records(trace, clock);
  for (Event& e : trace.events) {
    // Both ends through the same mapping as the memory samples: an event's end and a sample taken
    // at the same tick (the RSS read at a step's end) land on the same nanosecond. Converting the
    // duration on its own rounds separately and could put the end 1 ns before such a sample.
    const int64_t start = clock.time(e.start_ns);
    e.dur_ns = clock.time(e.start_ns + e.dur_ns) - start;
    e.start_ns = start;
  }
  trace.strings = registry().names;
  trace.collectives = std::move(registry().collectives);
  registry().collectives.clear();
  // Exited threads' buffers have been read: free them.
  std::vector<ThreadBuffer*> live;
  for (ThreadBuffer* b : buffers) {
    if (b->orphaned) delete b;
    else live.push_back(b);
  }
  buffers.swap(live);
  return trace;
}

void drain_new(DrainCursor& cursor, Trace& into) {
  into.events.clear();
  into.memory.clear();
  into.storages.clear();
  into.host_memory.clear();
  into.op_args.clear();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
    if (cursor.epoch != epoch) {
      cursor.epoch = epoch;
      cursor.read.clear();
      into.strings = StringTable();
    }
    const StringTable& names = registry().names;
    for (size_t id = into.strings.size(); id < names.size(); ++id) into.strings.intern(names.at(uint32_t(id)));
    for (ThreadBuffer* b : registry().buffers) {
      if (b->published_epoch.load(std::memory_order_acquire) != epoch) continue;
      const uint64_t n = b->committed.load(std::memory_order_acquire);
      uint64_t& done = cursor.read[b->thread_index];
      while (done < n) {
        const Event* chunk = b->chunks[done / kChunkEvents].load(std::memory_order_acquire);
        const uint64_t from = done % kChunkEvents;
        const uint64_t take = std::min<uint64_t>(kChunkEvents - from, n - done);
        into.events.insert(into.events.end(), chunk + from, chunk + from + take);
        done += take;
      }
    }
  }
  const TickConverter clock;
  split_records(into, clock);
  for (Event& e : into.events) {
    const int64_t start = clock.time(e.start_ns);
    e.dur_ns = clock.time(e.start_ns + e.dur_ns) - start;
    e.start_ns = start;
  }
}

Stats stats() {
  Stats s;
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> lock(registry().mutex);
  for (ThreadBuffer* b : registry().buffers) {
    ++s.threads;
    if (b->published_epoch.load(std::memory_order_acquire) != epoch) continue;
    s.events += b->committed.load(std::memory_order_acquire);
    s.dropped += b->dropped.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace gpuprof::collect
