"""Steps for code that never calls ``prof.step()``: one step per optimizer step.

Used by ``gpuprof run`` (an unmodified training script) and the ``%%gpuprof`` cell magic. torch
calls global optimizer post hooks at the end of every ``Optimizer.step()``; the first optimizer that
steps paces the steps (a GAN's second optimizer or a scheduler's extra one adds none). If the code
calls ``prof.step()`` itself, it keeps control and the hook stands down.
"""

from __future__ import annotations

from typing import Optional


class OptimizerSteps:
    def __init__(self, prof) -> None:
        self.prof = prof
        self.optimizer_steps = 0      # steps of the pacing optimizer seen so far
        self.user_steps = False       # the code called prof.step() itself
        self._pacer: Optional[int] = None
        self._handle = None
        self._in_hook = False
        self._user_step = prof.step

    def install(self) -> "OptimizerSteps":
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._after_step)
        prof, outer = self.prof, self

        def step() -> None:
            if not outer._in_hook and not outer.user_steps:
                outer.user_steps = True   # the code paces its own steps from now on
                outer._remove_hook()
            outer._user_step()

        prof.step = step
        return self

    def _after_step(self, optimizer, args, kwargs) -> None:
        if self._pacer is None:
            self._pacer = id(optimizer)
        if id(optimizer) != self._pacer or self.user_steps:
            return
        self.optimizer_steps += 1
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
        self._remove_hook()
        if self.prof.__dict__.get("step") is not None:
            del self.prof.step   # back to the class's method

    def __enter__(self) -> "OptimizerSteps":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()
