"""A torch.compile(dynamic=True) loop with inductor on the CPU; batch sizes change, so it recompiles.

python compile_loop.py OUT.json [callback]: with "callback", gpuprof (record_shapes=True) and
torch.profiler both run in this process, and the report's dict and torch.profiler's operator totals
go to OUT.json. Without it, the script is for `gpuprof run`.
"""

import json
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
STEPS = 8
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
cmodel = torch.compile(model, dynamic=True)


def step(i):
    x = torch.randn(8 + (i % 3), 16)  # three batch sizes: dynamic shapes, a recompile or two
    loss = cmodel(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


if "callback" not in sys.argv:
    for i in range(STEPS):
        step(i)
else:
    from torch.profiler import ProfilerActivity, profile

    import gpuprof

    for i in range(3):  # compile (each batch size once) outside both profilers
        step(i)
    with profile(activities=[ProfilerActivity.CPU]) as tp:
        with gpuprof.profile(record_shapes=True, on_trace_ready=None) as prof:
            for i in range(3, 3 + STEPS - 1):
                step(i)
                prof.step()
    totals = {e.key: {"count": e.count, "cpu_time_total": e.cpu_time_total} for e in tp.key_averages()}
    json.dump({"report": prof.report().to_dict(), "torch": totals}, open(sys.argv[1], "w"))
