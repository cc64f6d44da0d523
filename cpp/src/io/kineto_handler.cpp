// The SAX handler (kineto_handler.h): the nesting it tracks, each field and arg it keeps, and the
// Trace records an event becomes when its object closes. Numbers arrive as their raw text
// (decimal.h converts timestamps exactly).
#include "kineto_handler.h"
#include "window_filter.h"

#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "decimal.h"
#include "gpuprof/core/names.h"
#include "intern_cache.h"
#include "kineto_devices.h"
#include "kineto_event.h"
#include "kineto_vocabulary.h"

namespace gpuprof::kineto {

namespace {

using io::parse_double;
using io::parse_int;
using io::trailing_number;

class KinetoHandler {
 public:
  KinetoHandler(Trace& trace, ImportStats& stats, const ImportOptions& opts, const io::TextStream& in)
      : trace_(trace), stats_(stats), opts_(opts), in_(in) {}

  // ---- the SAX interface ------------------------------------------------------------------------
  bool Null() { return scalar(Scalar::Null, {}); }
  bool Bool(bool b) { return scalar(Scalar::Bool, b ? "true" : "false"); }
  bool RawNumber(std::string_view text, size_t) { return scalar(Scalar::Number, text); }
  bool String(const char* s, size_t n) { return scalar(Scalar::String, {s, n}); }
  bool StartObject() { return open(true); }
  bool EndObject() { return close(); }
  bool StartArray() { return open(false); }
  bool EndArray() { return close(); }

  bool Key(const char* s, size_t n) {
    const std::string_view k(s, n);
    // An event's own keys first (no capture is open inside traceEvents), then its args'; the
    // rest out of line, so that the reader's key path keeps few registers and no stack objects.
    if (in_events_ && depth_ == ev_depth_) {
      field_ = field_of(k);
      return true;
    }
    if (in_events_ && in_args_ && depth_ == ev_depth_ + 1) {
      arg_ = arg_of(k);
      return true;
    }
    return other_key(k);
  }

  [[gnu::noinline]] bool other_key(std::string_view k) {
    if (capture_depth_ > 0) {
      capture_.key(k);
      return true;
    }
    if (depth_ == 1 && top_is_object_) {
      top_key_ = clean(std::string(k));   // becomes a metadata key: valid UTF-8 like every name
      return true;
    }
    if ((in_devices_ || in_samples_) && depth_ == 3)
      (in_devices_ ? device_key_ : sample_key_).assign(k.data(), k.size());
    return true;
  }

  // ---- results ----------------------------------------------------------------------------------
  bool saw_events() const { return saw_events_; }
  bool top_ok() const { return top_seen_; }
  const std::string& abort_reason() const { return abort_reason_; }
  int64_t event_index() const { return in_events_ ? int64_t(stats_.records) : -1; }
  uint64_t invalid_utf8() const { return invalid_utf8_; }
  bool timestamps_ns() const { return unit_ns_ == 1; }
  int unit_ns() const { return unit_ns_; }
  int64_t host_pid() const { return host_pid_; }
  bool stopped_at_split() const { return stopped_at_split_; }
  const std::vector<int8_t>& unit_votes() const { return unit_votes_; }
  void set_split(SplitPoint* split) { split_ = split; }
  // The second thread of a split import reads from between two events of traceEvents, in
  // `{"traceEvents": [`: the state the first thread is in there.
  void start_inside_trace_events() {
    depth_ = 2;
    top_seen_ = top_is_object_ = true;
    top_key_ = "traceEvents";
    in_events_ = saw_events_ = true;
    ev_depth_ = 3;
  }

 private:
  enum class Scalar { Null, Bool, Number, String };

  bool fail(std::string reason) {
    abort_reason_ = std::move(reason);
    return false;
  }

