#!/usr/bin/env bash
# The quick checks, run before the long tests: ruff (lint and format) over the Python code and
# clang-format over the C++ (.ci/clang-format-check.sh). Each tool is pinned, and installed here
# when the one on PATH is another version, so CI, pre-commit and a developer see the same verdict.
# Fix what it finds with:  ruff check --fix . && ruff format . && bash .ci/clang-format-check.sh --fix
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RUFF_VERSION=0.17.6
if [ "$("$PY" -m ruff --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]; then
  "$PY" -m pip install -q "ruff==$RUFF_VERSION" || { echo "lint: cannot install ruff==$RUFF_VERSION" >&2; exit 1; }
fi
status=0
"$PY" -m ruff check . || status=1
"$PY" -m ruff format --check . || { echo "lint: run 'ruff format .' to format" >&2; status=1; }
if [ -f .ci/clang-format-check.sh ]; then
  bash .ci/clang-format-check.sh || status=1
fi
[ $status -eq 0 ] && echo "lint: ruff and clang-format clean"
exit $status
