"""A plain DDP training script on the CPU (gloo), as users launch one with torchrun.

    torchrun --standalone --nproc-per-node 2 -m gpuprof run --out OUT _torchrun_job.py [--steps N]
    torchrun --standalone --nproc-per-node 2 _torchrun_job.py --context OUT [--steps N]

Under `gpuprof run` it has no gpuprof code at all. With --context it wraps its loop in
gpuprof.profile(..., on_trace_ready=gpuprof.save(OUT)): the context-manager route. --slow-rank R
sleeps --delay-ms in rank R's forward (a real straggler). --group-desc NAME also makes a process
group of every rank under that description and all-reduces a 1000-float tensor in it each step.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--context", default="", metavar="OUT")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--group-desc", default="")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # torchrun's MASTER_ADDR, RANK, WORLD_SIZE
    rank = dist.get_rank()
    extra = (
        dist.new_group(list(range(dist.get_world_size())), group_desc=args.group_desc)
        if args.group_desc
        else None
    )
    slow = rank == args.slow_rank

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)
            )

        def forward(self, x):
            if slow:
                time.sleep(args.delay_ms / 1000.0)
            return self.body(x)

    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)

    def step():
        x, y = torch.randn(16, 64, generator=g), torch.randint(0, 4, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if extra is not None:
            dist.all_reduce(torch.ones(1000), group=extra)

    if args.context:
        import gpuprof

        with gpuprof.profile(
            schedule=gpuprof.schedule(wait=1, warmup=1, active=args.steps - 2),
            on_trace_ready=gpuprof.save(args.context),
        ) as prof:
            for _ in range(args.steps):
                step()
                prof.step()
    else:
        for _ in range(args.steps):
            step()
    print(f"rank {rank} done", flush=True)
    # gloo's worker threads free a finished collective's tensors just after it returns, and need the
    # GIL to do it; one still at it when the interpreter exits is ended, and C++ aborts the rank
    # (pytorch/pytorch#190489; docs/distributed.md). It cost a 4-rank run its rank 1 on a loaded CI
    # machine (2026-11-30). A short sleep hands them the GIL first.
    time.sleep(0.5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