  bool open(bool object) {
    ++depth_;
    // Kineto nests at most 5 levels (args holding lists of lists); far deeper input is not a
    // trace, and refusing it bounds the parser's stack, inside captured metadata values and
    // "Input Dims"-like lists too (whose per-level bits are one 64-bit word).
    if (depth_ > 64) return fail("JSON nested more than 64 levels deep: not a Kineto trace");
    // An event, its args, their lists (no capture is open inside traceEvents, and traceEvents
    // opens at depth 1 or 2): inline; the rest out of line.
    if (in_events_ && shapes_depth_ == 0) {
      if (depth_ == ev_depth_) {
        if (!object) {
          ++stats_.records;
          skip("not an object");
          return true;
        }
        in_event_ = true;
        ev_.reset();
        field_ = Field::Ignore;
        return true;
      }
      if (in_event_ && depth_ == ev_depth_ + 1 && object && field_ == Field::Args) {
        in_args_ = true;
        arg_ = Arg::Ignore;
        return true;
      }
      if (in_args_ && depth_ == ev_depth_ + 2 && !object &&
          (arg_ == Arg::InputDims || arg_ == Arg::InputType || arg_ == Arg::ConcreteInputs)) {
        // The list is written as text into the string its key names (the FLOP rules read the
        // types and the concrete inputs the same way they read the shapes).
        list_text_ = arg_ == Arg::InputDims ? &ev_.shapes : arg_ == Arg::InputType ? &ev_.types : &ev_.concrete;
        list_done_ = arg_ == Arg::InputDims   ? &ev_.has_shapes
                     : arg_ == Arg::InputType ? &ev_.has_types
                                              : &ev_.has_concrete;
        list_text_->clear();
        return shapes_open(false);
      }
      if (in_args_ && depth_ == ev_depth_ + 2 && !object && (arg_ == Arg::Grid || arg_ == Arg::Block)) {
        dims_ = arg_ == Arg::Grid ? ev_.grid : ev_.block;
        dim_i_ = 0;
        return true;
      }
      return true;
    }
    return other_open(object);
  }

  [[gnu::noinline]] bool other_open(bool object) {
    if (shapes_depth_ > 0) return shapes_open(object);
    if (capture_depth_ > 0) {
      ++capture_depth_;
      capture_.start(object);
      return true;
    }
    if (depth_ == 1) {
      top_seen_ = true;
      top_is_object_ = object;
      if (!object) {
        // The Trace Event Format's "JSON Array Format": a bare list of events.
        in_events_ = saw_events_ = true;
        ev_depth_ = 2;
      }
      return true;
    }
    if (depth_ == 2 && top_is_object_) {
      if (top_key_ == "traceEvents" && !object) {
        in_events_ = saw_events_ = true;
        ev_depth_ = 3;
        return true;
      }
      if (top_key_ == "deviceProperties" && !object) {
        in_devices_ = true;
        return true;
      }
      if (top_key_ == "gpuprofGpuSamples" && !object) {   // gpuprof's own export: NVML samples
        in_samples_ = true;
        return true;
      }
      // Any other top-level value is kept as compact JSON in the metadata.
      capture_.clear();
      capture_depth_ = 1;
      capture_.start(object);
      return true;
    }
    if (in_devices_ && depth_ == 3 && object) {
      trace_.devices.emplace_back();
      device_key_.clear();
    }
    if (in_samples_ && depth_ == 3 && object) {
      trace_.gpu_samples.emplace_back();
      sample_key_.clear();
    }
    return true;
  }

  bool close() {
    if (shapes_depth_ > 0) {
      shapes_close();
      --depth_;
      return true;
    }
    if (capture_depth_ > 0) {
      --depth_;
      capture_.end();
      if (--capture_depth_ == 0) trace_.metadata[top_key_] = clean(capture_.text());
      return true;
    }
    if (in_events_) {
      if (depth_ == ev_depth_ && in_event_) {
        in_event_ = false;
        finish_event();
        if (!abort_reason_.empty()) return false;
        if (split_ != nullptr && split_->reached(in_.Tell())) {
          // Exactly at the second thread's start, between two events of {"traceEvents": [...]}?
          const bool here = in_.Tell() == split_->at.load(std::memory_order_relaxed) && ev_depth_ == 3 &&
                            top_is_object_ && capture_depth_ == 0;
          SplitPoint* const split = split_;
          split_ = nullptr;
          int unit = unit_ns_;
          const AtSplit next = split->arrive(here, &unit, vote_);
          if (next == AtSplit::TakeSecondHalf) {
            decide_unit(unit);   // still voting: the unit the whole file's first votes give
            stopped_at_split_ = abort_reason_.empty();
            return false;
          }
          if (next == AtSplit::Interrupted) return fail("interrupted");
        }
      } else if (depth_ == ev_depth_ + 1 && in_args_) {
        in_args_ = false;
      } else if (depth_ == ev_depth_ + 2) {
        dims_ = nullptr;
      } else if (depth_ == ev_depth_ - 1) {
        in_events_ = false;
        end_of_events();
        if (!abort_reason_.empty()) return false;
      }
    } else if (in_devices_) {
      if (depth_ == 2) in_devices_ = false;
    } else if (in_samples_) {
      if (depth_ == 2) in_samples_ = false;
    }
    --depth_;
    return true;
  }

