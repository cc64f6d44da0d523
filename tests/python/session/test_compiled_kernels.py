"""The kernels torch.compile's Inductor generates, named with the aten operators and source lines
they came from: a real model compiled with Inductor's C++ backend under the live profiler, with and
without ``compiled_kernels=True``, and the provenance readers on hand-built inputs."""

import inspect

import pytest

import gpuprof
from gpuprof.analysis.compiled import compiled_kernel_rows
from gpuprof.collect.inductor import kernel_rows, parse_post_grad_graph

torch = pytest.importorskip("torch")

STEPS = 3


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        return torch.relu(self.norm(self.lin(x))).sin() * 2


FORWARD_LINE = inspect.getsourcelines(Block.forward)[1] + 1


def _settings():
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor

    return (
        inductor.cpp.enable_kernel_profile,
        inductor.trace.provenance_tracking_level,
        inductor.fx_graph_cache,
        functorch.enable_autograd_cache,
    )


def _run(compiled_kernels):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(Block())
    x = torch.randn(16, 32)
    with gpuprof.profile(compiled_kernels=compiled_kernels, gpu=False) as prof:
        for _ in range(STEPS):
            model(x).sum().backward()
            prof.step()
    return prof.report()


@pytest.fixture(scope="module")
def with_provenance():
    before = _settings()
    report = _run(True)
    return before, report


def test_every_generated_kernel_is_timed_and_named_with_its_operators_and_line(with_provenance):
    before, report = with_provenance
    rows = {r["kernel"]: r for r in report.data["compiled"]["compiled_kernels"]}
    # Forward: one fused kernel for layer norm, relu, sin and the multiply (the linear layer's
    # addmm stays aten's); backward: their gradients, and the bias gradient's sum.
    forward = next(r for k, r in rows.items() if k.startswith("cpp_fused_") and "sin" in k)
    assert forward["backend"] == "cpp" and forward["time_on"] == "host"
    assert forward["calls"] == STEPS  # one call per step, compiled in the first
    assert forward["total_us"] > 0
    assert forward["fused"] == forward["kernel"][len("cpp_fused_") : forward["kernel"].rindex("_")]
    # Layer norm decomposes into var_mean, rsqrt...; the order is the post-grad graph's
    for op in ("aten.var_mean", "aten.rsqrt", "aten.relu", "aten.sin", "aten.mul"):
        assert op in forward["ops"], forward["ops"]
    assert forward["ops"].index("aten.relu") < forward["ops"].index("aten.sin")
    assert forward["sources"] == [f"{__file__}:{FORWARD_LINE}"]
    backward = [r for r in rows.values() if "cos" in r["kernel"]]
    assert backward and "aten.cos" in backward[0]["ops"]  # sin's gradient
    for row in rows.values():  # every kernel Inductor generated has its operators
        assert row["ops"], row
        assert row["calls"] == STEPS
    # Inductor's settings are back as the session found them
    assert _settings() == before
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    jsonschema.validate(report.to_dict(), SCHEMA)


def test_the_reports_show_the_kernels_with_their_operators(with_provenance):
    _, report = with_provenance
    rows = report.data["compiled"]["compiled_kernels"]
    text = report.to_text(width=320)
    markdown = report.to_markdown()
    html = report.to_html()
    for out in (text, markdown.replace("\\_", "_"), html):
        assert "cpp_fused_sum_1" in out  # the shortest name: never elided
        assert "aten.sin" in out and "aten.sum" in out
        assert f"test_compiled_kernels.py:{FORWARD_LINE}" in out
    assert rows[0]["kernel"] in html


def test_without_the_opt_in_nothing_changes_and_no_kernel_is_claimed():
    before = _settings()
    report = _run(False)
    assert _settings() == before
    compiled = report.data["compiled"]
    # Inductor's C++ kernels record nothing without its kernel profiling: their time is the
    # compiled graph's own, and no row claims to know them.
    assert "compiled_kernels" not in compiled
    assert compiled["region_calls"] == STEPS


