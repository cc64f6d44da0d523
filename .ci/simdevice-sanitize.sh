#!/usr/bin/env bash
# The CUPTI collector and NVML sampler on the simulated device under ThreadSanitizer, then under
# AddressSanitizer (+UBSan): the collector sources and tests/simdevice/sanitize_test.cpp built with
# the sanitizer, the stand-in libraries (tests/simdevice/simbuild.py) built with the same one.
# Launching threads push external ids while the stand-in's thread completes buffers and the
# session thread forces flushes; buffers refused (records dropped), records in flight at the
# flush, the subscriber slot taken. Builds into build/simdevice-{thread,address}.
#   bash .ci/simdevice-sanitize.sh            # both
#   bash .ci/simdevice-sanitize.sh thread     # one
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX:-g++}
PY=${PYTHON:-python3}
include=$("$PY" -c 'import sys; sys.path.insert(0, "tests/simdevice"); import simbuild; print(simbuild.cuda_include_dir())')
srcs=(cpp/src/core/*.cpp cpp/src/collect/collector.cpp cpp/src/collect/cupti_decode.cpp
      cpp/src/collect/cupti_library.cpp cpp/src/collect/cupti_collector.cpp
      cpp/src/collect/nvml_sampler.cpp cpp/src/collect/nvtx_ranges.cpp tests/simdevice/sanitize_test.cpp)
status=0
for san in ${1:-thread address}; do
  case $san in
    thread) sflags=(-fsanitize=thread) ;;
    address) sflags=(-fsanitize=address,undefined -fno-sanitize-recover=undefined) ;;
    *) echo "unknown sanitizer $san (thread or address)" >&2; exit 2 ;;
  esac
  out=build/simdevice-$san
  mkdir -p "$out"
  # The stand-ins, with the same sanitizer, cached by simbuild (keyed by sources and flags).
  libdir=$(GPUPROF_SIMDEVICE_CACHE="$PWD/$out/standins" "$PY" -c '
import sys; sys.path.insert(0, "tests/simdevice"); import simbuild
print(simbuild.build(tuple(sys.argv[1:])))' "${sflags[@]}" -fno-omit-frame-pointer)
  flags=(-std=c++17 -O1 -g "${sflags[@]}" -fno-omit-frame-pointer -Icpp/include -isystem "$include" -pthread)
  objs=()
  pids=()
  for s in "${srcs[@]}"; do
    o="$out/$(echo "$s" | tr / _).o"
    objs+=("$o")
    if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find cpp/include cpp/src/collect -newer "$o" -print -quit)" ]; then
      "$CXX" "${flags[@]}" -c "$s" -o "$o" &
      pids+=($!)
      if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  # The stand-ins linked by soname: gpuprof's dlopen("libcuda.so.1") and dlopen("libnvidia-ml.so.1")
  # find them loaded; libcupti.so.13 it loads by GPUPROF_CUPTI (the test sets it).
  "$CXX" "${flags[@]}" "${objs[@]}" -o "$out/sanitize_test" -Wl,--no-as-needed \
    "$libdir/libcuda.so.1" "$libdir/libcupti.so.13" "$libdir/libnvidia-ml.so.1" -Wl,--as-needed \
    -Wl,-rpath,"$libdir" -lgtest -ldl -lz
  echo "simdevice under ${san} sanitizer:"
  SIMDEVICE_CUPTI="$libdir/libcupti.so.13" GPUPROF_CLOCK=monotonic \
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
    ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="print_stacktrace=1 ${UBSAN_OPTIONS:-}" \
    "$out/sanitize_test" || status=1
done
exit $status