  // The hot cases first, inline in the reader: a value of an event's field or of one of its args.
  __attribute__((always_inline)) bool scalar(Scalar type, std::string_view v) {
    if (in_event_ && capture_depth_ == 0) {
      if (depth_ == ev_depth_) return event_field(type, v);
      if (in_args_ && depth_ == ev_depth_ + 1) return event_arg(type, v);
    }
    return other_scalar(type, v);
  }

  [[gnu::noinline]] bool other_scalar(Scalar type, std::string_view v) {
    // Inside an "Input Dims"-like list or a kernel's grid or block (deeper than an event's args:
    // none of the cases below).
    if (shapes_depth_ > 0) return shapes_scalar(type, v);
    if (dims_ != nullptr && depth_ == ev_depth_ + 2) {
      int64_t x;
      if (type == Scalar::Number && dim_i_ < 3 && parse_int(v, &x) && x >= 0 && x <= INT32_MAX)
        dims_[dim_i_] = int32_t(x);
      if (type == Scalar::Number) ++dim_i_;
      return true;
    }
    if (capture_depth_ > 0) return capture_scalar(type, v);
    if (depth_ == 0) {
      top_seen_ = true;
      return fail(std::string("the top-level JSON value is a ") +
                  (type == Scalar::String   ? "string"
                   : type == Scalar::Number ? "number"
                                            : "literal") +
                  ", not an object with a traceEvents list: not a Chrome trace");
    }
    if (depth_ == 1 && top_is_object_) {
      std::string text(v);
      if (type == Scalar::Null) text = "null";
      trace_.metadata[top_key_] = clean(text);
      return true;
    }
    if (in_events_) {
      if (depth_ == ev_depth_ - 1) {   // a number or string where an event object belongs
        ++stats_.records;
        skip("not an object");
        return true;
      }
      if (in_event_ && depth_ == ev_depth_) return event_field(type, v);
      if (in_args_ && depth_ == ev_depth_ + 1) return event_arg(type, v);
      return true;
    }
    if (in_devices_ && depth_ == 3 && !trace_.devices.empty()) device_field(type, v);
    if (in_samples_ && depth_ == 3 && !trace_.gpu_samples.empty() && type == Scalar::Number)
      set_sample_number(trace_.gpu_samples.back(), sample_key_, v);
    return true;
  }

  bool capture_scalar(Scalar type, std::string_view v) {
    switch (type) {
      case Scalar::Null: capture_.null(); break;
      case Scalar::Bool: capture_.boolean(v == "true"); break;
      case Scalar::Number: capture_.raw_number(v); break;
      case Scalar::String: capture_.string(clean(std::string(v))); break;
    }
    return true;
  }

  // ---- "Input Dims", written as Python's str() of the list (the form record_shapes gives live and
  // the plugin shows): lists in brackets, items separated by ", ". Kineto writes lists of lists of
  // integers (deeper for tensor lists); any other value is written as Python would print it.
  // "Input type" and "Concrete Inputs" (lists of strings) are written the same way (FLOPs).
  // Appends an item's text, after ", " when the list has an item already (append_list_item).
  void shapes_put(std::string_view head, std::string_view body = {}, std::string_view tail = {}) {
    const bool sep = (shapes_has_item_ & (uint64_t(1) << shapes_depth_)) != 0;
    shapes_has_item_ |= uint64_t(1) << shapes_depth_;
    append_list_item(*list_text_, sep, head, body, tail);
  }
  bool shapes_open(bool object) {
    if (shapes_depth_ > 0) shapes_put(object ? "{" : "[");
    else (*list_text_) += object ? '{' : '[';
    ++shapes_depth_;
    shapes_has_item_ &= ~(uint64_t(1) << shapes_depth_);
    shapes_object_ = (shapes_object_ & ~(uint64_t(1) << shapes_depth_)) | (uint64_t(object) << shapes_depth_);
    return true;
  }
  void shapes_close() {
    (*list_text_) += (shapes_object_ & (uint64_t(1) << shapes_depth_)) ? '}' : ']';
    if (--shapes_depth_ == 0) *list_done_ = true;
  }
  bool shapes_scalar(Scalar type, std::string_view v) {
    // The first non-empty entry of "Input type" (a collective's dtype, when it records none).
    if (list_text_ == &ev_.types && shapes_depth_ == 1 && type == Scalar::String && !v.empty() &&
        ev_.input_type.empty())
      ev_.input_type.assign(v.data(), v.size());
    switch (type) {
      case Scalar::Null: shapes_put("None"); break;
      case Scalar::Bool: shapes_put(v == "true" ? "True" : "False"); break;
      case Scalar::Number: shapes_put(v); break;
      case Scalar::String: shapes_put("'", v, "'"); break;
    }
    return true;
  }

