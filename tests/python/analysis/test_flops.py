"""FLOPs against torch's own counter (torch.utils.flop_counter.FlopCounterMode) on real models
trained in the test, live and from a torch.profiler trace of the same loop; MFU on this CPU with
its estimated peak; the peak a user passes; activation checkpointing's recomputed forwards.

The models: an MLP, a small conv net with grouped and transposed convolutions, and a transformer
encoder whose attention is scaled-dot-product attention; each step is forward + backward +
optimizer step. FlopCounterMode counts matrix products, convolutions and attention: those are the
ops both count, and their FLOPs per step must be equal, op by op."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")
from torch.utils import flop_counter  # noqa: E402

import gpuprof  # noqa: E402

STEPS = 3

# On the CPU, torch's scaled-dot-product attention runs aten::_scaled_dot_product_flash_attention_for_cpu,
# which FlopCounterMode's registry does not list (it lists the CUDA kernels). Registered here with
# torch's own attention formulas, so that both count it: gpuprof counts it with the same formula.
_aten = torch.ops.aten
TORCH_COUNTS_CPU_ATTENTION = {
    _aten._scaled_dot_product_flash_attention_for_cpu: flop_counter.sdpa_flop.__wrapped__,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_counter.sdpa_backward_flop.__wrapped__,
}


def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return model, torch.randn(32, 64)


def conv_net():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3, padding=2, dilation=2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 16 * 16, 10),
    )
    return model, torch.randn(2, 4, 16, 16)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True
    )
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8, 10),
    )
    return model, torch.randn(4, 8, 32)


MODELS = {"mlp": mlp, "conv_net": conv_net, "transformer": transformer}


def training_step(name):
    torch.manual_seed(0)
    model, x = MODELS[name]()
    y = torch.randint(0, 10, (x.shape[0],))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()  # Adam's state and the lazy paths made before anything is counted
    return step


def torch_counts(step) -> dict[str, int]:
    """FlopCounterMode's FLOPs of one step, by operator ("aten::mm": n)."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=TORCH_COUNTS_CPU_ATTENTION) as counter:
        step()
    return {f"aten::{op.__name__}": n for op, n in counter.get_flop_counts()["Global"].items()}


