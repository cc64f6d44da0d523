// Kineto-style Chrome-trace writer. Times are written as microseconds with exactly three decimals
// (integer nanoseconds), so gpuprof's importer reads back the very same nanoseconds.
#include "gpuprof/analysis/chrome_export.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "chrome_json.h"
#include "gpuprof/analysis/breakdown.h"
#include "gpuprof/analysis/critical_path.h"
#include "gpuprof/analysis/gpu_summary.h"
#include "gpuprof/analysis/launch_links.h"
#include "gpuprof/core/list_text.h"

namespace gpuprof {

using chrome_json::BlockSink;
using chrome_json::JsonWriter;
using chrome_json::key;
using chrome_json::known;
using chrome_json::str;
using chrome_json::write_footer;
using chrome_json::write_header;
using chrome_json::write_us;

namespace {

constexpr const char* kCriticalPathPid = "Critical path";
constexpr const char* kCriticalPathTid = "steps";

// A host op's input list (shapes, types, concrete inputs: trace.h keeps them as Python prints
// them) as the JSON Kineto writes. False when the text is not such a list (nothing is written).
void write_list_node(JsonWriter& w, const ListTree& t, uint32_t i) {
  const ListNode& n = t.nodes[i];
  switch (n.kind) {
    case ListNode::Kind::List:
      w.StartArray();
      for (uint32_t c = n.first_child; c != kNoIndex; c = t.nodes[c].next_sibling) write_list_node(w, t, c);
      w.EndArray();
      break;
    case ListNode::Kind::Number: {
      const bool numeric = !n.text.empty() &&
                           n.text.find_first_not_of("0123456789+-.eE") == std::string_view::npos &&
                           n.text.find_first_of("0123456789") != std::string_view::npos;
      if (numeric) w.RawValue(n.text.data(), n.text.size());
      else w.String(n.text.data(), n.text.size());
      break;
    }
    case ListNode::Kind::String: w.String(n.text.data(), n.text.size()); break;
    case ListNode::Kind::None: w.RawValue("null", 4); break;
    case ListNode::Kind::True: w.RawValue("true", 4); break;
    case ListNode::Kind::False: w.RawValue("false", 5); break;
  }
}
void write_list_arg(JsonWriter& w, const char* name, const std::string& text) {
  const ListTree t = parse_list_text(text);
  if (!t.ok() || t.nodes[0].kind != ListNode::Kind::List) return;
  key(w, name);
  write_list_node(w, t, 0);
}

const char* cat_of(EventKind k) {
  switch (k) {
    case EventKind::HostOp: return "cpu_op";
    case EventKind::UserRange: return "user_annotation";
    case EventKind::StepMarker: return "user_annotation";   // as Kineto writes ProfilerStep#N
    case EventKind::PythonFunction: return "python_function";
    case EventKind::Runtime: return "cuda_runtime";
    case EventKind::Driver: return "cuda_driver";
    case EventKind::Kernel: return "kernel";
    case EventKind::Memcpy: return "gpu_memcpy";
    case EventKind::Memset: return "gpu_memset";
    case EventKind::Sync: return "cuda_sync";
    case EventKind::Nvtx: return "nvtx";
    case EventKind::GpuUserRange: return "gpu_user_annotation";
    case EventKind::Overhead: return "overhead";
    case EventKind::InputStage: return "gpuprof_input";
    case EventKind::Other: return "Trace";
  }
  return "Trace";
}

bool on_device_timeline(const Event& e) {
  return e.on_device() || e.kind == EventKind::GpuUserRange || e.kind == EventKind::Sync;
}

void write_collective_args(JsonWriter& w, const CollectiveInfo& c) {
  known(w, "Collective name", c.name);
  known(w, "In msg nelems", c.in_nelems);
  known(w, "Out msg nelems", c.out_nelems);
  known(w, "Group size", c.group_size);
  known(w, "dtype", c.dtype);
  known(w, "Process Group Name", c.pg_name);
  known(w, "Process Group Description", c.pg_desc);
  known(w, "Process Group Ranks", c.group_ranks);
}

// An Inductor kernel's launch args, under the names torch's Triton launcher gives them.
void write_launch_args(JsonWriter& w, const CompiledLaunch& c) {
  known(w, "kernel_backend", c.backend);
  known(w, "kernel_file", c.file);
  known(w, "kernel_hash", c.hash);
  known(w, "grid", c.grid);
}

int64_t host_pid(const Trace& t) {
  auto it = t.metadata.find("pid");
  if (it != t.metadata.end()) {
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end != it->second.c_str() && *end == '\0' && v >= 0) return v;
  }
  return 0;
}

// Where one trace's events go: as exported (its own pids and clock), or as one rank of a merged
// timeline (one process per rank, its device lanes as threads of it, its clock shifted onto the
// reference rank's by offset_ns).
struct Placement {
  bool merged = false;
  int64_t rank = 0;
  int64_t offset_ns = 0;
  std::string label;
  // One window of a trace read in windows: only what it owns is written (its events without
  // kContextFlag, its memory samples in [own_from_ns, own_to_ns)), under the whole trace's host pid.
  bool window = false;
  int64_t own_from_ns = 0;
  int64_t own_to_ns = 0;
  int64_t host_pid = -1;
};

// The lanes a timeline's process and thread names label.
struct TimelineNames {
  std::set<int> devices;
  std::set<std::pair<int, uint32_t>> lanes;
  std::set<std::pair<uint32_t, int>> workers;   // (process id, worker id)
  void add(const Trace& t, bool owned_only) {
    for (const Event& e : t.events) {
      if (owned_only && (e.flags & kContextFlag)) continue;
      if (on_device_timeline(e)) {
        devices.insert(e.device < 0 ? 0 : e.device);
        lanes.insert({e.device < 0 ? 0 : e.device, e.tid});
      }
      if (e.kind == EventKind::InputStage && e.device >= 0) workers.emplace(e.tid, e.device);
    }
  }
};

// One point of a counter track: `name`'s value `arg` = `value` from `ts_ns` on.
void counter_point(JsonWriter& w, const std::string& name, int64_t pid, int64_t ts_ns, const char* arg,
                   double value) {
  w.StartObject();
  key(w, "ph");
  w.String("C");
  key(w, "name");
  str(w, name);
  key(w, "pid");
  w.Int64(pid);
  key(w, "ts");
  write_us(w, ts_ns);
  key(w, "args");
  w.StartObject();
  key(w, arg);
  w.Double(value);
  w.EndObject();
  w.EndObject();
}

// Writes one trace's entries of traceEvents (inside the array), part by part.
struct EventWriter {
  JsonWriter& w;
  const Trace& t;
  const Placement& at;
  const int64_t pid;
  // A collective's own facts go on the events they describe, under Kineto's arg names (as on its
  // record_param_comms ops and NCCL kernels), so that the trace reads back the same.
  std::unordered_map<uint64_t, const CollectiveInfo*> collective_by_id;
  // Flows only where both ends exist: a launch without its kernel would dangle in a viewer.
  std::unordered_set<uint64_t> device_correlations;
  // An Inductor kernel's launch args, by the kernel's name id, on each of its launches; a name
  // launched with several sets of args (two graphs' kernels of one name) gets none, null here:
  // which launch had which is not kept.
  std::unordered_map<uint32_t, const CompiledLaunch*> launch_by_name;