  std::string clean(const std::string& s) {
    std::string fixed;
    if (sanitize_utf8(s, &fixed)) {
      ++invalid_utf8_;
      return fixed;
    }
    return s;
  }

  bool event_field(Scalar type, std::string_view v) {
    switch (field_) {
      case Field::Ph:
        if (type == Scalar::String && !v.empty()) ev_.ph = v[0];
        break;
      case Field::Cat:
        if (type == Scalar::String) ev_.cat = classify_cat(v);
        break;
      case Field::Name:
        if (type == Scalar::String) {
          ev_.name.assign(v.data(), v.size());
          ev_.has_name = true;
        }
        break;
      case Field::Pid:
        if (type == Scalar::Number) {
          if (!parse_int(v, &ev_.pid)) ev_.pid = -1;
        }
        break;
      case Field::Tid:
        if (type == Scalar::Number) {
          if (!parse_int(v, &ev_.tid)) ev_.tid = -1;
        } else if (type == Scalar::String) {
          ev_.tid = trailing_number(v);
        }
        break;
      case Field::Ts:
        if (type == Scalar::Number) keep_time(ev_.ts, v, true);
        break;
      case Field::Dur:
        if (type == Scalar::Number) keep_time(ev_.dur, v, false);
        break;
      default: break;
    }
    field_ = Field::Ignore;
    return true;
  }

  bool event_arg(Scalar type, std::string_view v) {
    if (arg_ == Arg::Ignore) return true;
    if (type == Scalar::String) return text_arg(v);
    if (type != Scalar::Number) return true;
    auto as_int = [&](int64_t* out) {
      if (!parse_int(v, out)) ev_.bad_number = true;
    };
    auto as_double = [&](double* out) {
      if (!parse_double(v, out)) ev_.bad_number = true;
    };
    switch (arg_) {
      case Arg::Correlation: as_int(&ev_.correlation); break;
      case Arg::ExternalId: as_int(&ev_.external_id); break;
      case Arg::Device: as_int(&ev_.device); break;
      case Arg::Stream: as_int(&ev_.stream); break;
      case Arg::Registers: as_int(&ev_.registers); break;
      case Arg::SharedMem: as_int(&ev_.shared_mem); break;
      case Arg::Bytes:
        as_int(&ev_.bytes);
        ev_.has_bytes = true;
        break;
      case Arg::TotalAllocated: as_int(&ev_.total_allocated); break;
      case Arg::TotalReserved: as_int(&ev_.total_reserved); break;
      case Arg::DeviceType: as_int(&ev_.device_type); break;
      case Arg::DeviceId: as_int(&ev_.device_id); break;
      case Arg::Flops: {   // FLOPs: a count too large for 64 bits is not kept (not an error)
        int64_t x = -1;
        if (parse_int(v, &x) && x >= 0) ev_.flops = x;
        break;
      }
      case Arg::Addr: as_int(&ev_.addr); break;
      case Arg::SequenceNumber: as_int(&ev_.sequence_nr); break;
      case Arg::FwdThreadId: as_int(&ev_.fwd_thread); break;
      case Arg::BlocksPerSm: as_double(&ev_.blocks_per_sm); break;
      case Arg::WarpsPerSm: as_double(&ev_.warps_per_sm); break;
      case Arg::Occupancy: as_double(&ev_.occupancy); break;
      case Arg::Worker: as_int(&ev_.worker); break;
      case Arg::Batch: as_int(&ev_.batch); break;
      case Arg::InMsgNelems:
        as_int(&ev_.coll.in_nelems);
        ev_.collective = true;
        break;
      case Arg::OutMsgNelems:
        as_int(&ev_.coll.out_nelems);
        ev_.collective = true;
        break;
      case Arg::GroupSize: {
        int64_t n = -1;
        as_int(&n);
        ev_.coll.group_size = n >= 0 && n <= INT32_MAX ? int32_t(n) : -1;
        ev_.collective = true;
        break;
      }
      default: break;
    }
    arg_ = Arg::Ignore;
    return true;
  }

