"""``gpuprof doctor [--json]``: what gpuprof can collect on this machine, and why not where it cannot.

For users and HPC support staff before a profiling run: the build and the installed torch, whether
torch sees CUDA, whether GPU collection starts (the very call a session makes: CUPTI found where,
loaded, subscribed; NVML), the NVTX injection value, the clock, the CPUs this process may use, and
the gzip decoder. Each line is ``ok``, ``--`` (not available here, with why) or ``!!`` (a problem to
fix). Exit code 0 whatever it finds (it is a report, not a check), 2 on a mistake.
"""

from __future__ import annotations

import json
import os
import platform
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="what gpuprof can collect on this machine, and why not",
        description=__doc__.split("\n\n")[1],
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(run=run)


def _torch_facts() -> dict:
    from ..collect import hooks as _hooks

    hooks = _hooks.status()
    facts = {
        "torch": hooks.get("torch"),
        "hooks_prebuilt_for": hooks["prebuilt_for"],
        "hooks_cache": hooks["cache_dir"],
        "hooks_key": hooks.get("key"),
        "compiler": hooks["compiler"],
    }
    state = hooks["state"]
    if state == "no torch":
        facts["hooks"] = (
            "!!",
            f"{hooks['detail']}: gpuprof can analyse traces but not profile "
            "a live run until torch is installed",
        )
        return facts
    # "rebuild": the cached hooks would be refused (a run moves them aside and compiles anew);
    # "broken": they match their manifest but crash a process that loads them (remove them);
    # "cannot compile": no usable hooks and no way to make them here.
    mark = {"prebuilt": "ok", "cached": "ok", "needs compile": "ok"}.get(state, "!!")
    facts["hooks"] = (mark, f"operator hooks for torch {hooks['torch']}: {state} ({hooks['detail']})")
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            facts["cuda"] = (
                "ok",
                f"torch {torch.__version__} sees {len(names)} CUDA device(s): " + ", ".join(names),
            )
        else:
            facts["cuda"] = (
                "--",
                f"torch {torch.__version__} sees no CUDA device (CPU build, no "
                "driver, or CUDA_VISIBLE_DEVICES hides them): host-side profiling",
            )
    except Exception as e:  # a broken CUDA setup is a finding, not a crash
        facts["cuda"] = ("!!", f"asking torch about CUDA failed: {type(e).__name__}: {e}")
    return facts


def _gpu_collection_facts() -> dict:
    from .._native import _core
    from ..collect.gpu import cupti_search_dirs, nvtx_injection_note

    facts = {}
    dirs = cupti_search_dirs()
    status = _core.gpu_start(dirs)  # exactly what a session's first active step does
    try:
        if status["enabled"]:
            facts["gpu_collection"] = (
                "ok",
                f"CUPTI {status['cupti_version']} ({status['cupti_library']}) "
                "starts: kernels, copies, runtime calls will be collected",
            )
        else:
            facts["gpu_collection"] = ("--", status["message"])
        facts["nvml"] = (
            ("ok", "NVML samples utilization, memory, power, clocks")
            if status["nvml"]
            else ("--", status["nvml_message"] or "NVML not available")
        )
    finally:
        _core.gpu_release()
    path, why = _core.cupti_library_path(dirs)
    if not status["enabled"]:  # no GPU collection here: nothing would collect NVTX ranges either
        facts["nvtx_injection"] = ("--", "NVTX ranges are collected with the GPU collection (off here)")
    elif not path:
        facts["nvtx_injection"] = ("--", f"no libcupti to collect your NVTX ranges with: {why}")
    else:  # the line a session's report would give
        note = nvtx_injection_note(path)
        facts["nvtx_injection"] = (
            ("ok", note) if note.startswith("on") else ("--", note.removeprefix("off: "))
        )
    return facts


def findings() -> dict:
    from .._build_info import GPUPROF_VERSION as __version__
    from .._host import cpus_available
    from .._native import _core

    out: dict = {"gpuprof": __version__, "python": platform.python_version(), "platform": platform.platform()}
    out.update(_torch_facts())
    out.update(_gpu_collection_facts())
    out["clock"] = (
        "ok",
        "TSC ticks on the hot path (clocksource tsc), converted to CLOCK_MONOTONIC"
        if _core.collector_ticks_are_tsc()
        else "CLOCK_MONOTONIC on the hot path (the "
        "kernel's clocksource is not the TSC: about twice the cost per timestamp)",
    )
    n, total = cpus_available(), os.cpu_count()
    out["cpus"] = (
        "ok",
        f"{n} CPU{'' if n == 1 else 's'} available to this process (of {total}): "
        "DataLoader advice sizes num_workers from this",
    )
    out["gzip"] = _gzip_fact()
    return out


def _gzip_fact() -> tuple:
    """Which deflate decoder reads .json.gz traces (cpp/src/io/raw_inflate.h)."""
    from .._build_info import GPUPROF_INFLATER

    if GPUPROF_INFLATER != "isa-l":
        return (
            "--",
            ".json.gz traces inflated with zlib: ISA-L was not found when gpuprof was built "
            "(apt-get install libisal-dev, then reinstall gpuprof, for 2-3x faster inflating)",
        )
    if os.environ.get("GPUPROF_INFLATER") == "zlib":
        return ("ok", ".json.gz traces inflated with zlib (GPUPROF_INFLATER=zlib; this build also has ISA-L)")
    return ("ok", ".json.gz traces inflated with ISA-L's igzip")


def run(args) -> int:
    facts = findings()
    if args.json:
        print(
            json.dumps(
                {
                    k: ({"state": v[0], "detail": v[1]} if isinstance(v, tuple) else v)
                    for k, v in facts.items()
                },
                indent=2,
            )
        )
        return 0
    print(f"gpuprof {facts['gpuprof']}, Python {facts['python']}, {facts['platform']}")
    print(
        f"torch: {facts.get('torch') or 'not installed'}; hooks cache: {facts.get('hooks_cache')}; "
        f"C++ compiler: {facts.get('compiler') or 'none found'}"
    )
    for key, value in facts.items():
        if isinstance(value, tuple):
            state, detail = value
            print(f"{state}  {key}: {detail}")
    sys.stdout.flush()
    return 0