  EventWriter(JsonWriter& writer, const Trace& trace, const Placement& placement)
      : w(writer),
        t(trace),
        at(placement),
        pid(placement.merged          ? placement.rank
            : placement.host_pid >= 0 ? placement.host_pid
                                      : host_pid(trace)) {
    for (const CollectiveInfo& c : t.collectives)
      if (c.external_id != 0) collective_by_id.emplace(c.external_id, &c);
    for (const Event& e : t.events)
      if (e.on_device() && e.correlation != 0) device_correlations.insert(e.correlation);
    for (const CompiledLaunch& c : t.compiled_launches) {
      const uint32_t id = t.strings.find(c.name);
      if (id == kNoIndex) continue;
      const auto [it, added] = launch_by_name.emplace(id, &c);
      if (!added) it->second = nullptr;
    }
  }

  void ts(int64_t ns) { write_us(w, ns + at.offset_ns); }
  // A device lane of a merged rank is a thread of the rank's process (GPU d, stream s).
  static int64_t lane(int device, uint32_t stream) {
    return (int64_t(1) << 32) + (int64_t(device < 0 ? 0 : device) << 20) + int64_t(stream);
  }
  void metadata(const char* what, int64_t p, int64_t tid, const char* arg, const std::string* text,
                int64_t number) {
    w.StartObject();
    key(w, "name");
    w.String(what);
    key(w, "ph");
    w.String("M");
    key(w, "pid");
    w.Int64(p);
    key(w, "tid");
    w.Int64(tid);
    key(w, "args");
    w.StartObject();
    key(w, arg);
    if (text != nullptr) str(w, *text);
    else w.Int64(number);
    w.EndObject();
    w.EndObject();
  }
  void process_name(int64_t p, const std::string& name) { metadata("process_name", p, 0, "name", &name, 0); }