  // The text facts of a collective ("Collective name", "dtype", the process group's), and of an
  // Inductor kernel's launch (kept as read: cleaned once per distinct launch, compiled_launches.h).
  bool text_arg(std::string_view v) {
    ev_.keep_launch_arg(arg_, v);
    std::string* to = nullptr;
    switch (arg_) {
      case Arg::CollectiveName: to = &ev_.coll.name; break;
      case Arg::Dtype: to = &ev_.coll.dtype; break;
      case Arg::PgName: to = &ev_.coll.pg_name; break;
      case Arg::PgDesc: to = &ev_.coll.pg_desc; break;
      case Arg::PgRanks: to = &ev_.coll.group_ranks; break;
      default: break;
    }
    if (to != nullptr) {
      *to = clean(std::string(v));
      ev_.collective = true;
    }
    arg_ = Arg::Ignore;
    return true;
  }

  void device_field(Scalar type, std::string_view v) {
    DeviceProps& d = trace_.devices.back();
    if (device_key_ == "name") {
      if (type == Scalar::String) d.name = clean(std::string(v));
    } else if (type == Scalar::Number) {
      set_device_number(d, device_key_, v);
    }
  }

  void skip(const char* reason) {
    ++trace_.skipped_events;
    ++stats_.skipped_by_reason[reason];
  }

  // The time unit of the file (docs/analyze.md), decided by the majority of its first
  // kUnitVotes nonzero timestamps: Kineto and the Chrome format write microseconds; a value of
  // 1e17 or more cannot be microseconds, so it votes for nanoseconds. One outlier (an event with a
  // nanosecond time in a file of microseconds) does not switch the whole file: it is skipped and
  // counted. Until the vote is in, events are held in order with their times as text, then
  // replayed (so the result does not depend on where the decision fell).
  // (The rule's numbers: UnitVote in split_point.h.)
  void hold(const PendingEvent& p) {
    held_.push_back(p);
    int vote = -1;
    if (p.ts.present && !p.bad_number) {
      int64_t probe = 0;
      if (io::scaled_decimal(p.ts.text, 0, &probe) && probe != 0) vote = looks_like_ns(probe) ? 1 : 0;
    }
    unit_votes_.push_back(int8_t(vote));
    if (vote_.add(vote)) decide_unit();
  }

  // Decides the unit with the votes so far (or as `unit`, what a split import's first thread was
  // told a one-thread read decides) and replays the held events.
  void decide_unit(int unit = 0) {
    if (unit_ns_ != 0) return;
    unit_ns_ = unit != 0 ? unit : vote_.unit_ns();
    std::vector<PendingEvent> held;
    held.swap(held_);
    for (PendingEvent& p : held) {
      if (!abort_reason_.empty()) break;
      use_event(p);
    }
  }

  // Whether a time field converts in the file's unit (decided). A ts in the other unit is
  // marked (`other_unit`) for the event to be skipped with its own reason.
  bool convert(RawNum& n, std::string_view text, bool is_ts) {
    n.converted = true;
    n.ok = io::scaled_decimal(text, unit_ns_ == 1 ? 0 : 3, &n.ns);
    if (!is_ts) return n.ok;
    if (unit_ns_ == 1) {
      n.other_unit = n.ok && n.ns != 0 && !looks_like_ns(n.ns);
    } else if (!n.ok) {
      int64_t probe = 0;   // too large for microseconds: nanoseconds, or simply out of range
      n.other_unit = io::scaled_decimal(text, 0, &probe) && looks_like_ns(probe);
    }
    return n.ok;
  }

  bool to_ns(RawNum& n, bool is_ts, int64_t* out) {
    if (!n.converted) convert(n, n.text, is_ts);
    *out = n.ns;
    return n.ok;
  }

