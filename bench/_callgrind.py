"""The callgrind driver every instruction-counting bench shares.

A bench script run with ``--child`` executes its loops in one process under valgrind's callgrind;
each measured loop sits between ``os.getppid()`` (callgrind zeroes its counters there) and
``os.getpgrp()`` (callgrind dumps them there) and is named by a ``MEASURED <label>`` line on stdout
printed right after. ``callgrind_counts`` runs that child and returns each label's instructions;
``per_unit`` turns the N and 3N runs of a loop into instructions per iteration (the difference over
2N, so that nothing paid once per loop counts).

Only the loop's own thread is read (``--separate-threads``): other threads' instructions (numpy's
OpenBLAS workers spinning, the report analysis' second thread of the variant before, whose counts
callgrind's zeroing did not clear) otherwise landed inside some measured loops and not others, by up
to 10 million instructions.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile


def callgrind_counts(script: str, child_args: list, before_dir: str | None = None) -> tuple[dict, str]:
    """Runs ``script --child *child_args`` under callgrind: ({label: instructions}, the folder of
    the gpuprof package the child imported). ``before_dir`` puts an earlier gpuprof first on the
    child's path (with a cache folder of its own, so that no cached hooks build stands in for its
    prebuilt ones). Exits with callgrind's error when the run fails."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        # Python's string hashing is seeded at random per process: dict probes (attribute lookups)
        # then take a few instructions more or less per op from run to run. One seed for every run.
        env["PYTHONHASHSEED"] = "0"
        if before_dir:
            env["PYTHONPATH"] = os.path.abspath(before_dir) + os.pathsep + env.get("PYTHONPATH", "")
            env["GPUPROF_CACHE_DIR"] = os.path.join(tmp, "cache")
        out = os.path.join(tmp, "callgrind.out")
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--separate-threads=yes",
            "--zero-before=getppid",
            "--dump-before=getpgrp",
            "--dump-instr=no",
            "--dump-line=no",
            sys.executable,
            os.path.abspath(script),
            "--child",
            *[str(a) for a in child_args],
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the run under callgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        order = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("MEASURED ")]
        dumps = []
        for path in glob.glob(out + "*-01"):  # the main thread's dumps (out.N-01)
            with open(path) as f:
                text = f.read()
            if "Trigger: --dump-before=getpgrp" not in text[:4000]:
                continue
            part = re.search(r"^part: (\d+)", text, re.M)
            total = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
            dumps.append((int(part.group(1)) if part else 0, int(total.group(1))))
        dumps.sort()
        if len(dumps) != len(order):
            sys.exit(f"expected {len(order)} callgrind dumps, found {len(dumps)}")
        package = subprocess.run(
            [sys.executable, "-c", "import gpuprof; print(gpuprof.__file__)"],
            env=env,
            capture_output=True,
            text=True,
        ).stdout.strip()
    return {label: total for label, (_, total) in zip(order, dumps)}, os.path.dirname(package)


def per_unit(counts: dict, names, n: int) -> dict:
    """Instructions per iteration of each named loop measured at ``name@N`` and ``name@3N``: the
    difference over 2N. Names without both runs are left out."""
    return {
        name: (counts[f"{name}@{3 * n}"] - counts[f"{name}@{n}"]) / (2 * n)
        for name in names
        if f"{name}@{n}" in counts and f"{name}@{3 * n}" in counts
    }
