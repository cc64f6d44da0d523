"""A hand-built GPU step for the report tests (no GPU needed): one step [0, 1 ms) on GPU 0 (80 SMs)
with a 400 us kernel of 160 blocks (2 per SM, SM share 1) and Kineto's 50 % occupancy, launched by
aten::conv2d; a 100 us pinned HtoD copy of 1 MB; the allocator at 4096 allocated, 8192 reserved."""

from gpuprof import _core_testing as builders
from gpuprof._native import _core


def conv_step_trace():
    t = _core.Trace()
    d = _core.DeviceProps()
    d.id, d.name, d.compute_major, d.compute_minor, d.num_sms = 0, "Test V100", 7, 0, 80
    d.total_global_mem = 32 << 30
    builders.add_device(t, d)
    t.add_event("step", "ProfilerStep#0", 0, 1_000_000)
    t.add_event("host_op", "aten::conv2d", 10_000, 100_000, external_id=5)
    t.add_event("runtime", "cudaLaunchKernel", 20_000, 5_000, correlation=9, external_id=5)
    t.add_event("runtime", "cudaMemcpyAsync", 200_000, 5_000, correlation=10)
    builders.add_kernel(
        t,
        "void cudnn::cnn::conv_kernel",
        100_000,
        400_000,
        device=0,
        correlation=9,
        grid=[160, 1, 1],
        block=[256, 1, 1],
        registers_per_thread=64,
        shared_mem_bytes=0,
        est_occupancy_pct=50.0,
    )
    builders.add_copy(
        t,
        "Memcpy HtoD (Pinned -> Device)",
        600_000,
        100_000,
        bytes=1_000_000,
        copy_kind="HtoD",
        src_kind="pinned",
        dst_kind="device",
        device=0,
        correlation=10,
    )
    builders.add_memory_sample(t, 50_000, 4096, 8192, device=0, bytes_delta=4096, addr=0x7F0000000000)
    return t
