#!/usr/bin/env bash
# The importer's sanitizer checks (no input file may crash it or read out of bounds), called from
# .ci/test:
#  1. an ASan+UBSan build (clang) of the C++ tests, run whole;
#  2. the importer's libFuzzer target, same build, replaying tests/corpus/import, tests/fuzz/seeds
#     and every crash input ever kept in tests/fuzz/crashes;
#  3. a bounded coverage-guided fuzz run: fixed seed, fixed time (GPUPROF_FUZZ_SECONDS, default 60).
# A crash input is written to build/sanitize/crashes/; keep it in tests/fuzz/crashes/ with the fix.
# Needs clang (apt-get install -y clang); without it, says so and fails.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_S=${GPUPROF_FUZZ_SECONDS:-60}
B=build/sanitize
if ! command -v clang++ >/dev/null 2>&1; then
  echo "sanitize-import: clang++ not found (apt-get install -y clang)" >&2
  exit 1
fi
t0=$SECONDS
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DGPUPROF_BUILD_TESTS=ON -DGPUPROF_BUILD_PYTHON=OFF -DGPUPROF_BUILD_FUZZ=ON >/dev/null || exit 1
cmake --build "$B" -j2 --target gpuprof_tests gpuprof_import_fuzz >/dev/null || exit 1
echo "sanitize-import: ASan+UBSan build $((SECONDS - t0)) s"
status=0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
t1=$SECONDS
# The C++ suite under the sanitizers (the CUPTI library test needs no GPU either).
"$B/gpuprof_tests" --gtest_brief=1 || status=1
echo "sanitize-import: C++ tests under ASan+UBSan $((SECONDS - t1)) s"
t2=$SECONDS
replay=()
for f in tests/corpus/import/* tests/fuzz/seeds/* tests/fuzz/crashes/*; do
  [ -f "$f" ] && [ "$(basename "$f")" != .gitkeep ] && replay+=("$f")
done
"$B/gpuprof_import_fuzz" -rss_limit_mb=2048 -timeout=10 "${replay[@]}" >"$B/replay.log" 2>&1 \
  || { status=1; tail -n 40 "$B/replay.log" >&2; }
echo "sanitize-import: replayed ${#replay[@]} inputs $((SECONDS - t2)) s"
t3=$SECONDS
work="$B/fuzz-corpus"; rm -rf "$work" "$B/crashes"; mkdir -p "$work" "$B/crashes"
cp tests/fuzz/seeds/* "$work"/
"$B/gpuprof_import_fuzz" "$work" -seed=1 -max_total_time="$FUZZ_S" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$B/crashes/" -dict=tests/fuzz/json.dict -print_final_stats=1 \
  >"$B/fuzz.log" 2>&1 || { status=1; tail -n 60 "$B/fuzz.log" >&2; echo "crash inputs: $B/crashes/" >&2; }
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$B/fuzz.log" | tr '\n' ' '
echo
echo "sanitize-import: fuzzing ${FUZZ_S} s (seed 1) took $((SECONDS - t3)) s; whole script $((SECONDS - t0)) s"
exit $status