def flops_by_op(report, steps: int) -> dict[str, int]:
    """The report's FLOPs per step by operator name, for the operators FlopCounterMode counts."""
    out: dict[str, int] = {}
    for row in report["operators"]:
        if row["flops"]:
            out[row["name"]] = out.get(row["name"], 0) + row["flops"]
    return {k: v // steps for k, v in out.items()}


@pytest.mark.parametrize("name", list(MODELS))
def test_live_flops_per_step_equal_flop_counter_modes(name):
    """Live, without record_shapes: the hooks capture the matrix-class ops' shapes themselves, and
    every step's FLOPs are FlopCounterMode's, op by op."""
    step = training_step(name)
    expected = torch_counts(step)
    assert expected and sum(expected.values()) > 0
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    report = prof.report().to_dict()
    ours = flops_by_op(report, STEPS)
    assert {op: ours.get(op) for op in expected} == expected
    total = sum(expected.values())
    assert [s["flops"] for s in report["steps"]] == [total] * STEPS
    f = report["flops"]
    assert f["matmul_flops_per_step"] == total
    assert f["per_step_flops"] == total  # no elementwise FLOPs without record_shapes: said in the note
    assert "record_shapes=True" in f["note"]
    assert f["training"] is True


@pytest.mark.parametrize("name", list(MODELS))
def test_live_with_record_shapes_adds_the_other_class_apart(name):
    step = training_step(name)
    expected = torch_counts(step)
    with gpuprof.profile(record_shapes=True) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    report = prof.report().to_dict()
    ours = flops_by_op(report, STEPS)
    assert {op: ours.get(op) for op in expected} == expected
    f = report["flops"]
    assert f["matmul_flops_per_step"] == sum(expected.values())
    # relu, the loss, Adam's updates: counted, and reported apart
    assert f["other_flops_per_step"] > 0
    assert f["per_step_flops"] == f["matmul_flops_per_step"] + f["other_flops_per_step"]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_torch_profiler_trace_of_the_same_loop_gives_the_same_flops(name, tmp_path):
    step = training_step(name)
    expected = torch_counts(step)
    path = tmp_path / f"{name}.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=STEPS, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(1 + STEPS):
            step()
            prof.step()
    report = gpuprof.analyze(path).to_dict()
    assert len(report["steps"]) == STEPS
    ours = flops_by_op(report, STEPS)
    assert {op: ours.get(op) for op in expected} == expected
    assert report["flops"]["matmul_flops_per_step"] == sum(expected.values())
    # the trace path counts the other class too (Kineto records every op's Input Dims)
    assert report["flops"]["other_flops_per_step"] > 0


def test_mfu_on_this_cpu_is_a_share_of_an_estimated_peak():
    step = training_step("mlp")
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    f = prof.report().to_dict()["flops"]
    assert f["peak_estimate"] is True
    assert "Estimate" in f["peak_source"] and "flop per cycle" in f["peak_source"]
    assert 0 < f["mfu_pct"] < 100 and 0 < f["hfu_pct"] < 100
    # 3 x the forward's matrix FLOPs: the model's FLOPs of a training step
    assert f["model_flops_per_step"] == 3 * f["matmul_forward_flops_per_step"]
    assert "estimate" in f["note"]
    text = str(prof.report())
    assert "MFU" in text and "an estimate" in text


def test_a_peak_given_by_the_user_is_used_and_said():
    step = training_step("mlp")
    with gpuprof.profile(peak_tflops=0.5) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    report = prof.report().to_dict()
    f = report["flops"]
    assert f["peak_tflops"] == 0.5 and f["peak_estimate"] is False
    assert "peak_tflops=0.5" in f["peak_source"]
    step_s = report["average"]["total_us"] / 1e6
    assert f["mfu_pct"] == pytest.approx(100 * f["model_flops_per_step"] / step_s / 0.5e12, rel=1e-3)
    with pytest.raises(ValueError, match="peak_tflops must be a positive number"):
        gpuprof.profile(peak_tflops=0)


def test_recomputed_forwards_are_not_model_flops():
    """Activation checkpointing runs the checkpointed forward again inside the backward: HFU counts
    it (FlopCounterMode does too), MFU's model FLOPs do not."""
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    head = torch.nn.Linear(64, 10)
    x = torch.randn(16, 64, requires_grad=True)

    def step():
        h = torch.utils.checkpoint.checkpoint(inner, x, use_reentrant=False)
        head(h).sum().backward()

    step()
    expected = torch_counts(step)
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    f = prof.report().to_dict()["flops"]
    # The backward needs the second linear's input, the ReLU's output: torch recomputes the first
    # linear and the ReLU and stops there (non-reentrant checkpointing stops early once the saved
    # tensors it needs are back). One [16, 64] x [64, 64] product: 2 * 16 * 64 * 64 = 131,072.
    assert f["recompute_flops_per_step"] == 2 * 16 * 64 * 64
    assert f["per_step_flops"] == sum(expected.values())
    forward = 2 * (2 * 16 * 64 * 64) + 2 * 16 * 64 * 10  # the checkpointed linears and the head, once each
    assert f["matmul_forward_flops_per_step"] == forward
    assert f["model_flops_per_step"] == 3 * forward
    assert f["hfu_pct"] > f["mfu_pct"] * (f["per_step_flops"] / f["model_flops_per_step"]) * 0.99


def _one_mm_trace(device: dict, dims: list, dtype: str, kernel: str, step_us: int, kernel_us: int) -> dict:
    """A Kineto trace of one step (ProfilerStep#1, ``step_us`` long) holding one ``aten::mm`` of
    ``dims`` in ``dtype`` that launches one ``kernel`` of ``kernel_us`` on ``device``."""
    return {
        "deviceProperties": [device],
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": step_us,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 10,
                "dur": 100,
                "args": {"External id": 7, "Input Dims": dims, "Input type": [dtype, dtype]},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 20,
                "dur": 5,
                "args": {"correlation": 3, "External id": 7},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": 30,
                "dur": kernel_us,
                "args": {"device": 0, "stream": 7, "correlation": 3},
            },
        ],
    }