  // A time field as it is read: converted at once when the unit is known, else kept as text.
  void keep_time(RawNum& n, std::string_view v, bool is_ts) {
    n.present = true;
    n.converted = false;
    n.other_unit = false;
    if (unit_ns_ != 0) convert(n, v, is_ts);
    else n.text.assign(v.data(), v.size());
  }

  // Names and shapes as ids of the table, made valid UTF-8 first (intern_cache.h).
  uint32_t intern_clean(const std::string& text) { return interned_.intern(text, trace_.strings, &invalid_utf8_); }

  uint32_t intern_name(const PendingEvent& p) { return intern_clean(p.name); }

  void finish_event() {
    ++stats_.records;
    if (unit_ns_ == 0) return hold(ev_);
    use_event(ev_);
  }

  // The end of traceEvents (or of the text): a unit not decided yet is decided with what was seen.
  void end_of_events() { decide_unit(); }

  void use_event(PendingEvent& p) {
    switch (p.ph) {
      case 'X': break;
      case 'i':
      case 'I':
        if (p.name == "[memory]") {
          add_memory_sample(p);
          return;
        }
        ++stats_.ignored_records;
        return;
      case 'B':
      case 'E': skip("begin/end pair (ph B/E; Kineto writes complete events)"); return;
      case 0: skip("missing ph"); return;
      default:
        if (!is_passed_over_phase(p.ph)) return skip("unknown ph");
        ++stats_.ignored_records;
        return;
    }
    if (p.cat == Cat::Derived) {   // computed from the trace's own events: re-computed, not read
      ++stats_.ignored_records;
      return;
    }
    if (!p.ts.present) return skip("missing ts");
    if (!p.dur.present) return skip("missing dur");
    if (p.bad_number) return skip("number out of 64-bit range");
    int64_t start_ns = 0, dur_ns = 0;
    const bool times_ok = to_ns(p.ts, true, &start_ns) && to_ns(p.dur, false, &dur_ns);
    if (p.ts.other_unit) return skip(other_unit_reason());
    if (!times_ok) return skip("time out of range");
    if (dur_ns < 0) return skip("negative dur");
    if (start_ns > INT64_MAX - dur_ns) return skip("time out of range");
    uint8_t window_flags = 0;   // kContextFlag for a window's context (window_filter.h)
    if ((opts_.scan_steps || opts_.windowed) &&
        !window_keeps(opts_, stats_, kind_of(p.cat), p, &host_pid_, start_ns, dur_ns, &window_flags))
      return;
    if (opts_.max_events != 0 && trace_.events.size() >= opts_.max_events) {
      abort_reason_ = "more than " + std::to_string(opts_.max_events) +
                      " events (the max_events limit; raise it to read this trace)";
      return;
    }

    EventKind kind = kind_of(p.cat);
    Event e;
    e.name = intern_name(p);
    if ((kind == EventKind::HostOp || kind == EventKind::UserRange) &&
        is_step_marker_name(trace_.strings.at(e.name)))
      kind = EventKind::StepMarker;
    e.kind = kind;
    e.flags |= window_flags;
    e.start_ns = start_ns;
    e.dur_ns = dur_ns;
    e.correlation = p.correlation > 0 ? uint64_t(p.correlation) : 0;
    e.external_id = p.external_id > 0 ? uint64_t(p.external_id) : 0;
    // Input shapes belong to host ops; interned after the name, so a split import that interns
    // each event's strings in the same order gives the same ids.
    if (kind == EventKind::HostOp && p.has_shapes) e.aux = intern_clean(p.shapes);
    // A host op launches nothing itself: its correlation slot holds its autograd link. Kineto
    // writes `Fwd thread id` 0 on forward ops (their own thread is not written: unknown here).
    if (kind == EventKind::HostOp)
      e.correlation =
          pack_autograd_link(p.sequence_nr, p.fwd_thread > 0 ? uint64_t(p.fwd_thread) : 0, p.fwd_thread > 0);
    if (kind == EventKind::HostOp) {   // FLOPs: interned after the shapes, in this order
      if (p.sequence_nr >= 0) e.flags |= kGradRecordedFlag;   // the op recorded autograd history
      if (p.has_types || p.has_concrete || p.flops >= 0) {
        OpArgs a;
        a.event = static_cast<uint32_t>(trace_.events.size());
        a.types = p.has_types ? intern_clean(p.types) : 0;
        a.concrete = p.has_concrete ? intern_clean(p.concrete) : 0;
        a.trace_flops = p.flops;
        trace_.op_args.push_back(a);
      }
    }
    if (is_device_kind(kind)) {
      // New Kineto: pid = device, tid = stream; old: pid 0, tid "stream 7"; args say it exactly.
      int64_t dev = p.device >= 0 ? p.device : (p.pid >= 0 && p.pid < 4096 ? p.pid : 0);
      e.device = static_cast<int16_t>(dev <= INT16_MAX ? dev : 0);
      e.tid = static_cast<uint32_t>(p.stream >= 0 ? p.stream : (p.tid >= 0 ? p.tid : 0));
    } else if (kind == EventKind::InputStage) {
      // A DataLoader worker's stage: its worker id (-1: the main process) and batch number.
      e.tid = static_cast<uint32_t>(p.tid >= 0 ? p.tid : 0);
      e.device = static_cast<int16_t>(p.worker >= 0 && p.worker <= INT16_MAX ? p.worker : -1);
      e.external_id = p.batch > 0 ? uint64_t(p.batch) : 0;
    } else {
      e.tid = static_cast<uint32_t>(p.tid >= 0 ? p.tid : 0);
      if (host_pid_ < 0 && p.pid >= 0 && kind != EventKind::Other) host_pid_ = p.pid;
    }
    if (p.compiled_launch && kind == EventKind::HostOp) launches_.add(trace_.strings.at(e.name), p.launch, trace_);
    if (e.external_id != 0 &&
        (kind == EventKind::HostOp || kind == EventKind::UserRange || kind == EventKind::Kernel))
      add_collective_info(p, e);
    if (kind == EventKind::Kernel) {
      e.aux = static_cast<uint32_t>(trace_.kernels.size());
      trace_.kernels.push_back(p.kernel_info());
    } else if (kind == EventKind::Memcpy || kind == EventKind::Memset) {
      // Parsing the name once per distinct name: a trace has a handful of copy names. A set's
      // `bytes` are what it wrote; its name says only the memory it wrote to ("Memset (Device)").
      auto it = copy_by_name_.find(e.name);
      if (it == copy_by_name_.end()) {
        const std::string& name = trace_.strings.at(e.name);
        CopyInfo info;
        if (kind == EventKind::Memcpy) {
          info = copy_info_from_name(name);
        } else {
          const size_t open = name.find('(');
          if (open != std::string::npos) info.dst = memory_kind_from(std::string_view(name).substr(open + 1));
        }
        it = copy_by_name_.emplace(e.name, info).first;
      }
      CopyInfo c = it->second;
      c.bytes = p.has_bytes && p.bytes > 0 ? p.bytes : 0;
      e.aux = static_cast<uint32_t>(trace_.copies.size());
      trace_.copies.push_back(c);
    }
    trace_.events.push_back(e);
  }

