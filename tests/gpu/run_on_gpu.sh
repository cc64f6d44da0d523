#!/usr/bin/env bash
# Build gpuprof on a machine with an NVIDIA GPU, run the GPU proofs and the GPU benchmarks, in one call:
#   bash tests/gpu/run_on_gpu.sh
# Needs: python with torch (CUDA), pybind11, scikit-build-core, cmake, ninja, pytest, nvcc. No network:
# where that machine lacks zlib's headers, carry them from a machine with PyPI, in the
# ignored folder .whl/ (the device tool's `carry`):
#   pip download --no-deps cmeel-zlib -d .whl
# When $OUT is set, the benchmark figures are also written there (gpu_overhead.json).
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=${PYTHON:-python3}
# torch.profiler gives CUPTI back after its trace only with this (tests and benchmark alternate it with gpuprof)
export TEARDOWN_CUPTI=${TEARDOWN_CUPTI:-1}
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== build"
build_flags=()
if ls .whl/cmeel_zlib-*.whl >/dev/null 2>&1; then "$PY" -m pip install -q --no-deps .whl/cmeel_zlib-*.whl; fi
"$PY" -m pip install --no-build-isolation --no-deps -q "${build_flags[@]}" . || { echo "BUILD FAILED"; exit 1; }
cd /tmp   # import the installed package, not the source tree
"$PY" -c "import gpuprof, gpuprof._kernels; print('gpuprof', gpuprof.__version__, 'kernels built')" || true
echo "== tests/gpu"
"$PY" -m pytest "$REPO/tests/gpu" -v -rs -p no:cacheprovider
rc=$?
echo "== roofline"
"$PY" -m gpuprof.roofline --n $((1 << 25)) --repeats 10 || true
echo "== benchmark: step overhead (bench/gpu_overhead.py)"
bench_json=${OUT:+$OUT/gpu_overhead.json}
"$PY" "$REPO/bench/gpu_overhead.py" --out "${bench_json:-/tmp/gpu_overhead.json}" || { echo "GPU BENCHMARK FAILED"; rc=1; }
exit $rc
