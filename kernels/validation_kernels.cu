// Kernels with known behaviour, used to validate gpuprof's GPU numbers on a real device:
// a spin of a requested length, the polynomial roofline kernel, host-to-device copies from pageable
// and pinned memory, and an FP32 SIMT GEMM beside a tensor-core (WMMA) GEMM.
// Every entry point times itself with CUDA events and returns milliseconds per run.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "validation_kernels.h"

namespace gpuprof::kernels {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Keeps the stream busy while the timed work is queued behind it.
__global__ void queue_ahead_kernel(int64_t duration_ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < uint64_t(duration_ns)) {
  }
}

// How long the stream is kept busy before each timed run: longer than the host takes to record the
// start event and launch the work, CUPTI's per-call cost included, so the events bracket the work's
// time on the device and none of the host's.
constexpr int64_t kQueueAheadNs = 5'000'000;

// One stream and one pair of events per call; runs `launch` `repeats` times, timing each run. Each
// run is queued behind a short spin (queue_ahead_kernel): with an idle stream, the start event
// would complete at once and the interval would include the host's launch of the work.
template <typename Launch>
std::vector<double> time_runs(int repeats, cudaStream_t stream, Launch launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    queue_ahead_kernel<<<1, 1, 0, stream>>>(kQueueAheadNs);
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    launch();
    check(cudaGetLastError(), "kernel launch");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

// Spins for `duration_ns` of wall time (the global timer, in ns, so SM clock boosts do not change
// the length); the spin count is written so the loop cannot be optimised away.
__global__ void spin_ns_kernel(int64_t duration_ns, int64_t* sink) {
  const uint64_t start = global_timer_ns();
  int64_t spins = 0;
  while (global_timer_ns() - start < uint64_t(duration_ns)) ++spins;
  if (threadIdx.x == 0 && sink != nullptr) sink[blockIdx.x] = spins;
}

// Spins for `cycles` SM clock cycles (clock64).
__global__ void spin_cycles_kernel(int64_t cycles, int64_t* sink) {
  const int64_t start = clock64();
  int64_t now = start;
  while (now - start < cycles) now = clock64();
  if (threadIdx.x == 0 && sink != nullptr) sink[blockIdx.x] = now - start;
}

// b[i] = a[i] + a[i]^2 + ... + a[i]^k: k fused multiply-adds (2k flop) per 8 bytes moved (one
// float read, one written), so arithmetic intensity = k / 4 flop/byte.
__global__ void polynomial_kernel(const float* __restrict__ a, float* __restrict__ b, int64_t n, int k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = a[i];
    float s = 0.0f;
#pragma unroll 8
    for (int j = 0; j < k; ++j) s = fmaf(s, x, x);   // s_{j+1} = s_j * x + x
    b[i] = s;
  }
}

constexpr int kTile = 16;