  void names(const TimelineNames& n) {
    // Process names as Kineto writes them, so viewers label the rows; a merged rank is one process,
    // sorted by its rank, with a named thread per device lane.
    if (at.merged) {
      process_name(pid, at.label);
      metadata("process_sort_index", pid, 0, "sort_index", nullptr, at.rank);
      for (const auto& [d, stream] : n.lanes) {
        const std::string name = "GPU " + std::to_string(d) + " stream " + std::to_string(stream);
        metadata("thread_name", pid, lane(d, stream), "name", &name, 0);
      }
    } else {
      process_name(pid, "python");
      for (int d : n.devices) process_name(d, "GPU " + std::to_string(d));
    }
    // A DataLoader worker's stages are a track of their own: a process under the worker's pid (a
    // thread of the rank's process in a merged timeline).
    for (const auto& [worker_pid, id] : n.workers) {
      const std::string name = "DataLoader worker " + std::to_string(id);
      if (at.merged) metadata("thread_name", pid, worker_pid, "name", &name, 0);
      else process_name(worker_pid, name);
    }
  }

  void events() {
    for (const Event& e : t.events) {
      const bool dev = on_device_timeline(e);
      if (at.merged && e.kind == EventKind::Other) continue;   // Kineto's own spans: not the rank's work
      if (at.window && (e.flags & kContextFlag)) continue;     // written by the window that owns it
      const bool worker = e.kind == EventKind::InputStage && e.device >= 0;
      const int64_t e_pid = at.merged ? pid : dev ? (e.device < 0 ? 0 : e.device) : worker ? int64_t(e.tid) : pid;
      const int64_t e_tid = at.merged && dev ? lane(e.device, e.tid) : int64_t(e.tid);
      w.StartObject();
      key(w, "ph");
      w.String("X");
      key(w, "cat");
      w.String(cat_of(e.kind));
      key(w, "name");
      str(w, t.name_of(e));
      if (e.kind == EventKind::Other) {
        // Kineto's own "Trace" spans live on a labelled row of their own; on the host row readers
        // such as HTA would take them for work (and shift the trace's start).
        key(w, "pid");
        w.String("Spans");
        key(w, "tid");
        w.String("gpuprof");
      } else {
        key(w, "pid");
        w.Int64(e_pid);
        key(w, "tid");
        w.Int64(e_tid);
      }
      key(w, "ts");
      ts(e.start_ns);
      key(w, "dur");
      write_us(w, e.dur_ns);
      key(w, "args");
      w.StartObject();
      args(e);
      w.EndObject();
      w.EndObject();
      flow(e, e_pid, e_tid);
    }
  }

