"""The tensors the process's models and optimizers hold: parameters, their gradients, optimizer state.

Found without the user naming a model or an optimizer, at no cost to the training steps: the
optimizers by torch's global optimizer step post-hook, which notes each optimizer that steps; the
modules once a session, when its first span ends (or the run fails), among the objects Python's
garbage collector tracks. The parameters are those of the modules that hold a parameter an optimizer
trains (their frozen parameters too: a LoRA model's base weights) and the optimizers' own; where no
optimizer stepped (an inference span), those of every module found. Modules and optimizers are kept
as weak references, so a model deleted by the program is not kept alive. Their storages (address,
size, device) go into the trace with the time they were seen, and the memory analysis gives an
allocation at that address then the storage's role (docs/metrics.md, "Memory composition").

Parameters and optimizer state are recorded when a span ends (their storages seldom move: optimizers
update them in place); gradients also at every optimizer step of a span that records every allocation
(``zero_grad()`` frees them and the next backward allocates new ones), from the params of the
optimizer that steps: one storage read per parameter (bench/memory_overhead.py's figures, in
docs/performance.md).
"""

from __future__ import annotations

import gc
import logging
import sys
import weakref
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
        s = t.untyped_storage()
        addr, nbytes, device = int(s.data_ptr()), int(s.nbytes()), int(t.get_device())
    except Exception:  # what a tensor subclass raises is its own affair: not a known storage
        return None
    if addr == 0 or nbytes <= 0:
        return None
    if device >= 0 and t.is_cuda:
        nbytes = -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return addr, nbytes, device


def _alive(refs: dict) -> list:
    out = []
    for key, ref in list(refs.items()):
        obj = ref()
        if obj is None:
            del refs[key]
        else:
            out.append(obj)
    return out


class KnownTensors:
    def __init__(self) -> None:
        self._modules: Optional[dict[int, weakref.ref]] = None  # found once, at the first need
        self._optimizers: dict[int, weakref.ref] = {}
        self._hook = None
        self._recorded: set = set()  # (addr, bytes, device, role) of parameters/state this span
        self.every_step = False  # gradients at every optimizer step (profile_memory=True)

    # ---- finding the models and optimizers ---------------------------------------------------
    def install(self, *, every_step: bool) -> None:
        """At the start of a span: note the optimizers that step (and, with ``every_step``, their
        gradients at each step)."""
        self.every_step = every_step
        self._recorded = set()
        if sys.modules.get("torch") is None or self._hook is not None:
            return
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # a torch without the global hook: nothing is known, nothing breaks
            return
        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        try:
            key = id(optimizer)
            if key not in self._optimizers:
                self._optimizers[key] = weakref.ref(optimizer)
            if self.every_step:
                rows = []
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        g = p.grad
                        s = storage_of(g) if g is not None else None
                        if s is not None:
                            rows.append((*s, GRADIENT))
                if rows:
                    _core.collector_record_storages(_core.collector_ticks(), rows)
        except Exception as e:  # the training step comes first
            log.debug("gpuprof: could not read the optimizer's gradients: %s", e)

    def _find_modules(self) -> list:
        if self._modules is None:
            self._modules = {}
            torch = sys.modules.get("torch")
            module = getattr(getattr(torch, "nn", None), "Module", None)
            if module is not None:
                # By the object's type, not isinstance(): that asks some objects for __class__,
                # which lazy module proxies answer with an import (and deprecation warnings).
                for obj in gc.get_objects():
                    if issubclass(type(obj), module):
                        self._modules[id(obj)] = weakref.ref(obj)
        return _alive(self._modules)

    # ---- their tensors ------------------------------------------------------------------------
    def parameters(self) -> list:
        """The optimizers' parameters and every parameter of the modules that hold one of them (of
        every module found, where no optimizer stepped), once each."""
        seen: dict[int, object] = {}
        for opt in _alive(self._optimizers):
            for group in opt.param_groups:
                for p in group["params"]:
                    seen.setdefault(id(p), p)
        trained = set(seen)
        for m in self._find_modules():
            if trained and not any(id(p) in trained for p in m.parameters()):
                continue  # a module no optimizer trains: not (a part of) the model that ran
            for p in m.parameters():  # its frozen submodules' too
                seen.setdefault(id(p), p)
        return list(seen.values())

    def optimizer_state(self) -> list:
        out = []
        for opt in _alive(self._optimizers):
            for state in opt.state.values():
                if isinstance(state, dict):
                    out += [v for v in state.values() if hasattr(v, "untyped_storage")]
        return out

    def storages(self) -> list[tuple[int, int, int, int]]:
        """(address, bytes, device, role) of each distinct storage, the first role winning (a
        parameter that is also in an optimizer's state stays a parameter)."""
        out: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        params = self.parameters()
        groups = (
            (params, PARAMETER),
            ([p.grad for p in params if p.grad is not None], GRADIENT),
            (self.optimizer_state(), OPTIMIZER_STATE),
        )
        for tensors, role in groups:
            for t in tensors:
                s = storage_of(t)
                if s is not None and (s[0], s[2]) not in out:
                    out[(s[0], s[2])] = (*s, role)
        return list(out.values())

    def record(self) -> None:
        """Put the storages into the collector's current span, stamped now. Parameters and state
        already recorded in this span are left out."""
        rows = [r for r in self.storages() if r[3] == GRADIENT or r not in self._recorded]
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