def test_hand_built_post_grad_graph_and_provenance():
    graph = "\n".join(
        [
            "class GraphModule(torch.nn.Module):",
            '    def forward(self, primals_1: "f32[8, 16][16, 1]cpu"):',
            "        # File: /m.py:10 in forward, code: y = self.lin(x)",
            '        addmm: "f32[8, 16][16, 1]cpu" = torch.ops.aten.addmm.default(primals_2, primals_1, t)',
            "        # File: /m.py:11 in forward, code: return y.relu().sin()",
            '        relu: "f32[8, 16][16, 1]cpu" = torch.ops.aten.relu.default(addmm)',
            '        sin: "f32[8, 16][16, 1]cpu" = torch.ops.aten.sin.default(relu)',
            '        mul: "f32[8, 16][16, 1]cpu" = torch.ops.aten.mul.Tensor(sin, 2)',
            '        mul_1: "f32[8, 16][16, 1]cpu" = torch.ops.aten.mul.Tensor(mul, 3)',
        ]
    )
    nodes = parse_post_grad_graph(graph)
    assert nodes["addmm"] == ("aten.addmm", "/m.py:10")
    assert nodes["mul_1"] == ("aten.mul", "/m.py:11")
    # Inductor lists a kernel's nodes in fusion order; the row keeps the graph's order, each
    # operator once; its stack traces' innermost frame first, then the nodes' lines.
    rows = kernel_rows(
        nodes,
        {"cpp_fused_mul_relu_sin_0:2": ["mul_1", "sin", "relu", "mul"], "extern_kernels.addmm:1": ["addmm"]},
        {"cpp_fused_mul_relu_sin_0:2": ['  File "/lib.py", line 3, in f\n  File "/m.py", line 12, in g\n']},
    )
    assert rows == [
        {
            "kernel": "cpp_fused_mul_relu_sin_0",
            "ops": ["aten.relu", "aten.sin", "aten.mul"],
            "sources": ["/m.py:12", "/m.py:11"],
        },
        {"kernel": "extern_kernels.addmm", "ops": ["aten.addmm"], "sources": ["/m.py:10"]},
    ]


def test_hand_built_rows_merge_graph_prefixes_and_prefer_device_time():
    operators = [
        {"name": "graph_0_cpp_fused_sum_1", "calls": 2, "host_total_us": 3.0},
        {"name": "graph_1_cpp_fused_sum_1", "calls": 1, "host_total_us": 1.5},  # another graph's
        {"name": "triton_poi_fused_add_cos_0", "calls": 4, "host_total_us": 40.0},  # its launch
        {"name": "aten::mm", "calls": 4, "host_total_us": 90.0},  # not generated
    ]
    kernels = [{"name": "triton_poi_fused_add_cos_0", "calls": 4, "total_us": 8.0}]
    provenance = [
        {"kernel": "cpp_fused_sum_1", "ops": ["aten.sum"], "sources": ["/m.py:4"]},
        {"kernel": "extern_kernels.mm", "ops": ["aten.mm"], "sources": ["/m.py:3"]},
    ]
    rows = compiled_kernel_rows(operators, kernels, provenance)
    assert rows == [
        # the GPU kernel's device time, not its host launch's 40 us
        {
            "kernel": "triton_poi_fused_add_cos_0",
            "backend": "triton",
            "time_on": "device",
            "calls": 4,
            "total_us": 8.0,
            "fused": "add_cos",
            "ops": None,
            "sources": None,
        },
        {
            "kernel": "cpp_fused_sum_1",
            "backend": "cpp",
            "time_on": "host",
            "calls": 3,
            "total_us": 4.5,
            "fused": "sum",
            "ops": ["aten.sum"],
            "sources": ["/m.py:4"],
        },
    ]


