"""The module view's cost in CPU instructions (valgrind callgrind), per module call and per op.

    python bench/modules_callgrind.py [--ops 3000] [--before DIR] [--json out.json]

The method of overhead_callgrind.py, through the same driver (_callgrind.py): one process under callgrind
runs each variant's loop with N and with 3N iterations, only the loop's own thread is counted, and
the per-iteration figure is the difference divided by 2N. Two loops:

- "module": one call of a module whose forward runs one op (``Tensor.add_`` on 1-element tensors),
  so each iteration is one module call and one RecordFunction;
- "op": the op alone (no module), to see what the module view costs an op that runs in no module.

Variants: unprofiled; gpuprof without the module view (``with_modules=False``: the hooks' hot path
as before the module view existed) and with it (``with_modules=True``); torch.profiler (CPU
activity) without and with ``with_stack=True`` (what torch.profiler needs to record module calls
in eager mode); and, for scale, the module loop with two global module hooks that do nothing
(torch's own cost of calling any global forward pre-hook and hook: ``Module._call_impl``'s slow
path). "Added" is instructions per iteration over the unprofiled loop.

--before DIR runs the same measurement with the gpuprof package found in DIR first on sys.path (an
earlier build, which has no module view): its "gpuprof" variants measure the hot path as it was.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts, per_unit  # noqa: E402

VARIANTS = (
    "module: none",
    "module: idle global hooks",
    "module: gpuprof",
    "module: gpuprof modules",
    "module: torch.profiler",
    "module: torch.profiler with_stack",
    "op: none",
    "op: gpuprof",
    "op: gpuprof modules",
)


def child(ops: int, wanted: list[str]) -> None:
    """Runs under callgrind: each variant's loop between the zero and dump markers."""
    import torch

    import gpuprof

    torch.set_num_threads(1)
    x = torch.ones(1)
    y = torch.ones_like(x)

    class AddY(torch.nn.Module):
        def forward(self, t):
            return t.add_(y)

    module = AddY()
    has_modules = "with_modules" in inspect.signature(gpuprof.profile).parameters

    def loop_module(n):
        for _ in range(n):
            module(x)

    def loop_op(n):
        for _ in range(n):
            x.add_(y)

    def run(name, n, measure):
        workload, _, how = name.partition(": ")
        loop = loop_module if workload == "module" else loop_op

        def body():
            if measure:
                os.getppid()  # callgrind: --zero-before=getppid
            loop(n)
            if measure:
                os.getpgrp()  # callgrind: --dump-before=getpgrp

        if how == "none":
            body()
        elif how == "idle global hooks":
            from torch.nn.modules import module as nn_module

            pre = nn_module.register_module_forward_pre_hook(lambda m, a: None)
            post = nn_module.register_module_forward_hook(lambda m, a, o: None, always_call=True)
            try:
                body()
            finally:
                pre.remove()
                post.remove()
        elif how.startswith("gpuprof"):
            kwargs = {"with_modules": how.endswith("modules")} if has_modules else {}
            with gpuprof.profile(max_events=4 * n + 1000, gpu=False, **kwargs) as prof:
                body()
                prof.step()
            assert prof.report().counts["dropped"] == 0
        else:
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], with_stack=how.endswith("with_stack")
            ):
                body()

    variants = [v for v in VARIANTS if v in wanted and (has_modules or not v.endswith("modules"))]
    for name in variants:  # warm every path (first-use allocations, lazy imports)
        run(name, 2000, measure=False)
    os.getppid()
    loop_op(ops)  # the first counted segment carries a one-off cost: not a variant's
    os.getpgrp()
    print("MEASURED discard", flush=True)
    for name in variants:
        for n in (ops, 3 * ops):
            run(name, n, measure=True)
            print(f"MEASURED {name}@{n}", flush=True)


def measure(ops: int, before_dir: str | None, variants: str) -> dict:
    counts, package = callgrind_counts(__file__, ["--ops", ops, "--variants", variants], before_dir)
    per_iteration = per_unit(counts, VARIANTS, ops)
    added = {
        name: v - per_iteration[name.split(": ")[0] + ": none"]
        for name, v in per_iteration.items()
        if not name.endswith("none")
    }
    out = {"gpuprof_package": package, "instructions_per_iteration": per_iteration, "added": added}
    if all(f"{v}@{ops}" in counts for v in VARIANTS):
        # What recording the module call itself adds, beyond what gpuprof adds to its op anyway,
        # against what torch.profiler's with_stack adds beyond its own CPU recording.
        ours = added["module: gpuprof modules"] - added["module: gpuprof"]
        theirs = added["module: torch.profiler with_stack"] - added["module: torch.profiler"]
        out["module_call_added"] = {
            "gpuprof modules": ours,
            "torch.profiler with_stack": theirs,
            "idle global hooks": added["module: idle global hooks"],
            "ratio": ours / theirs if theirs else None,
        }
        out["op_added_by_module_view"] = added["op: gpuprof modules"] - added["op: gpuprof"]
    return out


def show(label: str, r: dict) -> None:
    print(f"{label}: gpuprof from {r['gpuprof_package']}")
    print(f"  {'variant':36} {'instr/iter':>11} {'added':>10}")
    for k, v in r["instructions_per_iteration"].items():
        print(f"  {k:36} {v:11.0f} {r['added'].get(k, 0.0):10.0f}")
    m = r.get("module_call_added")
    if m:  # every variant measured
        print(
            f"  a module call: gpuprof's module view adds {m['gpuprof modules']:.0f} instructions "
            f"(torch's idle global hooks alone {m['idle global hooks']:.0f}); torch.profiler's "
            f"with_stack adds {m['torch.profiler with_stack']:.0f} ({m['ratio']:.3f}x); an op in no "
            f"module: {r['op_added_by_module_view']:+.0f}"
        )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=3_000)
    p.add_argument("--before", help="a folder holding an earlier `gpuprof` package to compare with")
    p.add_argument("--json", help="write the figures here")
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated subset (each loop's 'none' is needed for its added figures)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.ops, args.variants.split(","))
        return
    import torch

    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ops": args.ops,
        "iteration": "one call of a module whose forward runs Tensor.add_ on 1-element tensors "
        "('module'), or the add_ alone ('op')",
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "tool": "valgrind --tool=callgrind",
    }
    if args.before:
        results["before"] = measure(args.ops, args.before, args.variants)
        show("before", results["before"])
    key = "after" if args.before else "current"
    results[key] = measure(args.ops, None, args.variants)
    show(key, results[key])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
