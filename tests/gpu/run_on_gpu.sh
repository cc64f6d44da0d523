#!/usr/bin/env bash
# Build gpuprof on a machine with an NVIDIA GPU and run the GPU proofs, in one call:
#   bash tests/gpu/run_on_gpu.sh
# Needs: python with torch (CUDA), pybind11, scikit-build-core, cmake, ninja, pytest, nvcc. No network.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== build"
"$PY" -m pip install --no-build-isolation --no-deps -q . || { echo "BUILD FAILED"; exit 1; }
cd /tmp   # import the installed package, not the source tree
"$PY" -c "import gpuprof, gpuprof._kernels; print('gpuprof', gpuprof.__version__, 'kernels built')" || true
echo "== tests/gpu"
"$PY" -m pytest "$OLDPWD/tests/gpu" -v -rs -p no:cacheprovider
rc=$?
echo "== roofline"
"$PY" -m gpuprof.roofline --n $((1 << 25)) --repeats 10 || true
exit $rc
