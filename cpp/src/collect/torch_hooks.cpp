// The only code that includes ATen: RecordFunction callbacks that feed the collector.
#include "torch_hooks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/library.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "gpuprof/collect/collector.h"
#include "gpuprof/collect/gpu_collect.h"

namespace gpuprof::collect {
namespace {

at::CallbackHandle g_handle = 0;
bool g_installed = false;

EventKind kind_of(at::RecordScope scope) {
  return scope == at::RecordScope::USER_SCOPE ? EventKind::UserRange : EventKind::HostOp;
}

// Input sizes for record_shapes, as the flat list host_enter_now takes: per input its number of
// dimensions, then the dimensions (the collector writes "[[64, 3, 32, 32], [64], []]" once per
// distinct list). Sizes only of plain dense tensors: asking a nested, symbolic
// (torch.compile(dynamic=True)) or Python-subclass (FakeTensor) tensor for sizes() can dispatch or
// assert, so those show [] as torch.profiler does; and a hook must never throw into the op it
// observes (catch-all: no shapes). Into a thread's reused vector: no allocation once it has grown.
void input_dims_unguarded(const at::RecordFunction& fn, std::vector<int64_t>& out) {
  out.clear();
  for (const c10::IValue& v : fn.inputs()) {
    const size_t count_at = out.size();
    out.push_back(0);
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    const c10::TensorImpl* impl = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
    if (impl == nullptr || impl->is_nested() || impl->has_symbolic_sizes_strides() || impl->is_python_dispatch())
      continue;
    const c10::IntArrayRef sizes = impl->sizes();
    out[count_at] = static_cast<int64_t>(sizes.size());
    for (const int64_t d : sizes) out.push_back(d);   // (vector::insert would be a call: slower here)
  }
}

bool input_dims(const at::RecordFunction& fn, std::vector<int64_t>& out) {
  try {
    input_dims_unguarded(fn, out);
    return true;
  } catch (...) {
    return false;
  }
}

// ---- collectives ----------------------------------------------------------------------------------
// "[0, 1, 2]", as Kineto writes a group's ranks.
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

// What a collective call records of itself. `record_param_comms` (torch's c10d, NCCL and others)
// pushes a ParamCommsDebugInfo on the thread's debug-info stack for the duration of the op: its
// name, sizes, dtype and process group, which Kineto writes as the op's args. A backend's own range
// (gloo:all_reduce, nccl:all_reduce) is started with its input tensors (even when no callback asks
// for inputs): their elements and type are all it says. Never throws into the op.
void record_collective_of(const at::RecordFunction& fn, const char* name, uint64_t id) {
  try {
    CollectiveInfo c;
    c.external_id = id;
    if (std::strcmp(name, "record_param_comms") == 0) {
      const auto* base = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PARAM_COMMS_INFO);
      if (base == nullptr) return;
      // Only torch's ParamCommsDebugInfo is ever pushed under this kind (RECORD_PARAM_COMMS).
      const auto* p = static_cast<const torch::ParamCommsDebugInfo*>(base);
      c.name = p->getCollectiveName();
      c.dtype = c10::toString(p->getDType());
      c.pg_name = p->getProcessGroupName();
      c.pg_desc = p->getProcessGroupDesc();
      c.group_size = p->getWorldSize();
      c.in_nelems = p->getInMessageNelems();
      c.out_nelems = p->getOutMessageNelems();
      std::vector<int64_t> ranks = p->getGroupRanks();
      if (ranks.empty() && p->getWorldSize() > 0)
        for (int i = 0; i < p->getWorldSize(); ++i)
          ranks.push_back(p->getGlobalRankStart() + int64_t(i) * p->getGlobalRankStride());
      c.group_ranks = ranks_text(ranks);
    } else {
      int64_t elements = 0;
      bool any = false;
      auto add = [&](const at::Tensor& t) {
        const c10::TensorImpl* impl = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
        if (impl == nullptr || impl->is_nested() || impl->has_symbolic_sizes_strides() ||
            impl->is_python_dispatch())
          return;
        elements += impl->numel();
        if (c.dtype.empty()) c.dtype = c10::toString(t.scalar_type());
        any = true;
      };
      for (const c10::IValue& v : fn.inputs()) {
        if (v.isTensor()) add(v.toTensor());
        else if (v.isTensorList())
          for (const at::Tensor& t : v.toTensorVector()) add(t);
      }
      if (!any) return;
      c.in_nelems = elements;
    }
    record_collective(std::move(c));
  } catch (...) {
  }
}

// record_param_comms, and the backends' own ranges (`gloo:`, `nccl:`, `mpi:`, `ucc:`, `xccl:`): the
// first letter rules out nearly every other op before any comparison.
inline bool may_be_collective(const char* name) {
  switch (name[0]) {
    case 'r': return std::strcmp(name, "record_param_comms") == 0;
    case 'g': return std::strncmp(name, "gloo:", 5) == 0;
    case 'n': return std::strncmp(name, "nccl:", 5) == 0;
    case 'm': return std::strncmp(name, "mpi:", 4) == 0;
    case 'u': return std::strncmp(name, "ucc:", 4) == 0;
    case 'x': return std::strncmp(name, "xccl:", 5) == 0;
    default: return false;
  }
}

void collective_entered(const at::RecordFunction& fn, const char* name, uint64_t id) {
  record_collective_of(fn, name, id);
  if (name[0] != 'r') mark_open_collective(&fn);   // a backend's range, not record_param_comms
}

// The hot path: one call into the collector per edge (it reads the clock itself), and the GPU
// external correlation only once GPU collection has ever been on in this process.
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  const char* name = fn.name();
  const uint64_t id = host_enter_now(&fn, name, kind_of(fn.scope()));
  if (__builtin_expect(id != 0 && may_be_collective(name), 0)) collective_entered(fn, name, id);
  if (__builtin_expect(gpu_correlation_used(), 0))
    gpu_external_push(id);   // GPU collection: CUDA work made inside the op carries its id
  return nullptr;
}