  // The entries of one event's args object.
  void args(const Event& e) {
    if (e.kind == EventKind::InputStage) {
      // The worker id (-1: the main process) and the batch's number in its worker.
      key(w, "worker");
      w.Int(e.device);
      if (e.external_id != 0) {
        key(w, "batch");
        w.Uint64(e.external_id);
      }
    } else if (e.external_id != 0) {
      key(w, "External id");
      w.Uint64(e.external_id);
    }
    if (e.kind == EventKind::HostOp) {
      // A host op's correlation slot is its autograd link, which Kineto writes as these two.
      const AutogradLink link = autograd_link(e);
      if (link.present) {
        key(w, "Sequence number");
        w.Uint64(link.sequence_nr);
        key(w, "Fwd thread id");
        w.Uint(link.backward ? link.thread : 0);
      }
    } else if (e.correlation != 0) {
      key(w, "correlation");
      w.Uint64(e.correlation);
    }
    // Only activities carry a stream: HTA takes any event with one for GPU work, and the
    // GPU-side user ranges Kineto writes have none.
    if (e.on_device() || e.kind == EventKind::Sync) {
      key(w, "device");
      w.Int(e.device < 0 ? 0 : e.device);
      key(w, "stream");
      w.Uint(e.tid);
    }
    if (e.kind == EventKind::Kernel && e.aux < t.kernels.size()) {
      const KernelInfo& k = t.kernels[e.aux];
      if (k.registers_per_thread >= 0) {
        key(w, "registers per thread");
        w.Int(k.registers_per_thread);
      }
      if (k.shared_mem_bytes >= 0) {
        key(w, "shared memory");
        w.Int64(k.shared_mem_bytes);
      }
      if (k.blocks_per_sm >= 0) {
        key(w, "blocks per SM");
        w.Double(k.blocks_per_sm);
      }
      if (k.warps_per_sm >= 0) {
        key(w, "warps per SM");
        w.Double(k.warps_per_sm);
      }
      // A dimension the trace did not record (all 0: no launch has a 0 dimension) stays out.
      for (const auto& [name, dims] :
           {std::pair<const char*, const int32_t*>{"grid", k.grid}, {"block", k.block}}) {
        if (dims[0] == 0 && dims[1] == 0 && dims[2] == 0) continue;
        key(w, name);
        w.StartArray();
        for (int i = 0; i < 3; ++i) w.Int(dims[i]);
        w.EndArray();
      }
      if (k.est_occupancy_pct >= 0) {
        key(w, "est. achieved occupancy %");
        w.Double(k.est_occupancy_pct);
      }
    } else if ((e.kind == EventKind::Memcpy || e.kind == EventKind::Memset) && e.aux < t.copies.size()) {
      key(w, "bytes");
      w.Int64(t.copies[e.aux].bytes);
    } else if (e.kind == EventKind::HostOp) {
      // Input shapes, and what the FLOP rules read beside them, as Kineto writes them.
      if (e.aux != kNoIndex && e.aux < t.strings.size() && e.aux != 0)
        write_list_arg(w, "Input Dims", t.strings.at(e.aux));
      if (const OpArgs* a = t.op_args_of(static_cast<uint32_t>(&e - t.events.data()))) {
        if (a->types != 0) write_list_arg(w, "Input type", t.strings.at(a->types));
        if (a->concrete != 0) write_list_arg(w, "Concrete Inputs", t.strings.at(a->concrete));
        if (a->trace_flops >= 0) {
          key(w, "flops");
          w.Int64(a->trace_flops);
        }
      }
      if (!launch_by_name.empty()) {
        const auto it = launch_by_name.find(e.name);
        if (it != launch_by_name.end() && it->second != nullptr) write_launch_args(w, *it->second);
      }
      // The op recorded autograd history, its number not kept (written above when it was).
      if ((e.flags & kGradRecordedFlag) && !autograd_link(e).present) {
        key(w, "Sequence number");
        w.Int64(0);
      }
    }
    if (e.external_id != 0 && !collective_by_id.empty() &&
        (e.kind == EventKind::HostOp || e.kind == EventKind::UserRange || e.kind == EventKind::Kernel)) {
      const auto it = collective_by_id.find(e.external_id);
      if (it != collective_by_id.end()) write_collective_args(w, *it->second);
    }
  }