// C = A * B, n x n row-major FP32, shared-memory tiles on the SIMT cores.
__global__ void sgemm_simt_kernel(const float* A, const float* B, float* C, int n) {
  __shared__ float as[kTile][kTile], bs[kTile][kTile];
  const int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < n; t += kTile) {
    as[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? A[row * n + t + threadIdx.x] : 0.0f;
    bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? B[(t + threadIdx.y) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc = fmaf(as[threadIdx.y][i], bs[i][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < n && col < n) C[row * n + col] = acc;
}

// C = A * B on the tensor cores: FP16 inputs, FP32 accumulation, one 16x16 output tile per warp.
// n must be a multiple of 16.
__global__ void gemm_wmma_kernel(const __half* A, const __half* B, float* C, int n) {
  using namespace nvcuda;
  const int warp_row = (blockIdx.y * blockDim.y + threadIdx.y) * 16;
  const int warp_col = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 16;
  if (warp_row >= n || warp_col >= n) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < n; k += 16) {
    wmma::load_matrix_sync(a, A + warp_row * n + k, n);
    wmma::load_matrix_sync(b, B + k * n + warp_col, n);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(C + warp_row * n + warp_col, c, n, wmma::mem_row_major);
}

__global__ void fill_kernel(float* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

__global__ void fill_half_kernel(__half* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2half(v);
}

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t count) { check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(s); }
};

int grid_for(int64_t n, int block) {
  int sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t needed = (n + block - 1) / block;
  return int(std::min<int64_t>(needed, int64_t(sms) * 32));
}

}  // namespace

DeviceInfo device_info(int device) {
  DeviceInfo d;
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp p;
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.compute_major = p.major;
  d.compute_minor = p.minor;
  cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, device);
  cudaDeviceGetAttribute(&d.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
  return d;
}

std::vector<double> spin_ns(int64_t duration_ns, int blocks, int repeats) {
  Stream st;
  DeviceBuffer<int64_t> sink{size_t(std::max(blocks, 1))};
  return time_runs(repeats, st.s, [&] { spin_ns_kernel<<<blocks, 32, 0, st.s>>>(duration_ns, sink.p); });
}

std::vector<double> spin_cycles(int64_t cycles, int blocks, int repeats) {
  Stream st;
  DeviceBuffer<int64_t> sink{size_t(std::max(blocks, 1))};
  return time_runs(repeats, st.s, [&] { spin_cycles_kernel<<<blocks, 32, 0, st.s>>>(cycles, sink.p); });
}

std::vector<double> polynomial(int64_t n, int k, int repeats) {
  if (k < 1) throw std::invalid_argument("polynomial: k must be >= 1, got " + std::to_string(k));
  Stream st;
  DeviceBuffer<float> a{size_t(n)}, b{size_t(n)};
  const int block = 256, grid = grid_for(n, block);
  fill_kernel<<<grid, block, 0, st.s>>>(a.p, n, 0.999f);   // |x| < 1: the sum stays finite for any k
  return time_runs(repeats, st.s, [&] { polynomial_kernel<<<grid, block, 0, st.s>>>(a.p, b.p, n, k); });
}

std::vector<double> host_to_device(int64_t bytes, bool pinned, int repeats) {
  Stream st;
  DeviceBuffer<uint8_t> dst{size_t(bytes)};
  void* host = nullptr;
  if (pinned) check(cudaMallocHost(&host, size_t(bytes)), "cudaMallocHost");
  else if ((host = std::malloc(size_t(bytes))) == nullptr) throw std::bad_alloc();
  std::memset(host, 1, size_t(bytes));   // touch every page so the copy does not fault them in
  std::vector<double> ms;
  try {
    ms = time_runs(repeats, st.s, [&] {
      check(cudaMemcpyAsync(dst.p, host, size_t(bytes), cudaMemcpyHostToDevice, st.s), "cudaMemcpyAsync");
    });
  } catch (...) {
    pinned ? (void)cudaFreeHost(host) : std::free(host);
    throw;
  }
  pinned ? (void)cudaFreeHost(host) : std::free(host);
  return ms;
}

std::vector<double> gemm_fp32(int n, int repeats) {
  Stream st;
  const int64_t count = int64_t(n) * n;
  DeviceBuffer<float> A{size_t(count)}, B{size_t(count)}, C{size_t(count)};
  fill_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(A.p, count, 1.0f);
  fill_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(B.p, count, 0.5f);
  const dim3 block(kTile, kTile), grid((n + kTile - 1) / kTile, (n + kTile - 1) / kTile);
  return time_runs(repeats, st.s, [&] { sgemm_simt_kernel<<<grid, block, 0, st.s>>>(A.p, B.p, C.p, n); });
}

std::vector<double> gemm_tensor_core(int n, int repeats) {
  if (n % 16 != 0) throw std::invalid_argument("gemm_tensor_core: n must be a multiple of 16");
  Stream st;
  const int64_t count = int64_t(n) * n;
  DeviceBuffer<__half> A{size_t(count)}, B{size_t(count)};
  DeviceBuffer<float> C{size_t(count)};
  fill_half_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(A.p, count, 1.0f);
  fill_half_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(B.p, count, 0.5f);
  // 4 warps per block along x, each computing one 16x16 tile; 1 tile row per block along y.
  const dim3 block(128, 1), grid((n / 16 + 3) / 4, n / 16);
  return time_runs(repeats, st.s, [&] { gemm_wmma_kernel<<<grid, block, 0, st.s>>>(A.p, B.p, C.p, n); });
}

std::vector<float> gemm_check(int n, bool tensor_core) {
  // Every output of A(=1) x B(=0.5) is n * 0.5: a quick correctness probe for both GEMMs.
  Stream st;
  const int64_t count = int64_t(n) * n;
  DeviceBuffer<float> C{size_t(count)};
  if (tensor_core) {
    DeviceBuffer<__half> A{size_t(count)}, B{size_t(count)};
    fill_half_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(A.p, count, 1.0f);
    fill_half_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(B.p, count, 0.5f);
    gemm_wmma_kernel<<<dim3((n / 16 + 3) / 4, n / 16), dim3(128, 1), 0, st.s>>>(A.p, B.p, C.p, n);
  } else {
    DeviceBuffer<float> A{size_t(count)}, B{size_t(count)};
    fill_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(A.p, count, 1.0f);
    fill_kernel<<<grid_for(count, 256), 256, 0, st.s>>>(B.p, count, 0.5f);
    sgemm_simt_kernel<<<dim3((n + 15) / 16, (n + 15) / 16), dim3(16, 16), 0, st.s>>>(A.p, B.p, C.p, n);
  }
  check(cudaGetLastError(), "gemm launch");
  std::vector<float> out(static_cast<size_t>(count));
  check(cudaMemcpyAsync(out.data(), C.p, size_t(count) * sizeof(float), cudaMemcpyDeviceToHost, st.s),
        "cudaMemcpy");
  check(cudaStreamSynchronize(st.s), "cudaStreamSynchronize");
  return out;
}

}  // namespace gpuprof::kernels
