"""The module view on a real GPU: the small ResNet (tests/python/_loops.py) trains on CUDA with
with_modules=True and GPU collection; every kernel its forward and backward launched counts in a
module, the convolutions' kernels in the convolution modules."""

import sys
from pathlib import Path

import pytest

import gpuprof

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def test_kernels_count_in_the_modules_that_launched_them():
    import torch
    from _loops import make_tiny_resnet

    torch.manual_seed(0)
    model = make_tiny_resnet(width=32).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(32, 3, 32, 32, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with gpuprof.profile(with_modules=True) as prof:
        for _ in range(4):
            step()
            prof.step()
        torch.cuda.synchronize()
    report = prof.report()
    if not report.kernels:
        pytest.skip("GPU collection was off: " + report.metadata.get("gpu_collection", "?"))
    rows = {r["path"]: r for r in report.data["modules"]}
    # Each convolution module launched kernels, forward and backward.
    convs = [r for r in rows.values() if r["type"] == "Conv2d"]
    assert convs and all(r["device_self_us"] > 0 for r in convs)
    # The model's device total is every kernel launched inside its forward or its backward: all the
    # kernels of the span less the loss's, the optimizer's and AccumulateGrad's, which are in no
    # module of the model.
    kernel_us = sum(k["total_us"] for k in report.kernels)
    model_us = rows[""]["device_total_us"]
    assert 0.5 * kernel_us < model_us <= kernel_us + 0.01
    for r in rows.values():
        below = sum(c["device_total_us"] for c in rows.values() if c["parent"] == r["path"])
        assert r["device_total_us"] == pytest.approx(r["device_self_us"] + below, abs=0.01)
