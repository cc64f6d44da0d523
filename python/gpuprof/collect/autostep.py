"""Steps for code that never calls ``prof.step()``: one step per optimizer step, or, for ``gpuprof
run`` (``StepFinder``), the end of each backward pass in a loop that never calls ``torch.optim``,
or a marker the user names (``--step-marker``).

``OptimizerSteps`` is used by ``gpuprof run`` and the ``%%gpuprof`` cell magic. torch
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
import sys
import threading
import weakref
from typing import Callable, Optional

_ACTIVE: Optional[OptimizerSteps] = None
_NO_DICT: dict = {}


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
            if active._depth == 0 and active._pending:
                active._take_pending()

    step._gpuprof_wrapped = step_fn  # type: ignore[attr-defined]
    step.hooked = getattr(step_fn, "hooked", True)  # torch: already wrapped in its profile range
    return step


def _returning_bound(step_fn):
    """The same for a ``step`` set on the optimizer object itself (an LR scheduler's wrapper, which
    calls the class's step as it was when the scheduler was made, so the class's wrapper above is
    never reached): without it every boundary would be taken inside torch's optimizer post hook."""
    unbound = _returning(lambda _self, *args, **kwargs: step_fn(*args, **kwargs))

    @functools.wraps(step_fn)  # keeps the scheduler's _wrapped_by_lr_sched mark
    def step(*args, **kwargs):
        return unbound(None, *args, **kwargs)

    step._gpuprof_wrapped = step_fn  # type: ignore[attr-defined]
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
        self._wrapped_objects: list[tuple] = []  # (weakref to the optimizer, its own step before)

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

    def _wrap_object(self, optimizer) -> None:
        own = optimizer.__dict__.get("step")
        if own is None or getattr(own, "_gpuprof_wrapped", None) is not None:
            return
        try:
            optimizer.step = _returning_bound(own)
            self._wrapped_objects.append((weakref.ref(optimizer), own))
        except (AttributeError, TypeError):  # an optimizer that refuses attributes: boundaries in the hook
            pass

    def _after_step(self, optimizer, args, kwargs) -> None:
        pacer = self._pacer
        if pacer is None:
            pacer = self._pacer = id(optimizer)
            self._wrap(type(optimizer))
        if id(optimizer) != pacer:
            return
        own = getattr(optimizer, "__dict__", _NO_DICT).get("step")
        if own is not None and getattr(own, "_gpuprof_wrapped", None) is None:
            self._wrap_object(optimizer)  # a scheduler made after the first step wraps it again
        if self.user_steps:
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
        # The step method the session had before install(): what prof.step() calls from inside
        # the hook (the wrappers install() puts on prof.step only watch for the script's calls).
        self._in_hook = True
        try:
            self._user_step()
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
        for ref, own in self._wrapped_objects:
            optimizer = ref()
            if (
                optimizer is not None
                and getattr(optimizer.__dict__.get("step"), "_gpuprof_wrapped", None) is own
            ):
                optimizer.step = own
        self._wrapped_objects.clear()
        if _ACTIVE is self:
            _ACTIVE = None
        if self.prof.__dict__.get("step") is not None:
            del self.prof.step  # back to the class's method

    def __enter__(self) -> OptimizerSteps:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.remove()


# ---- StepFinder: gpuprof run's steps, with or without torch.optim -----------------------------------
#
# The boundary a step ends at, in order of preference:
#   prof.step the script's own calls (OptimizerSteps and the marker stand down).
#   marker    --step-marker NAME: the end of each range NAME (torch.profiler.record_function,
#             gpuprof.range) or each return from a function NAME; nothing else then.
#   optimizer each step of the first torch.optim optimizer that steps (OptimizerSteps).
#   backward  where each outermost backward pass returns (torch.autograd.backward: loss.backward()),
#             when no torch.optim optimizer exists when the first one ends: a loop that updates its
#             weights by hand (word_language_model's `p.data.add_(p.grad, alpha=-lr)`). The step
#             then runs from one backward's end to the next: the update, the forward, the backward.
# A step is announced in one line when the boundary is chosen; when none is found within
# `hint_after_s` seconds, one line says how to mark steps.

MARKER_HELP = (
    "--step-marker NAME, where NAME is a function your loop calls once per step (e.g. train_step) "
    "or a torch.profiler.record_function(NAME) / gpuprof.range(NAME) range around the step"
)