std::unique_ptr<at::ObserverContext> on_enter_with_shapes(const at::RecordFunction& fn) {
  // Initial-exec, as the collector's buffer pointer: no __tls_get_addr call per op (24 bytes of
  // glibc's spare static TLS).
#if defined(__GNUC__) && defined(__ELF__)
  __attribute__((tls_model("initial-exec")))
#endif
  thread_local std::vector<int64_t>
      dims;
  const bool ok = input_dims(fn, dims);
  static const int64_t kNoInputs = 0;   // an op without inputs: "[]" (data() may be null then)
  const int64_t* list = !ok ? nullptr : dims.empty() ? &kNoInputs : dims.data();
  const char* name = fn.name();
  const uint64_t id = host_enter_now(&fn, name, kind_of(fn.scope()), list, ok ? dims.size() : 0);
  if (__builtin_expect(id != 0 && may_be_collective(name), 0)) collective_entered(fn, name, id);
  if (__builtin_expect(gpu_correlation_used(), 0)) gpu_external_push(id);   // GPU collection
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (__builtin_expect(gpu_correlation_used(), 0))
    gpu_external_pop();   // GPU collection: pops only what this op's enter pushed
  host_exit_now(&fn);
}

// With the module view: the op's autograd link (event.h), read from the RecordFunction on exit. A
// backward op (one autograd's engine runs for a node) names the forward thread that made the node;
// a forward op its own thread, in the same numbering (RecordFunction's thread ids).
void on_exit_linked(const at::RecordFunction& fn, at::ObserverContext*) {
  if (__builtin_expect(gpu_correlation_used(), 0)) gpu_external_pop();   // GPU collection
  const uint64_t forward_thread = fn.forwardThreadId();
  const bool backward = forward_thread != 0;
  host_exit_now(&fn, pack_autograd_link(fn.seqNr(), backward ? forward_thread : fn.threadId(), backward));
}

// For bench/overhead_callgrind.py: callbacks that do nothing, to measure what LibTorch itself spends
// on running any callback (with and without boxing the inputs for it).
std::unique_ptr<at::ObserverContext> idle_enter(const at::RecordFunction&) { return nullptr; }
void idle_exit(const at::RecordFunction&, at::ObserverContext*) {}
at::CallbackHandle g_idle_handle = 0;

