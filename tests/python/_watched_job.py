"""A DDP training script on the CPU (gloo) that runs until told to stop, for the tests that watch a
job from outside while it runs (tests/python/session/test_watch_capture.py):

    torchrun --standalone --nproc-per-node 2 -m gpuprof run --watch --out OUT _watched_job.py STOP

Each step draws a DataLoader batch, sleeps --sleep-ms (the loop's own pace, so that a loaded machine
still sees steps of a known length) and trains a small model. It ends after the step in which the
file STOP appears (every rank agrees on that step through an all-reduce), or after --max-steps.
--spin-rank R burns --spin-ms of CPU time more in rank R's forward (a real straggler, with more
work to do). Prints "rank R steps N median_ms M" (M: the median of its last 20 steps, timed by the
loop itself from one optimizer step's end to the next).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("stop")
    p.add_argument("--max-steps", type=int, default=20000)
    p.add_argument("--sleep-ms", type=float, default=10.0)
    p.add_argument("--spin-rank", type=int, default=-1)
    p.add_argument("--spin-ms", type=float, default=0.0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    spin = args.spin_ms / 1000.0 if rank == args.spin_rank else 0.0

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

        def forward(self, x):
            if spin:
                end = time.thread_time() + spin
                while time.thread_time() < end:
                    pass
            return self.body(x)

    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    data = TensorDataset(torch.randn(256, 32, generator=g), torch.randint(0, 4, (256,), generator=g))
    steps = 0
    own = []  # the loop's own step times (s)
    last = time.perf_counter()
    while steps < args.max_steps:
        for x, y in DataLoader(data, batch_size=16):
            time.sleep(args.sleep_ms / 1000.0)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            own.append(now - last)
            last = now
            steps += 1
            stop = torch.tensor([1.0 if os.path.exists(args.stop) else 0.0])
            dist.all_reduce(stop)
            if stop.item() > 0 or steps >= args.max_steps:
                break
        else:
            continue
        break
    dist.barrier()
    time.sleep(0.5)  # gloo's threads finish freeing the last collective's tensors (torch's exit race)
    dist.destroy_process_group()
    tail = sorted(own[-20:])
    median = (tail[len(tail) // 2] + tail[(len(tail) - 1) // 2]) / 2
    print(f"rank {rank} steps {steps} median_ms {median * 1000:.3f}", flush=True)


if __name__ == "__main__":
    main()