class StepFinder(OptimizerSteps):
    """``OptimizerSteps`` with the boundaries above, for ``gpuprof run``. ``announce`` receives the
    one-line messages (what ends the steps; how to mark them when nothing is found)."""

    def __init__(
        self,
        prof,
        *,
        marker: Optional[str] = None,
        announce: Callable[[str], None] = print,
        hint_after_s: float = 0.0,
        backward_steps: bool = True,
    ) -> None:
        super().__init__(prof)
        self.marker = marker
        # False where the optimizers may predate the finder (gpuprof.watch() in code): no count of
        # optimizers made can then tell a loop without torch.optim.
        self._backward_steps = backward_steps
        self.source: Optional[str] = None  # "marker", "prof.step", "optimizer", "backward"
        self._announce = announce
        self._hint_after_s = hint_after_s
        self._thread = threading.get_ident()  # the training thread: boundaries are taken only there
        self._backward_depth = 0
        self._backward: Optional[tuple] = None  # (the finder's torch.autograd.backward, torch's)
        self._optimizers_made = 0
        self._restore: list[Callable[[], None]] = []
        self._timer: Optional[threading.Timer] = None
        self._marker_code = None  # the function NAME's code, once seen
        self._profiling = False

    # ---- install / remove -----------------------------------------------------------------------
    def install(self) -> StepFinder:
        if self.marker is None:
            super().install()
            counted = self.prof.step  # OptimizerSteps' own: it stands down at the script's first call

            def step() -> None:
                if not self._in_hook and not self.user_steps:
                    self._decide("prof.step", "the script calls prof.step() itself: its calls end the steps")
                counted()

            self.prof.step = step
            self._watch_backward()
        else:
            self._install_user_step()
            self._watch_marker()
        if self._hint_after_s > 0:
            self._timer = threading.Timer(self._hint_after_s, self._hint)
            self._timer.daemon = True
            self._timer.start()
        return self

    def remove(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._profiling:
            sys.setprofile(None)
            self._profiling = False
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()
        if self.marker is None:
            super().remove()
        elif self.prof.__dict__.get("step") is not None:
            del self.prof.step

    def _install_user_step(self) -> None:
        prof, outer = self.prof, self

        def step() -> None:
            if not outer._in_hook and not outer.user_steps:
                outer.user_steps = True
                outer._decide("prof.step", "the script calls prof.step() itself: its calls end the steps")
            outer._user_step()

        prof.step = step

    # ---- the choice of boundary -----------------------------------------------------------------
    def _decide(self, source: str, words: str) -> None:
        if self.source is None:
            self.source = source
            if source != "backward":
                self._unwatch_backward()  # its wrapper would only cost each backward pass a call
            self._announce(f"gpuprof run: {words}")

    def _after_step(self, optimizer, args, kwargs) -> None:  # torch's optimizer post hook
        source = self.source
        if source is None:
            if self.user_steps:
                return
            self._decide("optimizer", f"steps end at each {type(optimizer).__name__}.step() (torch.optim)")
        elif source != "optimizer":
            return
        OptimizerSteps._after_step(self, optimizer, args, kwargs)

    def _take_pending(self) -> None:
        if self._pending and not self.user_steps and self.source in (None, "optimizer"):
            self._pending = False
            self._in_hook = True  # _take(), one call less on every step
            try:
                self._user_step()
            finally:
                self._in_hook = False

    # ---- backward passes ------------------------------------------------------------------------
    def _watch_backward(self) -> None:
        """Count the optimizers made and watch where backward passes end, for a loop without
        torch.optim (``backward_steps``); nothing when the steps cannot end there."""
        if not self._backward_steps:
            return
        import torch

        finder = self
        init = torch.optim.Optimizer.__init__

        @functools.wraps(init)
        def made(opt, *args, **kwargs):
            finder._optimizers_made += 1
            return init(opt, *args, **kwargs)

        # Installed before the script runs (gpuprof run): every optimizer it makes is counted here.
        torch.optim.Optimizer.__init__ = made
        self._restore.append(lambda: setattr(torch.optim.Optimizer, "__init__", init))

        backward = torch.autograd.backward

        @functools.wraps(backward)
        def watched(*args, **kwargs):
            if threading.get_ident() != finder._thread:
                return backward(*args, **kwargs)
            finder._backward_depth += 1
            try:
                return backward(*args, **kwargs)
            finally:
                finder._backward_depth -= 1
                if finder._backward_depth == 0:
                    finder._backward_ended()

        torch.autograd.backward = watched
        self._backward = (watched, backward)
        self._restore.append(self._unwatch_backward)

    def _unwatch_backward(self) -> None:
        """torch.autograd.backward as it was, unless something wrapped it after the finder did
        (then the finder's wrapper stays, and its calls do nothing once a boundary is chosen)."""
        if self._backward is None:
            return
        import torch

        watched, backward = self._backward
        if torch.autograd.backward is watched:
            torch.autograd.backward = backward
        self._backward = None

    def _backward_ended(self) -> None:
        if (
            self.source is None
            and not self.user_steps
            and self._optimizers_made == 0
            and self._backward_steps
        ):
            self._decide(
                "backward",
                "no torch.optim optimizer in this script: steps end where each backward pass "
                "(loss.backward()) returns; to choose another boundary: " + MARKER_HELP,
            )
        if self.source == "backward" and not self.user_steps:
            self.optimizer_steps += 1
            self._take()

    # ---- --step-marker NAME ---------------------------------------------------------------------
    def _watch_marker(self) -> None:
        name = self.marker
        finder = self
        torch = sys.modules.get("torch")
        if torch is not None:
            cls = torch.autograd.profiler.record_function
            exit_ = cls.__exit__

            @functools.wraps(exit_)
            def watched_exit(rf, *exc):
                try:
                    return exit_(rf, *exc)
                finally:
                    if getattr(rf, "name", None) == name:
                        finder._marker_seen("range")

            cls.__exit__ = watched_exit
            self._restore.append(lambda: setattr(cls, "__exit__", exit_))
        from . import ranges

        ranges.on_exit(name, lambda: finder._marker_seen("range"))
        self._restore.append(lambda: ranges.on_exit(name, None))
        # A function NAME: its first call is found with a profile function, which then puts a
        # wrapper where the function is looked up (a module's or a class's namespace) and stands
        # down; a function it cannot reach that way (a closure) keeps the profile function on.
        sys.setprofile(self._profile)
        self._profiling = True

    def _marker_seen(self, kind: str) -> None:
        if threading.get_ident() != self._thread or self.user_steps:
            return  # another thread's, or the script paces its own steps (prof.step())
        if kind == "range":
            words = f"steps end where each range named {self.marker!r} ends (--step-marker)"
        else:
            words = f"steps end where each call of {self.marker}() returns (--step-marker)"
        self._decide("marker", words)
        self.optimizer_steps += 1
        self._take()

    def _profile(self, frame, event, arg) -> None:
        if event != "return" and event != "call":
            return
        code = frame.f_code
        if code.co_name != self.marker:
            return
        if self._marker_code is None:
            self._marker_code = code
            self._wrap_function(frame)
        if event == "return" and code is self._marker_code:
            self._marker_seen("function")
            if self._wrapped_marker:
                sys.setprofile(None)
                self._profiling = False

    _wrapped_marker = False

    def _wrap_function(self, frame) -> None:
        """Put a wrapper where later calls of the marker function look it up."""
        code, name = frame.f_code, self.marker
        places = [frame.f_globals]
        owner = frame.f_locals.get("self")
        if owner is not None:
            places += [vars(c) for c in type(owner).__mro__]
        for place in places:
            fn = place.get(name)
            if getattr(fn, "__code__", None) is not code:
                continue
            marked = self._marked(fn)
            if place is frame.f_globals:
                place[name] = marked
                self._restore.append(lambda p=place, f=fn: p.__setitem__(name, f))
            else:
                cls = next(c for c in type(owner).__mro__ if vars(c) is place)
                setattr(cls, name, marked)
                self._restore.append(lambda c=cls, f=fn: setattr(c, name, f))
            self._wrapped_marker = True
            return

    def _marked(self, fn):
        @functools.wraps(fn)
        def marked(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                self._marker_seen("function")

        return marked

    # ---- nothing found --------------------------------------------------------------------------
    def _hint(self) -> None:
        if self.source is not None:
            return
        s = self._hint_after_s
        when = f"{s:.0f} s" if s >= 1 else f"{s:.1f} s"
        if self.marker is not None:
            self._announce(
                f"gpuprof run: no range named {self.marker!r} ended and no function {self.marker}() "
                f"returned in the first {when}: check the name given to --step-marker ({MARKER_HELP})"
            )
        else:
            self._announce(
                f"gpuprof run: no training step found in the first {when} (no torch.optim "
                "optimizer stepped, no backward pass ended). If the script is still setting up, "
                f"ignore this; otherwise mark the steps and run again: {MARKER_HELP}"
            )