  // The launch's or the device activity's end of its flow arrow (ac2g), where both ends exist.
  void flow(const Event& e, int64_t e_pid, int64_t e_tid) {
    const bool launch = e.kind == EventKind::Runtime || e.kind == EventKind::Driver;
    if (e.correlation != 0 && (launch || e.on_device()) && device_correlations.count(e.correlation)) {
      w.StartObject();
      key(w, "ph");
      w.String(launch ? "s" : "f");
      key(w, "id");   // unique in a merged file: the rank in the high bits
      w.Uint64(at.merged ? (uint64_t(at.rank) << 40) | (e.correlation & ((uint64_t(1) << 40) - 1))
                         : e.correlation);
      key(w, "pid");
      w.Int64(e_pid);
      key(w, "tid");
      w.Int64(e_tid);
      key(w, "ts");
      ts(e.start_ns);
      key(w, "cat");
      w.String("ac2g");
      key(w, "name");
      w.String("ac2g");
      if (!launch) {
        key(w, "bp");
        w.String("e");
      }
      w.EndObject();
    }
  }

  void memory() {
    for (const MemorySample& m : t.memory) {
      if (at.window && (m.ts_ns < at.own_from_ns || m.ts_ns >= at.own_to_ns)) continue;
      w.StartObject();
      key(w, "ph");
      w.String("i");
      key(w, "s");
      w.String("t");
      key(w, "cat");
      w.String("cpu_instant_event");
      key(w, "name");
      w.String("[memory]");
      key(w, "pid");
      w.Int64(pid);
      key(w, "tid");
      w.Uint(m.tid);
      key(w, "ts");
      ts(m.ts_ns);
      key(w, "args");
      w.StartObject();
      key(w, "Device Type");
      w.Int(m.device >= 0 ? 1 : 0);
      key(w, "Device Id");
      w.Int(m.device);
      if (m.addr != 0) {
        key(w, "Addr");
        w.Uint64(m.addr);
      }
      key(w, "Bytes");
      w.Int64(m.bytes_delta);
      key(w, "Total Allocated");
      w.Int64(m.total_allocated);
      key(w, "Total Reserved");
      w.Int64(m.total_reserved);
      w.EndObject();
      w.EndObject();
    }
  }

  void counters() {
    power_counters();
    timeline_counters();
  }

  // NVML samples: each device's power as a counter track, for trace viewers (the importer ignores
  // counters and reads gpuprofGpuSamples, written by write_header).
  void power_counters() {
    for (const GpuSample& s : t.gpu_samples) {
      if (s.power_mw < 0) continue;
      counter_point(w, "GPU " + std::to_string(s.device) + " Power",
                    at.merged ? pid : (s.device < 0 ? 0 : s.device), s.ts_ns + at.offset_ns, "power W",
                    s.power_mw / 1000.0);
    }
  }

