"""The FLOPs, modules and lines of the kernels torch.compile's Inductor generates: a residual CNN and
a small transformer block compiled with Inductor's C++ backend under the live profiler
(``compiled_kernels=True``), their FLOPs per step against torch's FlopCounterMode on the same models
run eagerly, and the provenance reader's rules on hand-built fx graphs."""

import pytest

import gpuprof
from gpuprof.analysis.compiled_flops import (
    add_kernel_facts,
    compiled_modules,
    kernel_facts,
    unknown_flops_note,
)
from gpuprof.collect.inductor_graph import common_module, graph_kernel_facts, module_path
from gpuprof.report.sections import compiled_tables

torch = pytest.importorskip("torch")
flop_counter = pytest.importorskip("torch.utils.flop_counter")

STEPS = 3
_aten = torch.ops.aten
# FlopCounterMode lists the CUDA attention kernels, not the CPU one torch runs here: registered with
# torch's own formulas (as tests/python/analysis/test_flops.py does), gpuprof's rule is the same.
CPU_ATTENTION = {
    _aten._scaled_dot_product_flash_attention_for_cpu: flop_counter.sdpa_flop.__wrapped__,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_counter.sdpa_backward_flop.__wrapped__,
}


class Residual(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResNet(torch.nn.Module):
    """Batch 1 and a 16 x 10 head: Inductor decomposes the head's addmm (one row times a matrix of
    at most 16 x 16) and its weight gradient (an outer product) into its own C++ loops, so these
    two products are no aten call and only the generated kernels' FLOPs count them."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = torch.nn.Sequential(Residual(16), Residual(16))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class TransformerBlock(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def _eager_flops(model, x) -> int:
    with flop_counter.FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        model(x).sum().backward()
    model.zero_grad()
    return counter.get_total_flops()


def _compiled_report(model, x, **options):
    torch._dynamo.reset()
    compiled = torch.compile(model)
    with gpuprof.profile(compiled_kernels=True, gpu=False, **options) as prof:
        for _ in range(STEPS):
            compiled(x).sum().backward()
            prof.step()
    return prof.report()


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    model, x = ResNet(), torch.randn(1, 3, 8, 8)
    eager = _eager_flops(model, x)
    report = _compiled_report(model, x, with_modules=True)
    return eager, report.data, report


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    model, x = TransformerBlock(), torch.randn(2, 8, 32)
    eager = _eager_flops(model, x)
    report = _compiled_report(model, x)
    return eager, report.data, report


@pytest.mark.parametrize("case", ["resnet", "transformer"])
def test_compiled_flops_per_step_equal_flopcountermode_on_the_eager_model(case, request):
    eager, data, _ = request.getfixturevalue(case)
    flops = data["flops"]
    # Without recorded shapes only the matrix class counts, as for an eager span: exactly
    # FlopCounterMode's count, in every step.
    assert flops["per_step_flops"] == flops["matmul_flops_per_step"] == eager
    assert [s["flops"] for s in data["steps"]] == [eager] * len(data["steps"])
    assert flops["model_flops_per_step"] is not None and flops["mfu_pct"] is not None


def test_a_product_inductor_generates_counts_at_its_kernel_only(resnet):
    eager, data, _ = resnet
    rows = data["compiled"]["compiled_kernels"]
    # The head's product (2 x 16 x 10) and its weight gradient (2 x 10 x 16): in generated kernels.
    generated = sum(r["matmul_flops"] * r["calls"] for r in rows) // STEPS
    assert generated == 2 * 16 * 10 + 2 * 10 * 16
    forward = [r for r in rows if r["module"] == "head" and r["matmul_flops"] == 2 * 16 * 10]
    assert forward, [(r["kernel"], r["module"], r["flops"]) for r in rows]
    # The convolutions stay aten's, counted at their calls: the rest of the count.
    convs = sum(r["flops"] for r in data["operators"] if r["name"].startswith("aten::convolution"))
    assert convs // STEPS + generated + 2 * 10 * 16 == eager  # the head's input gradient is aten's mm
    # The head's generated product is on the roofline, with the bytes its kernel moves.
    heads = [r for r in data["roofline"] if "cpp_fused" in r["name"] and r["flop_class"] == "matmul"]
    assert heads and all(r["bytes"] > 0 and r["time_us"] > 0 for r in heads)
    # The kernels' operator rows carry their FLOPs, so the operator column adds up to the span's.
    assert sum(r["flops"] for r in data["operators"]) == data["flops"]["per_step_flops"] * STEPS


@pytest.mark.parametrize("case", ["resnet", "transformer"])
def test_compiled_time_is_attributed_to_operators_and_modules(case, request):
    _, data, _ = request.getfixturevalue(case)
    rows = data["compiled"]["compiled_kernels"]
    total = sum(r["total_us"] for r in rows)
    named = sum(r["total_us"] for r in rows if r["ops"] and r["module"] is not None)
    assert total > 0 and named >= 0.9 * total, [(r["kernel"], r["module"], r["total_us"]) for r in rows]
    assert all(r["source"] is None or r["source"].startswith(__file__) for r in rows)
    modules = data["compiled"]["modules"]
    assert sum(m["total_us"] for m in modules) == pytest.approx(named, abs=1e-3 * len(modules))
    assert sum(m["flops"] for m in modules) == sum(
        r["flops"] * r["calls"] for r in rows if r["module"] is not None
    )
    # The reports' tables: the kernels with their module and FLOPs, and the time by module.
    tables = {key: table for key, _, table in compiled_tables(data)}
    assert all("module" in r and "flops" in r for r in tables["compiled_kernels"])
    assert [r["total_us"] for r in tables["compiled_modules"]] == [m["total_us"] for m in modules]


def test_the_module_section_says_where_the_compiled_time_went(resnet):
    _, data, report = resnet
    # The module view (with_modules=True) has one row for the compiled model: hooks do not fire
    # inside compiled code. The section says so and names the modules inductor's kernels came from.
    assert [r["type"] for r in data["modules"]] == ["OptimizedModule"]
    heaviest = data["compiled"]["modules"][0]
    name = heaviest["path"] or "(the compiled root)"
    said = f"{name} {heaviest['total_us'] / 1000:.3f} ms"
    for text in (str(report), report.to_markdown().replace("\\", ""), report.to_html()):
        text = " ".join(text.split())  # the terminal wraps its lines
        assert "the kernels inductor generated there ran, by the module each came from" in text
        assert said in text


def test_module_path_reads_dynamo_names():
    assert module_path(("L['self'].blocks[0].conv1", object)) == ["blocks", "0", "conv1"]
    assert module_path(("L['model']._modules['layer1'].bn", object)) == ["layer1", "bn"]
    assert module_path("self.head") == ["head"]
    assert common_module([["blocks", "0", "bn1"], ["blocks", "0"], None]) == "blocks.0"
    assert common_module([["blocks", "0"], ["head"]]) == ""
    assert common_module([None]) is None


def _graph():
    """A post-grad graph by hand: mm that aten runs (listed under extern_kernels.mm and in the kernel
    feeding it), a decomposed addmm (a multiply of two tensors and a sum), and an elementwise add."""
    g = torch.fx.Graph()
    a, w, v = g.placeholder("a"), g.placeholder("w"), g.placeholder("v")
    a.meta["val"], w.meta["val"], v.meta["val"] = torch.empty(4, 8), torch.empty(8, 6), torch.empty(1, 8)
    mm = g.call_function(_aten.mm.default, (a, w), name="mm")
    mm.meta.update(val=torch.empty(4, 6), nn_module_stack={"x": ("L['self'].enc.lin", object)})
    mul = g.call_function(_aten.mul.Tensor, (v, a), name="mul")  # [1, 8] x [4, 8] -> [4, 8]
    mul.meta.update(val=torch.empty(4, 8), original_aten=_aten.addmm.default)
    mul.meta["nn_module_stack"] = {"x": ("L['self'].head", object)}
    total = g.call_function(_aten.sum.dim_IntList, (mul, [0]), name="sum_1")
    total.meta.update(val=torch.empty(8), original_aten=_aten.addmm.default)
    add = g.call_function(_aten.add.Tensor, (mm, mm), name="add")
    add.meta.update(val=torch.empty(4, 6), stack_trace='  File "/m.py", line 7, in forward\n    y = x + x\n')
    add.meta["nn_module_stack"] = {"x": ("L['self'].enc", object)}
    return {n.name: n for n in g.nodes}


def test_graph_kernel_facts_count_each_flop_once():
    from gpuprof._native import _core

    nodes = _graph()
    kernel_nodes = {
        "cpp_fused_mm_0:1": ["a", "mm"],  # the kernel that feeds aten's mm lists it too
        "extern_kernels.mm:2": ["mm"],
        "cpp_fused_addmm_1:3": ["mul", "sum_1"],
        "cpp_fused_add_2:4": ["add", "mul"],  # mul again: counted in the first kernel only
    }
    rows = graph_kernel_facts(nodes, kernel_nodes, graph_id=3, backward=False, op_flops=_core.op_flops)
    by = {r["kernel"]: r for r in rows}
    assert set(by) == {"cpp_fused_mm_0", "cpp_fused_addmm_1", "cpp_fused_add_2"}
    assert by["cpp_fused_mm_0"]["flops"] == 0  # aten's mm counts at its own call
    assert (
        by["cpp_fused_addmm_1"]["matmul_flops"] == 2 * 4 * 8 and by["cpp_fused_addmm_1"]["other_flops"] == 0
    )
    assert by["cpp_fused_addmm_1"]["matmul_dtype"] == "fp32" and by["cpp_fused_addmm_1"]["module"] == "head"
    # Its bytes: v [1, 8] and a [4, 8] read, the sum [8] left for the graph (fp32): 4 x (8 + 32 + 8).
    assert by["cpp_fused_addmm_1"]["bytes"] == 4 * (8 + 32 + 8)
    assert by["cpp_fused_add_2"]["other_flops"] == 4 * 6 and by["cpp_fused_add_2"]["matmul_flops"] == 0
    assert by["cpp_fused_add_2"]["module"] == "" and by["cpp_fused_add_2"]["source"] == "/m.py:7"
    assert by["cpp_fused_add_2"]["event"] == "graph_3_cpp_fused_add_2"


def test_kernel_facts_average_two_graphs_that_name_a_kernel_alike():
    prov = [
        {
            "kernel": "k",
            "event": "graph_0_k",
            "flops": 10,
            "matmul_flops": 10,
            "other_flops": 0,
            "backward": False,
        },
        {
            "kernel": "k",
            "event": "graph_0_k",
            "flops": 30,
            "matmul_flops": 20,
            "other_flops": 10,
            "backward": True,
        },
        {"kernel": "j", "ops": ["aten.add"]},  # no facts (compiled before the session)
    ]
    facts = kernel_facts(prov)
    assert (
        list(facts) == ["graph_0_k"]
        and facts["graph_0_k"]["flops"] == 20
        and not facts["graph_0_k"]["backward"]
    )
    rows = [
        {"kernel": "a", "module": "enc", "calls": 2, "total_us": 5.0, "flops": 7},
        {"kernel": "b", "module": "enc", "calls": 1, "total_us": 1.0, "flops": 0},
        {"kernel": "c", "module": None, "calls": 9, "total_us": 9.0, "flops": None},
    ]
    assert compiled_modules(rows) == [{"path": "enc", "kernels": 2, "calls": 3, "total_us": 6.0, "flops": 14}]


def test_symbolic_sizes_leave_a_kernels_flops_unknown_and_add_no_guard():
    """A graph compiled for dynamic shapes: its sizes are SymInts, whose calls differ in size, so no
    FLOPs per call hold. Reading them must not specialise them (int() on a SymInt adds a guard)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    from gpuprof._native import _core

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    x.meta["val"] = mode.from_tensor(torch.empty(4, 8), symbolic_context=dynamic)
    w.meta["val"] = torch.empty(8, 8)
    mul = g.call_function(_aten.mul.Tensor, (x, x), name="mul")
    mul.meta["val"] = x.meta["val"]
    mm = g.call_function(_aten.mm.default, (w, w), name="mm")  # a template's product, static
    mm.meta["val"] = torch.empty(8, 8)
    nodes = {n.name: n for n in g.nodes}
    rows = graph_kernel_facts(
        nodes, {"cpp_fused_mm_mul_0:1": ["mul", "mm"]}, graph_id=0, backward=False, op_flops=_core.op_flops
    )
    assert (rows[0]["flops"], rows[0]["matmul_flops"], rows[0]["other_flops"]) == (None, 2 * 8 * 8 * 8, None)
    assert not env.guards  # nothing specialised
    facts = kernel_facts(rows)
    assert facts["graph_0_cpp_fused_mm_mul_0"]["unknown"] == ["flops", "other_flops"]
    # The known product still counts; the row says which count is unknown.
    out = [{"kernel": "cpp_fused_mm_mul_0", "calls": 2, "total_us": 1.0}]
    add_kernel_facts(out, facts, [{"name": "graph_0_cpp_fused_mm_mul_0", "calls": 2}], [])
    assert (out[0]["flops"], out[0]["matmul_flops"]) == (None, 1024)
    assert unknown_flops_note(out, facts).startswith(
        "the FLOPs of 1 of inductor's generated kernels (2 calls)"
    )