  // A collective's facts, as recorded on the event; or, for a backend's own range (gloo:all_reduce)
  // recorded with its shapes, the elements and type of its inputs (what the plugin sized it by).
  void add_collective_info(PendingEvent& p, const Event& e) {
    if (p.collective) {
      p.coll.external_id = e.external_id;
      if (p.coll.dtype.empty() && !p.input_type.empty()) p.coll.dtype = clean(p.input_type);
      trace_.collectives.push_back(std::move(p.coll));
      p.coll = CollectiveInfo{};
      return;
    }
    if (!p.has_shapes || p.input_type.empty() || !is_backend_collective_name(trace_.strings.at(e.name))) return;
    CollectiveInfo c;
    c.external_id = e.external_id;
    c.in_nelems = elements_in_dims(p.shapes);
    c.dtype = clean(p.input_type);
    if (c.in_nelems >= 0) trace_.collectives.push_back(std::move(c));
  }

  const char* other_unit_reason() const {
    return unit_ns_ == 1 ? "timestamp in microseconds in a nanosecond trace"
                         : "timestamp in nanoseconds in a microsecond trace";
  }

  void add_memory_sample(PendingEvent& p) {
    if (!p.ts.present) return skip("missing ts");
    if (p.bad_number) return skip("number out of 64-bit range");
    MemorySample m;
    const bool ok = to_ns(p.ts, true, &m.ts_ns);
    if (p.ts.other_unit) return skip(other_unit_reason());
    if (!ok) return skip("time out of range");
    if ((opts_.scan_steps || opts_.windowed) && !memory_sample_kept(opts_, stats_, m.ts_ns, &m.flags)) return;
    m.bytes_delta = p.has_bytes ? p.bytes : 0;
    m.total_allocated = p.total_allocated;
    m.total_reserved = p.total_reserved;
    // Device Type 0 is the CPU allocator (c10::DeviceType::CPU); the rest name a device index.
    m.device = p.device_type > 0 && p.device_id >= 0 && p.device_id <= INT16_MAX
                   ? static_cast<int16_t>(p.device_id)
                   : int16_t(-1);
    m.addr = static_cast<uint64_t>(p.addr);
    m.tid = static_cast<uint32_t>(p.tid >= 0 ? p.tid : 0);
    trace_.memory.push_back(m);
  }