  // The GPU timeline as counter tracks (the plugin's trace view had them): each device's
  // utilization per bucket, ending at 0 where the trace ends, and Est. SM efficiency as the plugin
  // drew it: each stretch's level from its start, 0 where no kernel runs.
  void timeline_counters() {
    for (const GpuTimeline& tl : gpu_timelines(t)) {
      for (const bool util : {true, false}) {
        const std::string name =
            "GPU " + std::to_string(tl.device) + (util ? " Utilization" : " Est. SM Efficiency");
        auto counter = [&](int64_t ts_ns, double pct) {
          counter_point(w, name, at.merged ? pid : tl.device, ts_ns + at.offset_ns,
                        util ? "utilization %" : "sm efficiency %", pct);
        };
        if (!util) {
          // A counter holds its value until the next point: a stretch that starts where the one
          // before ended needs no 0 between them, and one at the same level no point at all.
          const std::vector<SmLevel>& ls = tl.sm_levels;
          for (size_t i = 0; i < ls.size(); ++i) {
            const bool joins = i > 0 && ls[i - 1].end_ns == ls[i].start_ns;
            if (!joins || ls[i - 1].pct != ls[i].pct) counter(ls[i].start_ns, ls[i].pct);
            if (i + 1 == ls.size() || ls[i + 1].start_ns != ls[i].end_ns) counter(ls[i].end_ns, 0.0);
          }
          continue;
        }
        for (const GpuBucket& b : tl.buckets) counter(b.start_ns, b.utilization_pct);
        if (!tl.buckets.empty()) counter(tl.buckets.back().start_ns + tl.buckets.back().dur_ns, 0.0);
      }
    }
  }
};

void write_events(JsonWriter& w, const Trace& t, const Placement& at) {
  EventWriter out(w, t, at);
  if (!at.window) {   // a window's lanes are named once, after the last window
    TimelineNames n;
    n.add(t, false);
    out.names(n);
  }
  out.events();
  out.memory();
  if (!at.window) out.counters();
}

void critical_path_names(JsonWriter& w) {
  auto meta = [&](const char* what, const char* arg, const char* text, int64_t number) {
    w.StartObject();
    key(w, "name");
    w.String(what);
    key(w, "ph");
    w.String("M");
    key(w, "pid");
    w.String(kCriticalPathPid);
    key(w, "tid");
    w.String(kCriticalPathTid);
    key(w, "args");
    w.StartObject();
    key(w, arg);
    if (text != nullptr) w.String(text);
    else w.Int64(number);
    w.EndObject();
    w.EndObject();
  };
  meta("process_name", "name", kCriticalPathPid, 0);
  meta("process_sort_index", "sort_index", nullptr, -1);
  meta("thread_name", "name", kCriticalPathTid, 0);
}

// The critical path (docs/metrics.md, "Critical path") as a track of its own, sorted above the
// others: one complete event per piece of each step's chain, named by its cause and what ran, with
// the cause, the step and the place in args. Its category is one gpuprof's importer does not read
// back: the path is re-computed from the events it was computed from. A window writes the steps
// that start in the time it owns, and its track's names are written once, by the caller. False when
// the trace has no steps.
bool write_critical_path(JsonWriter& w, const Trace& t, const Placement& at = {}) {
  const BreakdownResult steps = compute_breakdown(t);
  if (steps.steps.empty()) return false;
  const std::vector<StepCriticalPath> paths = critical_paths(t, link_launches(t), steps);
  std::set<int64_t> owned;
  for (const StepBreakdown& s : steps.steps)
    if (s.host_start_ns >= at.own_from_ns && s.host_start_ns < at.own_to_ns) owned.insert(s.step);
  if (!at.window) critical_path_names(w);
  for (const StepCriticalPath& p : paths) {
    if (at.window && !owned.count(p.step)) continue;
    const PathPieces pieces = path_pieces(t, p);
    bool first = true;
    for (const PathPiece& g : pieces.pieces) {
      const char* cause = path_cause_key(g.cause);
      w.StartObject();
      key(w, "ph");
      w.String("X");
      key(w, "cat");
      w.String("gpuprof_critical_path");
      key(w, "name");
      str(w, std::string(cause) + ": " + path_piece_name(t, g));
      key(w, "pid");
      w.String(kCriticalPathPid);
      key(w, "tid");
      w.String(kCriticalPathTid);
      key(w, "ts");
      write_us(w, g.start_ns);
      key(w, "dur");
      write_us(w, g.end_ns - g.start_ns);
      key(w, "args");
      w.StartObject();
      key(w, "cause");
      w.String(cause);
      key(w, "step");
      w.Int64(p.step);
      known(w, "where", path_piece_place(t, g));
      if (first) {   // the step's first piece says what the track leaves out
        key(w, "step pieces");
        w.Uint64(pieces.pieces.size());
        key(w, "merged");
        w.Uint64(pieces.merged);
        key(w, "cut");
        w.Uint64(pieces.cut);
        key(w, "cut us");
        write_us(w, pieces.cut_ns);
      }
      first = false;
      w.EndObject();
      w.EndObject();
    }
  }
  return true;
}

void write_trace(const Trace& t, BlockSink& sink) {
  JsonWriter w(sink);
  write_header(w, t);
  write_events(w, t, Placement{});
  write_critical_path(w, t);
  write_footer(w);
}

}  // namespace

