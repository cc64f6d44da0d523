"""A small DDP training job on the CPU (gloo) under gpuprof, for the distributed tests and examples.

    python _ddp_job.py OUT --world 4 [--slow-rank 2 --delay-ms 40 --where dataset|forward]
                       [--raise-rank 1] [--steps 8] [--torch-traces DIR] [--batch 16]

Each rank writes OUT/rank<r>.json (its gpuprof report) and OUT/rank<r>.done. Real processes, real
collectives: a slow rank is slowed by a real sleep in its dataset or its forward.
"""

import argparse
import os
import socket
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlowData:
    def __init__(self, n, batch, delay_s):
        import torch

        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.batch, self.delay_s = batch, delay_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.delay_s and i % self.batch == 0:
            time.sleep(self.delay_s)  # once per batch: the injected data-loading delay
        return self.x[i], self.y[i]


def worker(rank, args, port):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gpuprof

    os.environ["LOCAL_RANK"] = str(rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.world)
    slow = rank == args.slow_rank
    delay = args.delay_ms / 1000.0 if slow else 0.0

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)
            )

        def forward(self, x):
            if slow and args.where == "forward":
                time.sleep(delay)  # the injected extra forward work
            return self.body(x)

    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total_steps = args.steps + 2
    data = SlowData(args.batch * total_steps, args.batch, delay if args.where == "dataset" else 0.0)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=False)
    tprof = None
    if args.torch_traces:
        tprof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.steps),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                args.torch_traces, worker_name=f"rank{rank}"
            ),
        )
        tprof.start()
    prof = gpuprof.profile(
        schedule=gpuprof.schedule(wait=1, warmup=1, active=args.steps), rank_timeout_s=args.timeout
    )
    try:
        with prof:
            for i, (x, y) in enumerate(loader):
                if rank == args.raise_rank and i == 4:
                    raise RuntimeError(f"rank {rank} fails at step {i} (test)")
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                if tprof is not None:
                    tprof.step()
                if i + 1 >= total_steps:
                    break
        if tprof is not None:
            tprof.stop()
    finally:
        # What was recorded is saved even when the loop failed (a peer left).
        if prof._report is not None:
            prof.report().to_json(os.path.join(args.out, f"rank{rank}.json"))
    open(os.path.join(args.out, f"rank{rank}.done"), "w").close()
    dist.destroy_process_group()


def _run(rank, args, port):
    try:
        worker(rank, args, port)
    except RuntimeError as e:
        if "(test)" in str(e):
            os._exit(3)  # the failing rank leaves; the others must not hang
        raise


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--where", choices=["dataset", "forward"], default="dataset")
    p.add_argument("--raise-rank", type=int, default=-1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--torch-traces", default="")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    import multiprocessing as mp

    # Plain processes, joined one by one: a rank that exits does not take the others down with it
    # (torch.multiprocessing's spawn would terminate them), as on a real cluster.
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_run, args=(r, args, port)) for r in range(args.world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    codes = [proc.exitcode for proc in procs]
    print("exit codes:", codes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