// FLOPs: the inputs of the matrix-class ops, without record_shapes
// A RecordFunction callback sees an op's inputs only if every op boxes them for it (needsInputs:
// about +1,850 instructions per mm, docs/performance.md "FLOPs"). The FLOPs of matrix products, convolutions and
// attention need their shapes, dtypes and a few scalars, so those ops alone get a kernel at the
// BackendSelect dispatch key while the hooks are installed: every call dispatches through that key
// (it is in the default thread-local set, autograd's threads included), and for an op with no
// kernel there the dispatcher skips it (a fallthrough key is masked per op), so no other op pays
// anything. The kernel reads its stack (the op's arguments, boxed for these ops only), hands what
// it read to the collector for the op's open range (the RecordFunction that fired when the op was
// called), and redispatches below BackendSelect. The registrations are made and removed at step
// boundaries, on the thread that steps the profiler (as the callbacks are).

const c10::DispatchKeySet kBelowBackendSelect(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);

// A call's inputs as a list of integers, per argument: a tensor [1, ndim, sizes..., dtype], a bool
// [2, v], an int [3, v], a double [4, its bits], an int list [5, n, values...], a bool list
// [6, n, values...], anything else [0]. The collector keeps what it recorded per list, so the texts
// below are written once per distinct call, not once per call.
enum : int64_t { kOther = 0, kTensor, kBool, kInt, kDouble, kIntList, kBoolList };

void append_list(const int64_t* v, int64_t n, bool as_bool, std::string& out) {
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (as_bool) out += v[i] ? "True" : "False";
    else out += std::to_string(v[i]);
  }
  out += ']';
}

// The texts of a key (collector.h: OpInputsFormatter): sizes as host_enter_now takes them, and
// the types and scalar inputs as Kineto's "Input type" and "Concrete Inputs" write them.
void format_op_inputs(const int64_t* k, size_t n, OpInputTexts* out) {
  out->types = "[";
  out->concrete = "[";
  size_t i = 0;
  bool first = true;
  while (i < n) {
    if (!first) {
      out->types += ", ";
      out->concrete += ", ";
    }
    first = false;
    out->types += '\'';
    out->concrete += '\'';
    const int64_t tag = k[i++];
    if (tag == kTensor && i < n) {
      const int64_t ndim = k[i++];
      out->dims.push_back(ndim);
      for (int64_t d = 0; d < ndim && i < n; ++d) out->dims.push_back(k[i++]);
      if (i < n) {
        const auto name = c10::scalarTypeToTypeMeta(static_cast<c10::ScalarType>(k[i++])).name();
        out->types.append(name.data(), name.size());
      }
    } else {
      out->dims.push_back(0);
      if ((tag == kBool || tag == kInt || tag == kDouble) && i < n) {
        out->types += "Scalar";
        const int64_t v = k[i++];
        if (tag == kBool) {
          out->concrete += v ? "True" : "False";
        } else if (tag == kInt) {
          out->concrete += std::to_string(v);
        } else {
          double d;
          std::memcpy(&d, &v, sizeof d);
          out->concrete += std::to_string(d);
        }
      } else if ((tag == kIntList || tag == kBoolList) && i < n) {
        out->types += "ScalarList";
        const int64_t len = std::min<int64_t>(k[i++], static_cast<int64_t>(n - i));
        append_list(k + i, len, tag == kBoolList, out->concrete);
        i += static_cast<size_t>(len);
      }
    }
    out->types += '\'';
    out->concrete += '\'';
  }
  out->types += ']';
  out->concrete += ']';
}