def test_names_ops_and_paths_from_outside_are_inert_in_every_format(with_provenance):
    from gpuprof.report.build import build_report

    _, live = with_provenance
    data = live.to_dict()
    row = data["compiled"]["compiled_kernels"][0]
    row["kernel"] = "cpp_fused_\x1b[2J<script>alert(1)</script>_0"
    row["ops"] = ["aten.\x1b]0;pwned\x07mul", "aten.a|b"]
    row["sources"] = ["/m/\u202egpj.exe:3"]
    report = build_report(None, analysed=data)
    for out in (report.to_text(width=320), report.to_markdown()):  # what a terminal would act on
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    html = report.to_html()  # a browser: the markup is text
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "aten.a|b" not in report.to_markdown()  # a column break, escaped


def _fallbacks(x):
    y = torch.linalg.inv(x @ x.T + torch.eye(x.shape[0]))  # no Inductor lowering: aten's kernel
    return torch.kthvalue(y.sin(), 2, dim=1).values.sum() + x.mm(x).cos().sum()


FALLBACK_LINE = inspect.getsourcelines(_fallbacks)[1] + 1


def test_operators_inductor_leaves_to_eager_kernels_are_named_with_their_lines():
    torch._dynamo.reset()
    compiled = torch.compile(_fallbacks)
    x = torch.randn(32, 32)
    # The first step compiles (not recorded); the three recorded steps run the graph.
    with gpuprof.profile(
        compiled_kernels=True, gpu=False, schedule=gpuprof.schedule(wait=1, warmup=0, active=3)
    ) as p:
        for _ in range(4):
            compiled(x)
            p.step()
    rows = {r["op"]: r for r in p.report().data["compiled"]["fallbacks"]}
    assert rows["aten::linalg_inv_ex"]["sources"] == [f"{__file__}:{FALLBACK_LINE}"]
    assert rows["aten::kthvalue"]["sources"] == [f"{__file__}:{FALLBACK_LINE + 1}"]
    # the same calls each step (aten::kthvalue runs its out= overload, also named aten::kthvalue)
    assert rows["aten::kthvalue"]["calls"] % 3 == 0 and rows["aten::kthvalue"]["host_total_us"] > 0
    # the matrix product Inductor hands to a library on purpose is not a fallback
    assert "aten::mm" not in rows and "aten::addmm" not in rows
    jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema")
    from gpuprof.report.json_schema import SCHEMA

    jsonschema.validate(p.report().to_dict(), SCHEMA)


def test_hand_built_output_code_names_each_triton_kernels_operators():
    """Inductor's output code for a GPU: the comment above each Triton kernel's definition names its
    aten operators; a call's comment inside ``call`` (indented) is not a definition's."""
    from gpuprof.collect.inductor import output_code_rows

    code = "\n".join(
        [
            "# kernel path: /tmp/torchinductor/ab/cab.py",
            "# Topologically Sorted Source Nodes: [relu, sin], Original ATen: [aten.relu, aten.sin]",
            "# Source node to ATen node mapping:",
            "#   relu => relu",
            "triton_poi_fused_relu_sin_0 = async_compile.triton('triton_poi_fused_relu_sin_0', '''",
            "@triton.jit",
            "def triton_poi_fused_relu_sin_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):",
            "''', device_str='cuda')",
            "",
            "cpp_fused_sum_1 = async_compile.cpp_pybinding(['float*'], '''",
            "''')",
            "",
            "class Runner:",
            "    def call(self, args):",
            "        # Topologically Sorted Source Nodes: [mm], Original ATen: [aten.mm]",
            "        extern_kernels.mm(arg0_1, arg0_1, out=buf0)",
        ]
    )
    assert output_code_rows(code) == [
        {"kernel": "triton_poi_fused_relu_sin_0", "ops": ["aten.relu", "aten.sin"], "sources": None}
    ]


def test_the_assistant_pages_the_compiled_lists(with_provenance):
    from gpuprof.agents.answers import top

    _, report = with_provenance
    rows = report.data["compiled"]["compiled_kernels"]
    page = top(report, "compiled", None, limit=1, offset=1)["compiled"]
    assert page["compiled_kernels"] == rows[1:2] and page["compiled_kernels_total"] == len(rows)
    assert page["graph_breaks"] == [] and page["graph_breaks_total"] == 0
