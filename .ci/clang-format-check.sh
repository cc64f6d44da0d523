#!/usr/bin/env bash
# clang-format over the C++ and CUDA files the project owns (tracked files under cpp/, tests/cpp,
# tests/tsan, tests/fuzz/*.cpp and kernels/; never build/ or third-party code), with .clang-format
# and one pinned clang-format, so that CI and pre-commit agree. Without the pinned version on PATH
# it is installed from PyPI (the clang-format wheel) into $PYTHON (default python3).
#   bash .ci/clang-format-check.sh         checks: exits 1, naming the files, when one is off
#   bash .ci/clang-format-check.sh --fix   formats those files in place
set -uo pipefail
cd "$(dirname "$0")/.."
VERSION=23.1.5
PY=${PYTHON:-python3}

version_of() { "$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1; }
wheel_binary() { "$PY" -c "import clang_format; print(clang_format.get_executable('clang-format'))" 2>/dev/null; }
CF=$(command -v clang-format || true)
if [ -z "$CF" ] || [ "$(version_of "$CF")" != "$VERSION" ]; then
  CF=$(wheel_binary || true)
  if [ -z "$CF" ] || [ "$(version_of "$CF")" != "$VERSION" ]; then
    "$PY" -m pip install -q "clang-format==$VERSION" \
      || { echo "clang-format-check: could not install clang-format==$VERSION" >&2; exit 2; }
    CF=$(wheel_binary || true)
  fi
fi
if [ "$(version_of "$CF")" != "$VERSION" ]; then
  echo "clang-format-check: $CF is not clang-format $VERSION" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- 'cpp/*.h' 'cpp/*.hpp' 'cpp/*.cpp' 'tests/cpp/*.h' 'tests/cpp/*.cpp' \
  'tests/tsan/*.h' 'tests/tsan/*.cpp' 'tests/fuzz/*.cpp' 'kernels/*.h' 'kernels/*.cuh' 'kernels/*.cpp' 'kernels/*.cu')
if [ "${1:-}" = "--fix" ]; then
  "$CF" -i "${files[@]}"
  exit $?
fi
if ! "$CF" --dry-run --Werror "${files[@]}"; then
  echo "clang-format-check: C++ formatting is off; fix with: bash .ci/clang-format-check.sh --fix" >&2
  exit 1
fi
echo "clang-format-check: ${#files[@]} files formatted as clang-format $VERSION formats them"