def test_an_unknown_device_says_how_to_pass_the_peak(tmp_path):
    """A trace from a GPU the peak table has no row for: no MFU, and the way to give the peak."""
    device = {"id": 0, "name": "Mystery Accelerator 9000", "numSms": 10}
    trace = _one_mm_trace(device, [[256, 256], [256, 256]], "float", "sgemm", step_us=1000, kernel_us=500)
    path = tmp_path / "mystery.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    f = gpuprof.analyze(path).to_dict()["flops"]
    assert f["per_step_flops"] == 2 * 256**3
    assert f["peak_tflops"] is None and f["mfu_pct"] is None
    assert (
        "Mystery Accelerator 9000" in f["note"]
        and "peak_tflops=" in f["note"]
        and "--peak-tflops" in f["note"]
    )
    # Given by hand: 2 * 256^3 FLOPs in a 1 ms step against 10 TFLOPS is 3.36%.
    f = gpuprof.analyze(path, peak_tflops=10.0).to_dict()["flops"]
    assert f["mfu_pct"] == pytest.approx(100 * 2 * 256**3 / 1e-3 / 10e12, rel=1e-3)


def test_a_known_gpu_takes_its_dense_peak_for_the_dtype_of_its_matrix_work(tmp_path):
    """An H100 SXM running a bf16 mm: the table's dense bf16 peak (989 TFLOPS, not the 1979 sparse
    figure), and MFU by hand: the step is forward only (no backward), so model FLOPs are 1 x."""
    m, k, n = 8192, 8192, 8192
    device = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "computeMajor": 9}
    dims = [[m, k], [k, n]]
    kernel = "sm90_xmma_gemm_bf16bf16_bf16f32"
    trace = _one_mm_trace(device, dims, "c10::BFloat16", kernel, step_us=2000, kernel_us=1500)
    path = tmp_path / "h100.json"
    path.write_text(json.dumps(trace))
    f = gpuprof.analyze(path).to_dict()["flops"]
    assert f["dtype"] == "bf16"
    assert f["peak_tflops"] == pytest.approx(989.4, rel=1e-3)
    assert "H100 SXM" in f["peak_source"] and f["peak_estimate"] is False
    assert f["training"] is False and f["model_flops_per_step"] == 2 * m * k * n
    # 2 * 8192^3 = 1.1e12 FLOPs in a 2 ms step: 549.8 TFLOP/s, 55.6% of 989.4
    assert f["tflops_per_s"] == pytest.approx(2 * m * k * n / 2e-3 / 1e12, rel=1e-6)
    assert f["mfu_pct"] == pytest.approx(100 * 2 * m * k * n / 2e-3 / 989.4e12, rel=1e-3)
    # on the roofline: intensity 2mnk / (2 bytes * 3 n^2) = 2730.7 FLOP/byte, far above the H100's
    # ridge (989.4 TFLOP/s / 3.35 TB/s = 295): compute-bound
    report = gpuprof.analyze(path).to_dict()
    row = report["roofline"][0]
    assert row["intensity_flop_per_byte"] == pytest.approx(2 * m * k * n / (2 * 3 * m * n), rel=1e-6)
    assert row["bound"] == "compute" and row["on_device"] is True
    assert report["flops"]["compute_bound_pct"] == 100.0


def test_a_live_spans_chrome_trace_keeps_its_flops(tmp_path):
    """The Chrome trace gpuprof writes carries each counted op's shapes, types and scalar inputs as
    Kineto writes them, so the trace read back counts the same FLOPs (convolutions need their
    stride and padding: Concrete Inputs)."""
    step = training_step("conv_net")
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    live = prof.report()
    path = tmp_path / "span.json.gz"
    prof.export_chrome_trace(str(path))
    again = gpuprof.analyze(path).to_dict()
    assert [s["flops"] for s in again["steps"]] == [s["flops"] for s in live.to_dict()["steps"]]
    assert again["flops"]["per_step_flops"] == live.to_dict()["flops"]["per_step_flops"] > 0


