"""The tensors a span's models and optimizers hold: parameters, their gradients, optimizer state.

Found without the user naming a model or an optimizer: a global module forward pre-hook notes each
module called during a span's first step (then it is removed: global module hooks put every module
call on torch's slow path), and the global optimizer step post-hook notes each optimizer that steps.
Both are kept as weak references for the session, so a model deleted by the program is not kept
alive. Their storages (address, size, device) go into the trace with the time they were seen, and
the memory analysis gives an allocation at that address then the storage's role
(docs/metrics.md, "Memory composition").

Parameters and optimizer state are recorded once a span (their storages seldom move: optimizers
update them in place), gradients at every optimizer step (``zero_grad()`` frees them and the next
backward allocates new ones), and all three when a span ends or the run fails.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Iterator
from typing import Optional

from .._native import _core

log = logging.getLogger("gpuprof")

PARAMETER, GRADIENT, OPTIMIZER_STATE = 0, 1, 2
ROLE_KEYS = ("parameters", "gradients", "optimizer_state")

# torch's CUDA caching allocator hands out blocks in multiples of 512 bytes: a storage allocated
# before the recording counts that much of the allocator's level.
CUDA_BLOCK_BYTES = 512


def storage_of(t) -> Optional[tuple[int, int, int]]:
    """(address, bytes, device: -1 for the host) of the storage under tensor ``t``, or None where it
    has none to read (a meta, fake or sparse tensor, a tensor subclass without storage)."""
    try:
        if t is None or t.is_meta or t.is_sparse:
            return None
        s = t.untyped_storage()
        addr, nbytes = int(s.data_ptr()), int(s.nbytes())
        device = t.device
    except Exception:  # what a tensor subclass raises is its own affair: not a known storage
        return None
    if addr == 0 or nbytes <= 0:
        return None
    if device.type == "cpu":
        return addr, nbytes, -1
    if device.type == "cuda":
        nbytes = -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return addr, nbytes, int(device.index or 0)


class KnownTensors:
    def __init__(self) -> None:
        self._modules: dict[int, weakref.ref] = {}
        self._optimizers: dict[int, weakref.ref] = {}
        self._module_hook = None
        self._optimizer_hook = None
        self._recorded: set = set()  # (addr, bytes, device, role) of parameters/state this span
        self.every_step = False  # gradients at every optimizer step (profile_memory=True)

    # ---- finding the models and optimizers ---------------------------------------------------
    def install(self, *, every_step: bool) -> None:
        """At the start of a span: watch module calls for one step, optimizer steps for the span."""
        self.every_step = every_step
        self._recorded = set()
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            from torch.nn.modules.module import register_module_forward_pre_hook
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # a torch without global hooks: nothing is known, nothing breaks
            return
        if self._module_hook is None:
            self._module_hook = register_module_forward_pre_hook(self._on_module)
        if self._optimizer_hook is None:
            self._optimizer_hook = register_optimizer_step_post_hook(self._on_optimizer_step)

    def step_ended(self) -> None:
        """A step of the span ended: the modules it called are known; stop watching calls."""
        if self._module_hook is not None:
            self._module_hook.remove()
            self._module_hook = None

    def remove(self) -> None:
        self.step_ended()
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
            self._optimizer_hook = None

    def _on_module(self, module, args) -> None:
        key = id(module)
        if key not in self._modules:
            self._modules[key] = weakref.ref(module)

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        try:
            key = id(optimizer)
            if key not in self._optimizers:
                self._optimizers[key] = weakref.ref(optimizer)
            if self.every_step:
                self.record(gradients_only=bool(self._recorded))
        except Exception as e:  # the training step comes first
            log.debug("gpuprof: could not read the optimizer's tensors: %s", e)

    # ---- their tensors ------------------------------------------------------------------------
    def _alive(self, refs: dict) -> list:
        out = []
        for key, ref in list(refs.items()):
            obj = ref()
            if obj is None:
                del refs[key]
            else:
                out.append(obj)
        return out

    def parameters(self) -> list:
        """Every parameter of the modules called and the optimizers stepped, once each."""
        seen: dict[int, object] = {}
        for module in self._alive(self._modules):
            for p in module._parameters.values():
                if p is not None:
                    seen.setdefault(id(p), p)
        for opt in self._alive(self._optimizers):
            for group in opt.param_groups:
                for p in group["params"]:
                    seen.setdefault(id(p), p)
        return list(seen.values())

    def optimizer_state(self) -> Iterator:
        for opt in self._alive(self._optimizers):
            for state in opt.state.values():
                if isinstance(state, dict):
                    for v in state.values():
                        if hasattr(v, "untyped_storage"):
                            yield v

    def storages(self, gradients_only: bool = False) -> list[tuple[int, int, int, int]]:
        """(address, bytes, device, role) of each distinct storage, the first role winning (a
        parameter that is also in an optimizer's state stays a parameter)."""
        out: dict[tuple[int, int], tuple[int, int, int, int]] = {}

        def add(t, role) -> None:
            s = storage_of(t)
            if s is not None and (s[0], s[2]) not in out:
                out[(s[0], s[2])] = (s[0], s[1], s[2], role)

        params = self.parameters()
        if not gradients_only:
            for p in params:
                add(p, PARAMETER)
        for p in params:
            add(p.grad, GRADIENT)
        if not gradients_only:
            for t in self.optimizer_state():
                add(t, OPTIMIZER_STATE)
        return list(out.values())

    def record(self, gradients_only: bool = False) -> None:
        """Put the storages into the collector's current span, stamped now. Parameters and state
        already recorded in this span are left out."""
        rows = [r for r in self.storages(gradients_only) if r[3] == GRADIENT or r not in self._recorded]
        self._recorded.update(r for r in rows if r[3] != GRADIENT)
        if rows:
            _core.collector_record_storages(_core.collector_ticks(), rows)

    def bytes_by_device(self) -> dict[int, dict[str, int]]:
        """What the known storages hold now, per device: {device: {parameters, gradients,
        optimizer_state}} in bytes."""
        out: dict[int, dict[str, int]] = {}
        for _addr, nbytes, device, role in self.storages():
            d = out.setdefault(device, {k: 0 for k in ROLE_KEYS})
            d[ROLE_KEYS[role]] += nbytes
        return out
