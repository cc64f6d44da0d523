"""Steps for code that never calls ``prof.step()``: one step per optimizer step.

Used by ``gpuprof run`` (an unmodified training script) and the ``%%gpuprof`` cell magic. torch
calls global optimizer post hooks at the end of every ``Optimizer.step()``; the first optimizer that
steps paces the steps (a GAN's second optimizer or a scheduler's extra one adds none). If the code
calls ``prof.step()`` itself, it keeps control and the hook stands down.

Whole steps: the post hook runs inside torch's ``Optimizer.step#<Class>.step`` range, and Lightning
runs forward and backward inside ``optimizer.step(closure)``, so a boundary taken in the hook would
cut the range and leave its tail in the next step. The hook only marks the step as done; the
boundary is taken when the optimizer's ``step`` returns (a wrapper put around the optimizer class's
``step`` when the pacing optimizer is first seen, removed at the end). The first optimizer step
runs before that wrapper exists: its boundary is taken in the hook.
"""

from __future__ import annotations

import functools
from typing import Optional

_ACTIVE: Optional[OptimizerSteps] = None


def _returning(step_fn):
    """``Optimizer.step`` that takes a pending step boundary once it (and torch's range) returns."""

    @functools.wraps(step_fn)
    def step(self, *args, **kwargs):
        active = _ACTIVE
        if active is None:
            return step_fn(self, *args, **kwargs)
        active._depth += 1
        try:
            return step_fn(self, *args, **kwargs)
        finally:
            active._depth -= 1
            if active._depth == 0:
                active._take_pending()

    step._gpuprof_wrapped = step_fn  # type: ignore[attr-defined]
    step.hooked = getattr(step_fn, "hooked", True)  # torch: already wrapped in its profile range
    return step


class OptimizerSteps:
    def __init__(self, prof) -> None:
        self.prof = prof
        self.optimizer_steps = 0  # steps of the pacing optimizer seen so far
        self.user_steps = False  # the code called prof.step() itself
        self._pacer: Optional[int] = None
        self._handle = None
        self._in_hook = False
        self._user_step = prof.step
        self._depth = 0  # wrapped Optimizer.step calls in progress
        self._pending = False  # a step ended in the hook, its boundary not taken yet
        self._wrapped: list[type] = []

    def install(self) -> OptimizerSteps:
        global _ACTIVE
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._after_step)
        _ACTIVE = self
        prof, outer = self.prof, self

        def step() -> None:
            if not outer._in_hook and not outer.user_steps:
                outer.user_steps = True  # the code paces its own steps from now on
                outer._pending = False
                outer._remove_hook()
            outer._user_step()

        prof.step = step
        return self

    def _wrap(self, cls: type) -> None:
        step_fn = cls.__dict__.get("step")
        if step_fn is None or getattr(step_fn, "_gpuprof_wrapped", None) is not None:
            return
        cls.step = _returning(step_fn)
        self._wrapped.append(cls)

    def _after_step(self, optimizer, args, kwargs) -> None:
        if self._pacer is None:
            self._pacer = id(optimizer)
            self._wrap(type(optimizer))
        if id(optimizer) != self._pacer or self.user_steps:
            return
        self.optimizer_steps += 1
        if self._depth > 0:
            self._pending = True  # taken when the wrapped step returns
        else:
            self._take()

    def _take_pending(self) -> None:
        if self._pending and not self.user_steps:
            self._pending = False
            self._take()

    def _take(self) -> None:
        self._in_hook = True
        try:
            self.prof.step()
        finally:
            self._in_hook = False

    def _remove_hook(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def remove(self) -> None:
        global _ACTIVE
        self._take_pending()
        self._remove_hook()
        for cls in self._wrapped:
            wrapped = cls.__dict__.get("step")
            original = getattr(wrapped, "_gpuprof_wrapped", None)
            if original is not None:
                cls.step = original
        self._wrapped.clear()
        if _ACTIVE is self:
            _ACTIVE = None
        if self.prof.__dict__.get("step") is not None:
            del self.prof.step  # back to the class's method

    def __enter__(self) -> OptimizerSteps:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()
