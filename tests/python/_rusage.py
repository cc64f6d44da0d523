"""Run a command in its own process and measure that process's peak resident set alone.

On Linux a child spawned the usual way (vfork, then exec: what subprocess does) starts with the
peak resident set of the process that spawned it. Its ru_maxrss, and libFuzzer's -rss_limit_mb
that reads it, would see the test run's own peak: pytest passes 2 GB over the whole suite. Here a
small interpreter in between spawns the command, whose peak then starts from that interpreter's
(about 10 MB).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

_SPAWN = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[2:]).returncode\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(r if r >= 0 else 128 - r)\n"
)


def run_fresh(cmd: list, timeout: float | None = None, **popen) -> tuple[subprocess.CompletedProcess, float]:
    """Run `cmd` (its output captured as text): the finished process and its peak RSS in MiB."""
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = os.path.join(tmp, "peak")
        proc = subprocess.Popen(
            [sys.executable, "-c", _SPAWN, peak_file, *map(str, cmd)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so that a timeout ends the command too, not only the spawner
            **popen,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        with open(peak_file) as f:
            peak_kib = int(f.read())
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), peak_kib / 1024.0
