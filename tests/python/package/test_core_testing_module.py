"""The test suite's trace builders live in their own module, gpuprof._core_testing (tests/core_testing),
not in the product's _core: _core's Trace carries no builder, and the builders fill _core's own Trace
type (the events they add read back through _core as any imported event does)."""

from __future__ import annotations

from gpuprof import _core_testing as builders
from gpuprof._native import _core

BUILDERS = (
    "add_device",
    "add_kernel",
    "add_copy",
    "set_input_shapes",
    "set_op_args",
    "add_collective_info",
    "add_memory_sample",
    "add_gpu_sample",
)
# Bindings nothing in the package or the tests called: gone from the product, not moved.
REMOVED = ("add_storage", "add_host_memory_sample")


def test_the_product_module_has_no_builders():
    assert [n for n in BUILDERS + REMOVED if hasattr(_core.Trace, n) or hasattr(_core, n)] == []
    assert [n for n in BUILDERS if not callable(getattr(builders, n, None))] == []
    assert [n for n in REMOVED if hasattr(builders, n)] == []


def test_the_builders_fill_the_products_trace():
    # A 10 us kernel of grid 4x1x1 and a 1 MB pinned HtoD copy, then one NVML sample: each read
    # back through _core's own accessors.
    t = _core.Trace()
    builders.add_kernel(
        t, "gemm", 1_000, 10_000, device=0, stream=7, correlation=3, grid=[4, 1, 1], block=[128, 1, 1]
    )
    builders.add_copy(t, "Memcpy HtoD", 20_000, 5_000, bytes=1 << 20, copy_kind="HtoD", src_kind="pinned")
    builders.add_gpu_sample(t, 30_000, device=0, gpu_util_pct=75)
    kernel, copy = _core.trace_events(t)
    assert (kernel["kind"], kernel["name"], kernel["dur_ns"], kernel["tid"]) == ("kernel", "gemm", 10_000, 7)
    assert (kernel["grid"], kernel["block"], kernel["correlation"]) == ((4, 1, 1), (128, 1, 1), 3)
    assert (copy["kind"], copy["bytes"], copy["copy_kind"], copy["src_kind"]) == (
        "memcpy",
        1 << 20,
        "HtoD",
        "pinned",
    )
    assert [(s["ts_ns"], s["gpu_util_pct"], s["power_mw"]) for s in _core.gpu_samples(t)] == [
        (30_000, 75, -1)
    ]
