"""FLOPs and MFU on a real GPU: the same models as tests/python/analysis/test_flops.py on CUDA, counted by
the live hooks' capture (cuBLAS, cuDNN and the flash/efficient attention kernels underneath) and
compared with torch's FlopCounterMode, op by op; MFU against the peak table's row for the device.

Passed on an NVIDIA H200 on 2026-11-29 (docs/gpu.md).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils import flop_counter  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.analysis import peaks  # noqa: E402

STEPS = 4


def _models():
    layer = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0, batch_first=True
    )
    return {
        "mlp": (
            torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)),
            (256, 1024),
        ),
        "conv_net": (
            torch.nn.Sequential(
                torch.nn.Conv2d(16, 64, 3, stride=2, padding=1, groups=4),
                torch.nn.ReLU(),
                torch.nn.ConvTranspose2d(64, 16, 3, stride=2, padding=1, output_padding=1, groups=4),
            ),
            (32, 16, 64, 64),
        ),
        "transformer": (
            torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
            (16, 128, 256),
        ),
    }


def _step(name: str, autocast: bool):
    torch.manual_seed(0)
    model, shape = _models()[name]
    model = model.cuda()
    x = torch.randn(*shape, device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(x).float().square().mean()
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    return step


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", ["mlp", "conv_net", "transformer"])
def test_gpu_flops_equal_flop_counter_modes(name, autocast):
    step = _step(name, autocast)
    with flop_counter.FlopCounterMode(display=False) as counter:
        step()
    expected = {f"aten::{op.__name__}": n for op, n in counter.get_flop_counts()["Global"].items()}
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    torch.cuda.synchronize()
    report = prof.report().to_dict()
    ours: dict[str, int] = {}
    for row in report["operators"]:
        if row["flops"]:
            ours[row["name"]] = ours.get(row["name"], 0) + row["flops"] // STEPS
    assert {op: ours.get(op) for op in expected} == expected
    f = report["flops"]
    assert f["matmul_flops_per_step"] == sum(expected.values())
    assert f["dtype"] == ("bf16" if autocast else f["dtype"])
    name_of_device = torch.cuda.get_device_name()
    if peaks.match_device(name_of_device).known:
        assert f["peak_tflops"] and not f["peak_estimate"]
        assert 0 < f["mfu_pct"] < 100 and 0 < f["hfu_pct"] < 100
        print(f"{name} {'bf16' if autocast else 'fp32'} on {name_of_device}: MFU {f['mfu_pct']:.1f}%")
    else:
        assert f["peak_tflops"] is None and "peak_tflops=" in f["note"]