struct MergedChromeTrace::Writer {
  explicit Writer(const std::string& path) : sink(path), w(sink) {}
  BlockSink sink;
  JsonWriter w;
};

MergedChromeTrace::MergedChromeTrace(const std::string& path, const std::string& metadata_json)
    : out_(std::make_unique<Writer>(path)) {
  JsonWriter& w = out_->w;
  w.StartObject();
  key(w, "schemaVersion");
  w.Int(1);
  // First, so that a folder scan sees at the head that this is no one process's trace.
  key(w, "gpuprofMerged");
  if (metadata_json.empty()) w.RawValue("{}", 2);
  else w.RawValue(metadata_json.data(), metadata_json.size());
  key(w, "traceEvents");
  w.StartArray();
}

MergedChromeTrace::~MergedChromeTrace() = default;

void MergedChromeTrace::add(const Trace& trace, int64_t rank, int64_t offset_ns, const std::string& label) {
  if (!out_) throw TraceExportError("the merged trace is already closed");
  Placement at;
  at.merged = true;
  at.rank = rank;
  at.offset_ns = offset_ns;
  at.label = label;
  write_events(out_->w, trace, at);
}

void MergedChromeTrace::close() {
  if (!out_) return;
  JsonWriter& w = out_->w;
  w.EndArray();
  key(w, "displayTimeUnit");
  w.String("ms");
  key(w, "traceName");
  w.String("gpuprof merged ranks");
  w.EndObject();
  out_->sink.close();
  out_.reset();
}

struct WindowedChromeTrace::Writer {
  Writer(const std::string& path, const Trace& header) : sink(path), w(sink), pid(host_pid(header)) {}
  BlockSink sink;
  JsonWriter w;
  int64_t pid;
  TimelineNames names;
  bool steps = false;
};

WindowedChromeTrace::WindowedChromeTrace(const std::string& path, const Trace& header)
    : out_(std::make_unique<Writer>(path, header)) {
  write_header(out_->w, header);
  Placement at;
  at.window = true;
  at.host_pid = out_->pid;
  EventWriter(out_->w, header, at).power_counters();   // the GPU samples, which the header holds whole
}

WindowedChromeTrace::~WindowedChromeTrace() = default;

void WindowedChromeTrace::add(const Trace& window, int64_t own_from_ns, int64_t own_to_ns) {
  if (!out_) throw TraceExportError("the windowed trace is already closed");
  Placement at;
  at.window = true;
  at.own_from_ns = own_from_ns;
  at.own_to_ns = own_to_ns;
  at.host_pid = out_->pid;
  write_events(out_->w, window, at);
  out_->steps = write_critical_path(out_->w, window, at) || out_->steps;
  out_->names.add(window, true);
}

void WindowedChromeTrace::utilization(int device, const std::vector<std::pair<int64_t, double>>& buckets,
                                      int64_t end_ns) {
  if (!out_) throw TraceExportError("the windowed trace is already closed");
  const std::string name = "GPU " + std::to_string(device) + " Utilization";
  for (const auto& [start_ns, pct] : buckets) counter_point(out_->w, name, device, start_ns, "utilization %", pct);
  if (!buckets.empty()) counter_point(out_->w, name, device, end_ns, "utilization %", 0.0);
}

void WindowedChromeTrace::close() {
  if (!out_) return;
  Placement at;
  at.window = true;
  at.host_pid = out_->pid;
  EventWriter(out_->w, Trace{}, at).names(out_->names);
  if (out_->steps) critical_path_names(out_->w);
  write_footer(out_->w);
  out_->sink.close();
  out_.reset();
}

void export_chrome_trace(const Trace& trace, const std::string& path) {
  BlockSink sink(path);
  write_trace(trace, sink);
  sink.close();
}

std::string export_chrome_json(const Trace& trace) {
  std::string out;
  BlockSink sink(&out);
  write_trace(trace, sink);
  sink.close();
  return out;
}

}  // namespace gpuprof
