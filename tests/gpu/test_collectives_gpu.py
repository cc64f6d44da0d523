"""NCCL's collectives on a real GPU, in the collectives table: a one-rank NCCL process group (the
most one GPU allows) runs a known all_reduce and all_gather each step. NCCL records each call's
facts through torch's record_param_comms (gloo, in the CPU tests, records only its own ranges), so
every field of the row is known in advance: the calls, nccl-tests' size of each (all_reduce: the
buffer; all_gather: the gathered output, here one rank's), the default group's name, description,
size and ranks.

With $GPUPROF_GPU_FIGURES set (tests/gpu/run_on_gpu.sh sets it), the rows go to collectives.json
there. Passed on an NVIDIA H200 on 2026-11-29 (docs/gpu.md).
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import gpuprof  # noqa: E402

STEPS = 4
ELEMENTS = 1 << 20  # fp32: 4 MiB a call


def test_nccl_collectives_fill_the_collectives_table(cuda, tmp_path):
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this torch was built without NCCL")
    torch.cuda.set_device(0)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        x = torch.ones(ELEMENTS, device="cuda")
        gathered = [torch.empty_like(x)]
        for _ in range(2):  # NCCL's communicator is made on the first call
            dist.all_reduce(x)
            dist.all_gather(gathered, x)
        torch.cuda.synchronize()
        with gpuprof.profile() as prof:
            for _ in range(STEPS):
                dist.all_reduce(x)
                dist.all_gather(gathered, x)
                torch.cuda.synchronize()
                prof.step()
        report = prof.report().to_dict()
    finally:
        dist.destroy_process_group()

    assert report["metadata"].get("gpu_collection", "").startswith("on"), report["metadata"]
    rows = {r["name"]: r for r in report["collectives"]}
    figures = {}
    for name in ("all_reduce", "all_gather"):
        assert name in rows, sorted(rows)
        row = rows[name]
        assert row["calls"] == STEPS
        assert row["bytes"] == STEPS * ELEMENTS * 4
        assert (row["process_group"], row["pg_desc"], row["group_size"], row["group_ranks"]) == (
            "0",
            "default_pg",
            1,
            "[0]",
        )
        assert row["total_us"] > 0
        figures[name] = row
    out_dir = os.environ.get("GPUPROF_GPU_FIGURES")
    if out_dir:
        with open(os.path.join(out_dir, "collectives.json"), "w") as fh:
            json.dump(figures, fh, indent=2)
    # timed_by: "device" where NCCL launched kernels; with one rank it may only copy, or do nothing.
    print(json.dumps(figures, indent=2))
