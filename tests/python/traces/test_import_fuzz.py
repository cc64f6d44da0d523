"""Bounded-time fuzzing of the trace importer (atheris, libFuzzer's engine for Python).

The target feeds mutated bytes to the native reader through its binding. Any outcome other than a
Trace or a TraceImportError (another exception, a crash, a hang) fails the test. Inputs are small
valid traces of each dialect (and a real ROCm trace) with byte edits and cuts, or raw bytes.
Run by hand for longer: python tests/python/traces/test_import_fuzz.py -max_total_time=600
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest
from _rusage import run_fresh
from _traces import TRACES

FUZZ_SECONDS = 20
SEEDS = [
    {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1.5, "dur": 100},
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 2,
                "dur": 3,
                "args": {"correlation": 9, "External id": 4},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 6,
                "dur": 50,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": 9,
                    "grid": [1, 2, 3],
                    "block": [64, 1, 1],
                    "registers per thread": 32,
                    "blocks per SM": 0.5,
                },
            },
            {
                "ph": "i",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": 3,
                "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 512},
            },
        ],
        "deviceProperties": [{"id": 0, "name": "GPU", "numSms": 80}],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
    },
    {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "Memcpy",
                "name": "Memcpy HtoD (Pageable -> Device)",
                "pid": 0,
                "tid": "stream 7",
                "ts": 1623142623529248,
                "dur": 1940,
                "args": {"bytes": 19267584, "external id": 537},
            },
            {"ph": "s", "id": 34417, "pid": 0, "tid": 0, "ts": 1, "cat": "async", "name": "launch"},
        ],
    },
    [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "pid": 1,
            "tid": 1,
            "ts": 1712195495519689000,
            "dur": 5,
        }
    ],
]


def fuzz_main(argv: list[str]) -> None:
    import atheris

    from gpuprof._native import _core

    TraceImportError = _core.TraceImportError
    # The C++ reader is not compiled with coverage instrumentation (that needs clang), so libFuzzer
    # gets little feedback; the target therefore mutates whole seed traces itself, driven by the
    # fuzzer's bytes: every input is a seed with a few byte edits and possibly a cut.
    seeds = [json.dumps(s).encode() for s in SEEDS]
    extra = os.environ.get("GPUPROF_FUZZ_SEED_FILE")
    if extra:
        seeds.append(Path(extra).read_bytes())

    def mutate(data: bytes) -> bytes:
        fdp = atheris.FuzzedDataProvider(data)
        if fdp.ConsumeBool():
            return fdp.ConsumeBytes(fdp.remaining_bytes())  # raw bytes too
        buf = bytearray(seeds[fdp.ConsumeIntInRange(0, len(seeds) - 1)])
        for _ in range(fdp.ConsumeIntInRange(0, 6)):
            op = fdp.ConsumeIntInRange(0, 3)
            pos = fdp.ConsumeIntInRange(0, len(buf))
            chunk = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 12))
            if op == 0:
                buf[pos:pos] = chunk
            elif op == 1:
                del buf[pos : pos + len(chunk)]
            elif op == 2:
                buf[pos : pos + len(chunk)] = chunk
            else:
                del buf[pos:]  # a cut-off file
        return bytes(buf)

    def target(data: bytes) -> None:
        text = mutate(data)
        try:
            trace, stats = _core.import_trace_json(text, "fuzz.json", 1 << 20, 100_000)
        except TraceImportError as e:
            assert str(e).startswith("fuzz.json: "), e
            return
        # Whatever was kept must be usable by the analysis and the exporter, and read back.
        _core.compute_breakdown(trace, True)
        again, _ = _core.import_trace_json(_core.export_chrome_json(trace), "export.json")
        assert again.num_events == trace.num_events
        assert trace.num_events + trace.skipped_events <= stats["records"]

    atheris.Setup(argv, target)
    atheris.Fuzz()


def test_importer_survives_bounded_fuzzing(tmp_path):
    pytest.importorskip("atheris", reason="atheris (pip install atheris) runs the fuzzer")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(SEEDS):
        (corpus / f"seed{i}.json").write_text(json.dumps(seed))
    rocm = TRACES / "hta_mi250_rocm" / "rank0.json.gz"
    env = dict(os.environ)
    # Run as a script, this file imports the helpers of tests/python (one folder up) too.
    helpers = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (helpers, env.get("PYTHONPATH")) if p)
    if rocm.exists():
        (tmp_path / "rocm.json").write_bytes(gzip.decompress(rocm.read_bytes()))
        env["GPUPROF_FUZZ_SEED_FILE"] = str(tmp_path / "rocm.json")
    # libFuzzer's -rss_limit_mb reads the process's peak resident set: spawned from pytest directly,
    # the fuzzer would start with the test run's own peak (past 2 GB late in the suite).
    proc, _ = run_fresh(
        [
            sys.executable,
            __file__,
            f"-max_total_time={FUZZ_SECONDS}",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-max_len=100000",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        timeout=FUZZ_SECONDS + 60,
        env=env,
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, f"the fuzzer found a failing input (saved under {tmp_path}):\n{tail}"
    assert "Done" in tail, tail  # libFuzzer's summary line: the run really happened


if __name__ == "__main__":
    fuzz_main(sys.argv)
