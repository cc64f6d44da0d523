"""What counting FLOPs costs per op, in CPU instructions (valgrind callgrind), side by side in one run.

    python bench/flops_overhead_callgrind.py [--ops 3000] [--json out.json]

The live hooks capture the inputs of the matrix-class ops (products, convolutions, attention) for
their FLOPs through a kernel at the BackendSelect dispatch key, registered for those ops alone while
the hooks are installed (cpp/src/collect/torch_hooks.cpp). This measures, as overhead_callgrind.py
does (one process under callgrind, each loop run with N and 3N ops, the difference over 2N per op,
only the loop's own thread counted):

- an op FLOPs are not counted for, `x.add_(y)` on 1-element tensors: unprofiled, and gpuprof
  recording with and without the capture registered. Its cost must not change.
- a matrix op, `torch.mm` of two [8, 8] tensors (small, so the capture's cost shows against the
  op's own): unprofiled, gpuprof without the capture, gpuprof with it (the default), and gpuprof
  with record_shapes (every op's inputs boxed for the RecordFunction callback).
- the alternative, torch's own counter: both loops inside `torch.utils.flop_counter.FlopCounterMode`
  (a Python dispatch mode every op goes through; it counts FLOPs and records nothing else).

"Added" is instructions per op over the same op unprofiled.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _callgrind import callgrind_counts, per_unit  # noqa: E402

VARIANTS = (
    "add_ none",
    "add_ gpuprof no capture",
    "add_ gpuprof",
    "mm none",
    "mm gpuprof no capture",
    "mm gpuprof",
    "mm gpuprof shapes",
    "add_ FlopCounterMode",
    "mm FlopCounterMode",
)


def child(ops: int) -> None:
    """Runs under callgrind: each variant's loop between the zero and dump markers."""
    import torch

    import gpuprof
    from gpuprof.collect.hooks import hooks as load_hooks

    torch.set_num_threads(1)
    x = torch.ones(1)
    y = torch.ones_like(x)
    a = torch.randn(8, 8)
    b = torch.randn(8, 8)
    hooks = load_hooks()
    install = hooks.install

    def body_of(name):
        if name.startswith("add_"):

            def loop(n):
                for _ in range(n):
                    x.add_(y)

        else:

            def loop(n):
                for _ in range(n):
                    torch.mm(a, b)

        return loop

    def run(name, n, measure):
        loop = body_of(name)

        def body(k):
            if measure:
                os.getppid()  # callgrind: --zero-before=getppid
            loop(k)
            if measure:
                os.getpgrp()  # callgrind: --dump-before=getpgrp

        if name.endswith("none"):
            body(n)
            return
        if name.endswith("FlopCounterMode"):
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as counter:
                body(n)
            if name.startswith("mm"):
                assert counter.get_total_flops() == 1024 * n
            return
        # The session installs the hooks with the capture (the default); the comparison without it
        # installs them the same way with the capture left out.
        hooks.install = (
            (lambda record_shapes, **kw: install(record_shapes, **kw, flop_capture=False))
            if "no capture" in name
            else install
        )
        try:
            # an mm records itself, three aten::resolve_conj inside it and its captured inputs
            with gpuprof.profile(
                record_shapes=name.endswith("shapes"), max_events=8 * n + 4096, gpu=False
            ) as prof:
                body(n)
                prof.step()
        finally:
            hooks.install = install
        report = prof.report().to_dict()
        assert report["counts"]["dropped"] == 0
        if name.startswith("mm") and "no capture" not in name:
            # the capture ran: every mm's FLOPs (2 * 8 * 8 * 8 = 1,024) are counted
            assert report["flops"]["per_step_flops"] == 1024 * n, report["flops"]

    for name in VARIANTS:  # warm every path (first-use allocations, lazy imports)
        run(name, 2000, measure=False)
    body_of("add_ none")(ops)
    os.getppid()
    body_of("add_ none")(ops)
    os.getpgrp()  # the first counted segment carries a one-off cost: not a variant's
    print("MEASURED discard", flush=True)
    for name in VARIANTS:
        for n in (ops, 3 * ops):
            run(name, n, measure=True)
            print(f"MEASURED {name}@{n}", flush=True)


def measure(ops: int) -> dict:
    counts, _ = callgrind_counts(__file__, ["--ops", ops])
    per_op = per_unit(counts, VARIANTS, ops)
    added = {k: v - per_op[k.split(" ")[0] + " none"] for k, v in per_op.items()}
    return {
        "instructions_per_op": per_op,
        "added_instructions_per_op": added,
        "capture_on_add_": per_op["add_ gpuprof"] - per_op["add_ gpuprof no capture"],
        "capture_on_mm": per_op["mm gpuprof"] - per_op["mm gpuprof no capture"],
        "record_shapes_on_mm": per_op["mm gpuprof shapes"] - per_op["mm gpuprof no capture"],
        # the alternative: torch's FlopCounterMode over each op, against gpuprof's whole recording
        "flop_counter_mode_on_mm": added["mm FlopCounterMode"],
        "flop_counter_mode_on_add_": added["add_ FlopCounterMode"],
        "flop_counter_mode_over_gpuprof_on_mm": added["mm FlopCounterMode"] / added["mm gpuprof"],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=3_000)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.ops)
        return
    import torch

    r = measure(args.ops)
    print(f"  {'variant':26} {'instr/op':>10} {'added':>10}")
    for k, v in r["instructions_per_op"].items():
        print(f"  {k:26} {v:10.0f} {r['added_instructions_per_op'][k]:10.0f}")
    print(
        f"  the FLOP capture adds {r['capture_on_mm']:.0f} instructions per mm and "
        f"{r['capture_on_add_']:+.1f} per add_ (record_shapes instead: "
        f"{r['record_shapes_on_mm']:.0f} per mm, and on every other op)"
    )
    print(
        f"  FlopCounterMode adds {r['flop_counter_mode_on_mm']:,.0f} instructions per mm and "
        f"{r['flop_counter_mode_on_add_']:,.0f} per add_: "
        f"{r['flop_counter_mode_over_gpuprof_on_mm']:.1f}x what gpuprof's whole recording adds per mm"
    )
    if args.json:
        results = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "ops": args.ops,
            "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "tool": "valgrind --tool=callgrind",
            **r,
        }
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