  Trace& trace_;
  ImportStats& stats_;
  const ImportOptions& opts_;
  const io::TextStream& in_;
  int depth_ = 0;
  bool top_seen_ = false;
  bool top_is_object_ = false;
  std::string top_key_;
  bool in_events_ = false, saw_events_ = false, in_event_ = false, in_args_ = false;
  int ev_depth_ = 0;
  bool in_devices_ = false;
  std::string device_key_;
  bool in_samples_ = false;   // inside gpuprofGpuSamples
  std::string sample_key_;
  Field field_ = Field::Ignore;
  Arg arg_ = Arg::Ignore;
  int32_t* dims_ = nullptr;
  int dim_i_ = 0;
  int shapes_depth_ = 0;          // nesting inside an "Input Dims" value; 0: not in one
  std::string* list_text_ = nullptr;   // where the list being read is written (shapes, types, concrete)
  bool* list_done_ = nullptr;          // set when that list closes
  uint64_t shapes_has_item_ = 0;  // bit d: the list at shapes depth d has an item already
  uint64_t shapes_object_ = 0;    // bit d: the value at shapes depth d is an object
  PendingEvent ev_;
  int64_t host_pid_ = -1;   // the profiled process (first host event's pid)
  int unit_ns_ = 0;   // ns per unit of ts/dur: 0 until known, then 1000 (us) or 1 (ns)
  std::vector<PendingEvent> held_;   // events read while the unit is not decided, in order
  UnitVote vote_;
  std::vector<int8_t> unit_votes_;   // each held event's vote
  std::string abort_reason_;
  uint64_t invalid_utf8_ = 0;
  std::unordered_map<uint32_t, CopyInfo> copy_by_name_;
  InternCache interned_;
  CompiledLaunchRows launches_;
  // Capture of other top-level values as compact JSON.
  io::JsonWriter capture_;
  int capture_depth_ = 0;
  SplitPoint* split_ = nullptr;
  bool stopped_at_split_ = false;
};

ParseResult result_of(const KinetoHandler& h, io::JsonResult json) {
  ParseResult r;
  r.json = json;
  r.saw_events = h.saw_events();
  r.abort_reason = h.abort_reason();
  r.event_index = h.event_index();
  r.unit_ns = h.unit_ns();
  r.host_pid = h.host_pid();
  r.invalid_utf8 = h.invalid_utf8();
  r.stopped_at_split = h.stopped_at_split();
  r.unit_votes = h.unit_votes();
  return r;
}

}  // namespace

ParseResult parse_text(io::TextStream& in, Trace& trace, ImportStats& stats, const ImportOptions& opts,
                       SplitPoint* split) {
  KinetoHandler handler(trace, stats, opts, in);
  if (split != nullptr) handler.set_split(split);
  // The reader keeps its nesting on the heap; the handler stops the parse past 64 levels.
  // In-situ: strings and numbers are handed over where they lie in the stream's chunk (each lies
  // whole in one: text_stream.h), never copied.
  const io::JsonResult json = io::JsonSax<KinetoHandler>(in, handler).parse();
  return result_of(handler, json);
}

ParseResult parse_rest_of_events(io::TextStream& in, Trace& trace, ImportStats& stats, const ImportOptions& opts) {
  KinetoHandler handler(trace, stats, opts, in);
  handler.start_inside_trace_events();
  const io::JsonResult json = io::JsonSax<KinetoHandler>(in, handler).parse_rest({1, 0});
  return result_of(handler, json);
}

}  // namespace gpuprof::kineto
