"""The module view's live half: one range per ``nn.Module`` call, from torch's global module hooks.

While a span is hooked and ``gpuprof.profile(with_modules=True)``, a forward pre-hook and a forward
hook (``torch.nn.modules.module.register_module_forward_pre_hook`` / ``register_module_forward_hook``,
the latter with ``always_call=True`` so that a forward that raises still closes its range) record each
module call as a host range named ``nn.Module: <segment> (<Type>)``: the module's name under the
module that called it (``conv1`` under ``layer1.0``), or, for a module called with no module around it
(the model, a loss module), its class name. The analysis (cpp/src/analysis/modules.cpp) joins the
segments into paths (``layer1.0.conv1``) and attributes every op inside, forward and backward. The
user's model is not changed, and nothing is installed outside hooked steps: with the module view
off, or between spans, torch runs its module calls as it always does.

Names come from the module tree of each root module seen (``named_modules()``), computed at a module's
first call under a given caller and cached for the span. The hooks never raise into the model: a
failure becomes one warning and the hooks remove themselves (the span's operators are still
recorded, its module view is cut short).
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from typing import Any, Optional

from .._native import _core

log = logging.getLogger("gpuprof")

PREFIX = "nn.Module: "

# torch.compile(module) warns on every compiled module's call while any global module hook is
# installed (ours: the hooks fire once more, for the OptimizedModule, which the module view wants).
# The warning is about gpuprof's hooks, not the user's code: silenced while they are installed.
_COMPILE_WARNING = (
    "ignore",
    r"Using `torch\.compile\(module\)` when there are global hooks",
    UserWarning,
)


class ModuleHooks:
    """Install with ``install()`` for a hooked span, ``remove()`` after it; ``reset()`` at each span
    start forgets the names computed so far."""

    def __init__(self) -> None:
        self._handles: tuple = ()
        self._local = threading.local()  # .stack: the module calls open on this thread
        # id(module) -> (id of its caller or 0, the range's name, a weak reference to the module)
        self._names: dict[int, tuple[int, str, Any]] = {}
        # id(module) -> (id of the root whose tree names it, its dotted name in that tree)
        self._trees: dict[int, tuple[int, str]] = {}
        self._note = ""  # why the hooks stopped, when they did
        self._compiling = None
        self._filter = None  # the warnings filter install() added

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    @property
    def note(self) -> str:
        """Why the module view of this span is incomplete ("" when it is not)."""
        return self._note

    def install(self) -> str:
        """Install the two global hooks; returns why they could not be, or ""."""
        if self._handles:
            return ""
        try:
            import torch
            from torch.nn.modules import module as nn_module

            self._compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
            pre = nn_module.register_module_forward_pre_hook(self._pre)
            try:
                post = nn_module.register_module_forward_hook(self._post, always_call=True)
            except BaseException:
                pre.remove()
                raise
        except Exception as e:  # an old or unusual torch: the span goes on without module ranges
            return f"torch's global module hooks could not be installed ({type(e).__name__}: {e})"
        self._handles = (pre, post)
        action, message, category = _COMPILE_WARNING
        warnings.filterwarnings(action, message=message, category=category)
        self._filter = warnings.filters[0]
        return ""

    def remove(self) -> None:
        for handle in self._handles:
            try:
                handle.remove()
            except Exception:  # already gone: nothing to undo
                pass
        self._handles = ()
        self._local = threading.local()  # calls still open now are never closed by these hooks
        if self._filter is not None:
            try:
                warnings.filters.remove(self._filter)
            except ValueError:  # the program reset the filters meanwhile
                pass
            self._filter = None

    def reset(self) -> None:
        self._names.clear()
        self._trees.clear()
        self._note = ""

    # ---- the hooks (every module call while installed: kept short) ------------------------------
    def _pre(self, module, args) -> None:
        try:
            compiling = self._compiling
            if compiling is not None and compiling():
                return None  # inside torch.compile's tracing: nothing to record, nothing to trace
            local = self._local
            try:
                stack = local.stack
            except AttributeError:
                stack = local.stack = []
            parent = stack[-1] if stack else None
            caller = id(parent) if parent is not None else 0
            entry = self._names.get(id(module))
            if entry is None or entry[0] != caller or entry[2]() is not module:
                entry = self._name(module, parent, caller)
            stack.append(module)
            _core.collector_module_enter(id(module), entry[1])
        except Exception as e:
            self._fail(e)
        return None

    def _post(self, module, args, output) -> None:
        try:
            compiling = self._compiling
            if compiling is not None and compiling():
                return None
            stack = getattr(self._local, "stack", None)
            if not stack:
                return None
            if stack[-1] is not module:
                # A call whose pre-hook ran before the hooks were installed: not ours to close.
                if not any(m is module for m in stack):
                    return None
                while stack[-1] is not module:
                    stack.pop()
            stack.pop()
            _core.collector_module_exit(id(module))
        except Exception as e:
            self._fail(e)
        return None  # the module's output stays what it returned

    # ---- names --------------------------------------------------------------------------------
    def _register_tree(self, root) -> None:
        """Names every module under ``root`` that no earlier tree named."""
        rid = id(root)
        for name, sub in root.named_modules():
            self._trees.setdefault(id(sub), (rid, name))

    def _name(self, module, parent: Optional[Any], caller: int) -> tuple[int, str, Any]:
        kind = type(module).__name__
        mine = self._trees.get(id(module))
        if parent is None:
            if mine is None:
                self._register_tree(module)
            segment = kind  # a root: the model, or a module called beside it
        else:
            theirs = self._trees.get(id(parent))
            if mine is None:
                # Not registered under any module seen so far (made on the fly, or kept in a plain
                # list): named by its class under its caller; its own children by their names in it.
                self._register_tree(module)
                segment = kind
            elif theirs is not None and mine[0] == theirs[0] and mine[1]:
                prefix = theirs[1] + "." if theirs[1] else ""
                # Below its caller in the tree: the rest of its name (`conv1` under `layer1.0`;
                # `layers.0` when the caller ran a ModuleList's block itself); else its whole name.
                segment = mine[1][len(prefix) :] if prefix and mine[1].startswith(prefix) else mine[1]
            else:
                segment = mine[1] or kind  # another tree's module (or root) called inside this one
        try:
            ref = weakref.ref(module)
        except TypeError:  # a module class with __slots__ and no __weakref__: held for the span
            ref = _Held(module)
        entry = (caller, f"{PREFIX}{segment} ({kind})", ref)
        self._names[id(module)] = entry
        return entry

    def _fail(self, e: BaseException) -> None:
        if self._note:
            return
        self._note = f"the module hooks failed ({type(e).__name__}: {e}) and were removed"
        log.warning("gpuprof: %s; the module view of this span is incomplete", self._note)
        self.remove()


class _Held:
    """A strong reference that reads like a weak one (``ref()``)."""

    __slots__ = ("_obj",)

    def __init__(self, obj) -> None:
        self._obj = obj

    def __call__(self):
        return self._obj
