#!/usr/bin/env bash
# The importer's sanitizer checks (no input file may crash it or read out of bounds), called from
# .ci/test:
#  1. an ASan+UBSan build (clang) of the C++ tests, run whole;
#  2. the importer's libFuzzer target, same build, replaying tests/corpus/import, tests/fuzz/seeds
#     and every crash input ever kept in tests/fuzz/crashes;
#  3. a bounded coverage-guided fuzz run: fixed seed, fixed time (GPUPROF_FUZZ_SECONDS, default 60);
#  4. the same for the gzip target (tests/fuzz/gzip_fuzz.cpp: .json.gz files through the framing,
#     both decoders, the two-thread read and the spill), replaying tests/fuzz/gzip_seeds and the
#     kept gzip crash inputs, then fuzzing for GPUPROF_GZIP_FUZZ_SECONDS (default 30).
# A crash input is written to build/sanitize/crashes/ (gzip: build/sanitize/gzip-crashes/); keep it
# in tests/fuzz/crashes/ with the fix.
# Needs clang (apt-get install -y clang); without it, says so and fails.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_S=${GPUPROF_FUZZ_SECONDS:-60}
GZIP_FUZZ_S=${GPUPROF_GZIP_FUZZ_SECONDS:-30}
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
cmake --build "$B" -j2 --target gpuprof_tests gpuprof_import_fuzz gpuprof_gzip_fuzz >/dev/null || exit 1
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
echo "sanitize-import: fuzzing ${FUZZ_S} s (seed 1) took $((SECONDS - t3)) s"
t4=$SECONDS
gz=()   # the gzip seeds and every kept crash input that is a gzip file
for f in tests/fuzz/gzip_seeds/* tests/corpus/import/*.gz tests/fuzz/crashes/*; do
  [ -f "$f" ] && [ "$(head -c 2 "$f" | od -An -tx1 | tr -d ' ')" = 1f8b ] && gz+=("$f")
done
"$B/gpuprof_gzip_fuzz" -rss_limit_mb=2048 -timeout=10 "${gz[@]}" >"$B/gzip-replay.log" 2>&1 \
  || { status=1; tail -n 40 "$B/gzip-replay.log" >&2; }
work="$B/gzip-corpus"; rm -rf "$work" "$B/gzip-crashes"; mkdir -p "$work" "$B/gzip-crashes"
cp tests/fuzz/gzip_seeds/* "$work"/
"$B/gpuprof_gzip_fuzz" "$work" -seed=1 -max_total_time="$GZIP_FUZZ_S" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$B/gzip-crashes/" -print_final_stats=1 >"$B/gzip-fuzz.log" 2>&1 \
  || { status=1; tail -n 60 "$B/gzip-fuzz.log" >&2; echo "crash inputs: $B/gzip-crashes/" >&2; }
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$B/gzip-fuzz.log" | tr '\n' ' '
echo
echo "sanitize-import: replayed ${#gz[@]} gzip inputs and fuzzed gzip ${GZIP_FUZZ_S} s (seed 1) in $((SECONDS - t4)) s; whole script $((SECONDS - t0)) s"
exit $status