// The op's arguments, the last entries of its stack, as a key (above).
void record_op_inputs(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
#if defined(__GNUC__) && defined(__ELF__)
  __attribute__((tls_model("initial-exec")))
#endif
  thread_local std::vector<int64_t>
      key;
  key.clear();
  const size_t n = op.schema().arguments().size();
  if (n > stack.size()) return;
  bool grad = false;
  const bool grad_mode = at::GradMode::is_enabled();
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      const c10::TensorImpl* impl = t.defined() ? t.unsafeGetTensorImpl() : nullptr;
      if (impl == nullptr || impl->is_nested() || impl->has_symbolic_sizes_strides() ||
          impl->is_python_dispatch()) {
        key.push_back(kOther);
        continue;
      }
      const c10::IntArrayRef sizes = impl->sizes();
      key.push_back(kTensor);
      key.push_back(static_cast<int64_t>(sizes.size()));
      for (const int64_t d : sizes) key.push_back(d);
      key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(impl->dtype())));
      grad = grad || (grad_mode && t.requires_grad());
    } else if (v.isBool()) {
      key.push_back(kBool);
      key.push_back(v.toBool());
    } else if (v.isInt()) {
      key.push_back(kInt);
      key.push_back(v.toInt());
    } else if (v.isDouble()) {
      const double d = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      key.push_back(kDouble);
      key.push_back(bits);
    } else if (v.isIntList()) {
      key.push_back(kIntList);
      const auto list = v.toIntList();
      key.push_back(static_cast<int64_t>(list.size()));
      for (const int64_t x : list) key.push_back(x);
    } else if (v.isBoolList()) {
      key.push_back(kBoolList);
      const auto list = v.toBoolList();
      key.push_back(static_cast<int64_t>(list.size()));
      for (const bool x : list) key.push_back(x ? 1 : 0);
    } else {
      key.push_back(kOther);
    }
  }
  host_op_inputs(op.schema().name().c_str(), key.data(), key.size(), &format_op_inputs, grad);
}

void capture_inputs(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  try {
    record_op_inputs(op, *stack);
  } catch (...) {
    // A hook never throws into the op it observes: this call's FLOPs are not counted.
  }
  op.redispatchBoxed(ks & kBelowBackendSelect, stack);
}

std::unique_ptr<torch::Library> g_capture;

void install_capture(const std::vector<std::string>& ops) {
  if (g_capture || ops.empty()) return;
  try {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect,
                                                __FILE__, __LINE__);
    std::unordered_set<std::string> matmul;
    for (const std::string& op : ops) matmul.insert("aten::" + op);
    // Every overload of those ops: torch.compile's graphs call the out= variants (aten::mm.out),
    // which RecordFunction names as the op itself.
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      if (!matmul.count(name.name)) continue;
      const auto op = c10::Dispatcher::singleton().findOp(name);
      // One that has a BackendSelect kernel of its own keeps it.
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::BackendSelect)) continue;
      const std::string overload =
          name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
      lib->impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunction<&capture_inputs>());
    }
    g_capture = std::move(lib);
  } catch (const std::exception&) {
    // The dispatcher refused (an op's schema changed): FLOPs of matrix ops need record_shapes then.
  }
}

}  // namespace

void install_hooks(bool record_shapes, bool autograd_links, const std::vector<std::string>& capture_ops) {
  if (g_installed) return;
  at::RecordFunctionCallback cb(record_shapes ? &on_enter_with_shapes : &on_enter,
                                autograd_links ? &on_exit_linked : &on_exit);
  cb.needsInputs(record_shapes)
      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
  g_handle = at::addGlobalCallback(std::move(cb));
  install_capture(capture_ops);   // FLOPs
  g_installed = true;
}

void remove_hooks() {
  if (!g_installed) return;
  at::removeCallback(g_handle);
  g_capture.reset();   // FLOPs: the BackendSelect kernels are deregistered with their Library
  g_installed = false;
}

bool flop_capture_installed() { return g_capture != nullptr; }

bool hooks_installed() { return g_installed; }

void install_idle_hooks(bool needs_inputs) {
  if (g_idle_handle != 0) return;
  at::RecordFunctionCallback cb(&idle_enter, &idle_exit);
  cb.needsInputs(needs_inputs)
      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
  g_idle_handle = at::addGlobalCallback(std::move(cb));
}

void remove_idle_hooks() {
  if (g_idle_handle == 0) return;
  at::removeCallback(g_idle_handle);
  g_idle_handle = 0;
}

