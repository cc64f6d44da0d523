// The only code that includes ATen: RecordFunction callbacks that feed the collector.
#include "torch_hooks.h"

#include <ATen/record_function.h>

#include <string>

#include "gpuprof/collector.h"
#include "gpuprof/gpu_collect.h"

namespace gpuprof::collect {
namespace {

at::CallbackHandle g_handle = 0;
bool g_installed = false;

EventKind kind_of(at::RecordScope scope) {
  return scope == at::RecordScope::USER_SCOPE ? EventKind::UserRange : EventKind::HostOp;
}

// "[[64, 3, 32, 32], [64], []]": one list per input, empty for non-tensors.
void format_shapes(const at::RecordFunction& fn, std::string& out) {
  out.clear();
  out.push_back('[');
  bool first = true;
  for (const c10::IValue& v : fn.inputs()) {
    if (!first) out.append(", ");
    first = false;
    out.push_back('[');
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined()) {
        bool first_dim = true;
        for (int64_t d : t.sizes()) {
          if (!first_dim) out.append(", ");
          first_dim = false;
          out.append(std::to_string(d));
        }
      }
    }
    out.push_back(']');
  }
  out.push_back(']');
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  const uint64_t id = host_enter(&fn, fn.name(), kind_of(fn.scope()), ticks());
  gpu_external_push(id);   // GPU collection: CUDA work made inside the op carries its id
  return nullptr;
}

std::unique_ptr<at::ObserverContext> on_enter_with_shapes(const at::RecordFunction& fn) {
  thread_local std::string shapes;
  format_shapes(fn, shapes);
  const uint64_t id = host_enter(&fn, fn.name(), kind_of(fn.scope()), ticks(), shapes);
  gpu_external_push(id);   // GPU collection
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  gpu_external_pop();   // GPU collection: pops only what this op's enter pushed
  host_exit(&fn, ticks());
}

}  // namespace

void install_hooks(bool record_shapes) {
  if (g_installed) return;
  at::RecordFunctionCallback cb(record_shapes ? &on_enter_with_shapes : &on_enter, &on_exit);
  cb.needsInputs(record_shapes)
      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
               at::RecordScope::USER_SCOPE});
  g_handle = at::addGlobalCallback(std::move(cb));
  g_installed = true;
}

void remove_hooks() {
  if (!g_installed) return;
  at::removeCallback(g_handle);
  g_installed = false;
}

bool hooks_installed() { return g_installed; }

bool aten_has_global_callbacks() { return at::hasGlobalCallbacks(); }

}  // namespace gpuprof::collect
