#!/usr/bin/env bash
# ThreadSanitizer over the collector (8 producer threads while sessions start, drain and stop), the
# gzip reader's inflating thread, a large plain or gzip file read by two threads, and the analysis tables' two
# threads (tests/tsan/tsan_test.cpp).
# Builds only the sources those need, with -fsanitize=thread, into build/tsan; 45-80 s on 2 CPUs
# (about 30 s of it the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX:-g++}
out=build/tsan
mkdir -p "$out"
# Every core, importer and analysis source (the tables' second thread calls into all of them) and
# the collector, so a new core, importer or analysis file needs no edit here.
srcs=(cpp/src/core/*.cpp cpp/src/collect/collector.cpp cpp/src/io/*.cpp
      cpp/src/analysis/*.cpp tests/tsan/tsan_test.cpp)
flags=(-std=c++17 -O1 -g -fsanitize=thread -fno-omit-frame-pointer -Icpp/include -pthread)
# The gzip reader's ISA-L decoder where its headers are installed (as the CMake build), zlib's otherwise.
libs=(-lgtest -lgtest_main -lz)
if [ -f /usr/include/isa-l/igzip_lib.h ]; then flags+=(-DGPUPROF_HAVE_ISAL=1); libs+=(-lisal); fi
objs=()
pids=()
for s in "${srcs[@]}"; do
  o="$out/$(echo "$s" | tr / _).o"
  objs+=("$o")
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find cpp/include -newer "$o" -print -quit)" ]; then
    "$CXX" "${flags[@]}" -c "$s" -o "$o" &
    pids+=($!)
    if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$CXX" "${flags[@]}" "${objs[@]}" -o "$out/tsan_test" "${libs[@]}"
# halt_on_error: the first race fails the run; second_deadlock_stack for readable lock reports.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" "$out/tsan_test"