// ---- device allocator levels -------------------------------------------------------------------
namespace {

// torch's allocators report every malloc and free, with the block's address, to the memory reporter
// on the allocating (freeing) thread's debug-info stack (c10::reportMemoryUsageToProfiler). The
// slot is the one torch.profiler's own state occupies, and torch's code reads whatever sits there
// as profiler state: so ours is a profiler state too, configured "disabled" (torch.profiler stays
// off in everyone's eyes, and can start on top of it).
//
// The CUDA caching allocator reports regardless, with its totals. The CPU allocator reports only
// while memoryProfilingEnabled() is true, and then also keeps a table of its live blocks under a
// mutex (what torch.profiler(profile_memory=True) costs too; bench/memory_overhead.py measures it);
// its "total allocated" counts only blocks allocated while some thread listened and drifts when one
// is freed unheard, so the host's level is rebuilt from the blocks instead (-1 here: not known).
// A host block allocated before the reporter and freed under it makes torch log, once per 1,000
// such frees, "Memory block of unknown size was allocated before the profiling started", as under
// torch.profiler(profile_memory=True).
class AllocatorReporter final : public torch::profiler::impl::ProfilerStateBase {
 public:
  explicit AllocatorReporter(bool host)
      : ProfilerStateBase(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::Disabled)),
        host_(host) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                         c10::Device device) override {
    if (!enabled.load(std::memory_order_relaxed)) return;
    const uint64_t addr = reinterpret_cast<uintptr_t>(ptr);
    if (device.is_cpu()) {
      if (host_) record_memory(ticks(), alloc_size, -1, -1, -1, addr);
      return;
    }
    record_memory(ticks(), alloc_size, static_cast<int64_t>(total_allocated), static_cast<int64_t>(total_reserved),
                  device.index(), addr);
  }
  bool memoryProfilingEnabled() const override { return host_ && enabled.load(std::memory_order_relaxed); }
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }

  std::atomic<bool> enabled{true};

 private:
  const bool host_;
};

// The profiler state torch's allocator would report to from this thread: the global one (torch's
// on-demand profiler) first, then this thread's. torch 2.11 to 2.13 spell this
// ProfilerStateBase::get(); 2.14 has getGlobal() and getTLS() instead. Picked by overload
// resolution, so each torch release compiles the spelling it has.
template <class State>
auto current_profiler_state(int) -> decltype(State::getTLS()) {
  auto global = State::getGlobal();
  return global ? global.get() : State::getTLS();
}
template <class State>
auto current_profiler_state(long) -> decltype(State::get()) {
  return State::get();
}

std::shared_ptr<AllocatorReporter> g_reporter;
std::thread::id g_reporter_thread;

}  // namespace

std::string install_memory_reporter(bool host) {
  if (g_reporter) return {};
  try {
    auto* top = current_profiler_state<torch::profiler::impl::ProfilerStateBase>(0);
    if (top != nullptr && dynamic_cast<AllocatorReporter*>(top) == nullptr)
      return "torch.profiler is active on this thread and receives the allocator's reports, so "
             "profile_memory=True cannot record every allocation; device memory is read at step "
             "boundaries instead. Run gpuprof outside the torch.profiler block for exact peaks";
    auto reporter = std::make_shared<AllocatorReporter>(host);
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
    g_reporter = std::move(reporter);
    g_reporter_thread = std::this_thread::get_id();
    return {};
  } catch (const std::exception& e) {
    return std::string("profile_memory=True could not install its allocator reporter (") + e.what() +
           "); device memory is read at step boundaries instead";
  }
}

bool remove_memory_reporter() {
  if (!g_reporter) return true;
  std::shared_ptr<AllocatorReporter> reporter = std::move(g_reporter);
  g_reporter.reset();
  reporter->enabled.store(false, std::memory_order_relaxed);
  // Pop it only where it is on top of this thread's stack: anything pushed after it (a
  // torch.profiler started inside the session and still running) must stay where it is. Otherwise
  // it stays behind, switched off, where it costs nothing.
  if (std::this_thread::get_id() != g_reporter_thread) return false;
  try {
    if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() != reporter.get()) return false;
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool memory_reporter_installed() { return g_reporter != nullptr; }

void report_memory_usage(int64_t alloc_size, int64_t total_allocated, int64_t total_reserved,
                         const std::string& device, uint64_t addr) {
  c10::reportMemoryUsageToProfiler(reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), alloc_size,
                                   static_cast<size_t>(total_allocated), static_cast<size_t>(total_reserved),
                                   c10::Device(device));
}

bool memory_profiling_enabled() { return c10::memoryProfilingEnabled(); }

bool aten_has_global_callbacks() { return at::hasGlobalCallbacks(); }

}  // namespace gpuprof::collect