def test_every_rule_is_documented():
    from pathlib import Path

    from gpuprof._native import _core

    doc = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = doc.split("## FLOPs", 1)[1].split("## MFU and HFU", 1)[0]
    missing = [name for name, *_ in _core.flop_rules() if f"`{name}`" not in section]
    assert not missing, f"docs/metrics.md's FLOPs section does not list {missing}"


def test_autocast_counts_the_cast_call_in_its_dtype():
    """Under autocast, aten::addmm casts its inputs and calls aten::addmm again: the inner call's
    inputs are the ones captured, in bf16; FLOPs stay FlopCounterMode's and the dtype is bf16."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    x = torch.randn(32, 64)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().sum()
        loss.backward()

    step()
    expected = torch_counts(step)
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    f = prof.report().to_dict()["flops"]
    assert f["matmul_flops_per_step"] == sum(expected.values())
    assert f["dtype"] == "bf16" and set(f["matmul_flops_by_dtype"]) == {"bf16"}
    assert not any(op in f["uncounted_by_op"] for op in ("aten::addmm", "aten::mm"))


def test_a_compiled_model_counts_its_out_variant_products():
    """torch.compile's graphs call aten::mm.out and aten::addmm.out (extern kernels): the capture
    covers every overload, so the compiled step's FLOPs are FlopCounterMode's."""
    torch.manual_seed(0)
    model = torch.compile(
        torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    )
    x = torch.randn(8, 16)

    def step():
        model(x).sum().backward()

    step()
    step()
    expected = torch_counts(step)
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    f = prof.report().to_dict()["flops"]
    assert f["matmul_flops_per_step"] == sum(expected.values()) > 0


def test_module_flops_equal_flop_counter_modes_per_module():
    """modules[].flops on a residual network (tests/python/_loops.py: convolutions with and without a
    stride, a 1x1 downsample convolution beside a block's main branch, a linear head) trained live
    with the module view on: every module's FLOPs per step, forward and backward, its submodules'
    included, are FlopCounterMode's count for that module (FlopCounterMode names the model by its
    class, "TinyResNet.layer1.0.conv1"; gpuprof by its path, "layer1.0.conv1", and "" for the model).

    One known difference, by design: FlopCounterMode places backward work by time (a module is
    "open" from the gradient of its output to that of its input), gpuprof by the autograd node that
    ran it. The downsample branch's input is the block's input, whose gradient waits for the main
    branch too, so FlopCounterMode's downsample also holds the main branch's convolution backwards
    (conv1 and conv2 of layer2.0); gpuprof's holds its own 1x1 convolution only."""
    from _loops import make_tiny_resnet

    torch.manual_seed(0)
    model = make_tiny_resnet(width=8)
    x = torch.randn(4, 3, 16, 16)
    y = torch.randint(0, 10, (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    with flop_counter.FlopCounterMode(display=False) as counter:
        step()
    root = type(model).__name__
    by_module = counter.get_flop_counts()
    expected = {}
    for name, counts in by_module.items():
        if name == "Global" or not sum(counts.values()):
            continue
        path = "" if name == root else name.removeprefix(root + ".")
        expected[path] = sum(counts.values())
    # every convolution, the head, the blocks, the stages and the model
    assert len(expected) >= 15 and "fc" in expected
    # the main branch's convolution backwards, which FlopCounterMode also counts in the downsample
    conv_backward = _aten.convolution_backward
    main_branch_backward = sum(
        by_module[f"{root}.layer2.0.{conv}"][conv_backward] for conv in ("conv1", "conv2")
    )
    # by hand: the 1x1 convolution 8 -> 16 channels, stride 2, [4, 8, 16, 16] -> [4, 16, 8, 8]:
    # 2 x 4 x 16 x 8 (C_in) x 8 x 8 forward, twice that backward (input and weight gradients)
    downsample = 3 * (2 * 4 * 16 * 8 * 8 * 8)
    for path in ("layer2.0.downsample", "layer2.0.downsample.0"):
        assert expected[path] - main_branch_backward == downsample
        expected[path] = downsample

    with gpuprof.profile(with_modules=True) as prof:
        for _ in range(STEPS):
            step()
            prof.step()
    report = prof.report().to_dict()
    rows = {r["path"]: r for r in report["modules"]}
    ours = {path: rows[path]["flops"] // STEPS for path in expected if path in rows}
    assert ours == expected
    assert all(rows[path]["flops"] % STEPS == 0 for path in expected)
    # the model holds every counted call of the step (the loss and SGD's update count none)
    assert rows[""]["flops"] == sum(s["flops"] for s in report["steps"]) == STEPS * expected[""]
    # modules without counted work (a ReLU, a batch norm without record_shapes) have 0, not null
    assert rows["relu"]["flops"] == 0 and rows["bn1"]["flops"] == 0
    # the module tree shows them in the terminal, Markdown and HTML
    shown = prof.report()
    assert "FLOPs" in shown.to_text().split("Modules", 1)[1]
    assert "| FLOPs |" in shown.to_markdown().split("### Modules", 1)[1]
    assert '<span class="mod-num">FLOPs</span>' in shown.to_html()


def _one_product_step(flops: int) -> dict:
    """The native pass's FLOPs of one step made of one fp32 product (flops_section's input)."""
    keys = ("flops", "matmul_flops", "matmul_forward_flops", "forward_flops")
    step = {k: flops for k in keys}
    step.update(
        step=1,
        other_flops=0,
        backward_flops=0,
        recompute_flops=0,
        other_calls=0,
        uncounted_calls=0,
        uncounted_matmul_calls=0,
        backward_ran=False,
        matmul_flops_by_dtype={"fp32": flops},
    )
    return {
        "steps": [step],
        "roofline": [],
        "counted_calls": 1,
        "uncounted_calls": 0,
        "uncounted_by_op": {},
        "trace_flops_checked": 0,
        "trace_flops_differ": 0,
    }


def test_an_estimated_peak_below_the_achieved_rate_is_said():
    """This CPU's estimate takes the clock the machine reports, which a virtual machine gives as its
    base clock: a GEMM loop here reached 103% of it (docs/performance.md). A live step of one
    [4096, 4096] x [4096, 4096] product (2 x 4096^3 FLOPs) in 1 ms is 137 TFLOP/s, above any CPU's
    estimate: the note says the estimate is low and how to give the peak; 1 us of work is not."""
    from gpuprof.analysis.flops import flops_section

    steps = [{"step": 1, "total_us": 1000.0}]
    fast, _ = flops_section(_one_product_step(2 * 4096**3), steps, [], device_names=[], live=True)
    assert fast["peak_estimate"] is True and fast["hfu_pct"] > 100.0
    assert "HFU is above 100%" in fast["note"] and "gpuprof.profile(peak_tflops=N)" in fast["note"]
    slow, _ = flops_section(_one_product_step(2 * 8**3), steps, [], device_names=[], live=True)
    assert slow["hfu_pct"] < 100.0 and "above 100%" not in slow["note"]


def test_the_docs_say_where_flops_differ_from_flop_counter_mode():
    # The exception is real: FlopCounterMode, as torch ships it, counts nothing for a CPU attention
    # step, while gpuprof counts 2 x 2 b h s_q s_k d for its forward.
    from pathlib import Path

    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    with flop_counter.FlopCounterMode(display=False) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 0
    with gpuprof.profile() as prof:
        for _ in range(STEPS):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
            prof.step()
    ours = flops_by_op(prof.report().to_dict(), STEPS)
    assert ours["aten::_scaled_dot_product_flash_attention_for_cpu"] == 2 * 2 * b * h * s * s * d
    # ... and both places that claim equality say so, naming the kernel.
    root = Path(__file__).resolve().parents[3]
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    claim = readme.split("FLOPs with the rules of torch's FlopCounterMode", 1)[1][:400]
    assert "except" in claim and "`_scaled_dot_product_flash_attention_for_cpu`" in claim
    metrics = " ".join((root / "docs" / "metrics.md").read_text(encoding="utf-8").split())
    claim = metrics.split("that the FLOPs per step equal FlopCounterMode's", 1)[1][:400]
    assert "exception" in claim and "`_scaled_dot_product_flash_attention_for_cpu`" in claim
