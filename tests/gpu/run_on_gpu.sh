#!/usr/bin/env bash
# Build gpuprof on a machine with an NVIDIA GPU, run the GPU proofs and the GPU benchmarks, in one call:
#   bash tests/gpu/run_on_gpu.sh
# Needs: python with torch (CUDA), pybind11, scikit-build-core, cmake, ninja, pytest, nvcc. No network:
# where that machine lacks zlib's headers, carry them from a machine with PyPI, in the
# ignored folder .whl/ (the device tool's `carry`):
#   pip download --no-deps cmeel-zlib -d .whl
# Raw results go to bench/results/gpu_run-<date>.json (device, driver, CUDA, torch, tests passed/
# failed/skipped with the names of those that did not pass, roofline, overhead, step-costs, after-session,
# import-thread, energy, bf16 GEMM and NCCL collectives figures): commit
# that file, and copy the figures into docs/gpu.md and docs/performance.md. When $OUT is set, every
# part writes its files there as it finishes (the device tool brings back what a run cut short by its
# time limit had written), and the results JSON is copied there at the end.
# PARTS names the parts to run after the build, in this order (default: all of them):
#   PARTS="tests overhead" bash tests/gpu/run_on_gpu.sh
set -u
PARTS=" ${PARTS:-tests roofline overhead step_costs after_session import_threads} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
cd "$(dirname "$0")/../.."
REPO=$PWD
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd); fi   # absolute: the script moves to /tmp
PY=${PYTHON:-python3}
# torch.profiler gives CUPTI back after its trace only with this (tests and benchmark alternate it with gpuprof)
export TEARDOWN_CUPTI=${TEARDOWN_CUPTI:-1}
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"
echo "== build"
build_flags=(-C cmake.define.GPUPROF_BUILD_KERNELS=ON -C cmake.define.GPUPROF_TESTING_MODULE=ON)   # validation kernels, test trace builders (both off by default)
if ls .whl/cmeel_zlib-*.whl >/dev/null 2>&1; then "$PY" -m pip install -q --no-deps .whl/cmeel_zlib-*.whl; fi
"$PY" -m pip install --no-build-isolation --no-deps -q "${build_flags[@]}" . || { echo "BUILD FAILED"; exit 1; }
cd /tmp   # import the installed package, not the source tree
"$PY" -c "import gpuprof, gpuprof._kernels; print('gpuprof', gpuprof.__version__, 'kernels built')" || true
work=${OUT:-$(mktemp -d)}   # with $OUT set, each part's files land there as it finishes
rc=0
if want tests; then
  echo "== tests/gpu"
  export GPUPROF_GPU_FIGURES="$work"   # tests that measure write their figures here (energy.json)
  # -rsP: skip reasons, and what passing tests printed (the advice tests' before/after figures)
  "$PY" -m pytest "$REPO/tests/gpu" -v -rsP -p no:cacheprovider --junitxml="$work/tests_gpu.xml"
  rc=$?
fi
if want roofline; then
  echo "== roofline"
  "$PY" -m gpuprof.roofline --n $((1 << 25)) --repeats 10 2>&1 | tee "$work/roofline.txt" || true
fi
if want overhead; then
  echo "== benchmark: step overhead (bench/gpu_overhead.py)"
  "$PY" "$REPO/bench/gpu_overhead.py" --out "$work/gpu_overhead.json" || { echo "GPU BENCHMARK FAILED"; rc=1; }
fi
if want step_costs; then
  echo "== benchmark: what the step boundary and one operator cost the training thread (bench/gpu_step_costs.py)"
  "$PY" "$REPO/bench/gpu_step_costs.py" --out "$work/step_costs.json" || echo "STEP-COSTS BENCHMARK FAILED"
fi
if want after_session; then
  echo "== benchmark: step time after a session against never profiled (bench/after_session.py)"
  "$PY" "$REPO/bench/after_session.py" --out "$work/after_session.json" || echo "AFTER-SESSION BENCHMARK FAILED"
fi
if want import_threads; then
  echo "== benchmark: trace import on one thread and split (bench/import_threads.py)"
  "$PY" "$REPO/bench/import_threads.py" --repeat 5 --out "$work/import_threads.json" || echo "IMPORT BENCHMARK FAILED"
fi
echo "== results"
mkdir -p "$REPO/bench/results"
result="$REPO/bench/results/gpu_run-$(date -u +%Y%m%dT%H%M%SZ).json"
"$PY" - "$work" "$result" "$rc" "$PARTS" <<'PYEOF'
import json, os, subprocess, sys, xml.etree.ElementTree as ET
work, result, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:
        return f"unavailable: {e}"
doc = {"exit_status": rc, "parts": sys.argv[4].split()}
doc["nvidia_smi"] = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
try:
    import torch
    doc["torch"] = torch.__version__
    doc["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        doc["device"] = torch.cuda.get_device_name(0)
        doc["device_count"] = torch.cuda.device_count()
        doc["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
except Exception as e:
    doc["torch"] = f"unavailable: {e}"
doc["driver"] = (run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines() or [""])[0]
try:
    import gpuprof
    from gpuprof._native import _core
    doc["gpuprof"] = gpuprof.__version__
    st = _core.gpu_start([])
    doc["gpu_collection"] = {k: st.get(k) for k in ("enabled", "message", "cupti_library", "cupti_version", "error")}
    _core.gpu_release()
except Exception as e:
    doc["gpu_collection"] = f"unavailable: {e}"
tests = {"passed": 0, "failed": 0, "skipped": 0, "not_passed": []}
try:
    for case in ET.parse(os.path.join(work, "tests_gpu.xml")).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        tests[outcome] += 1
        if outcome != "passed":
            msg = next((c.get("message", "") for c in case if c.tag in ("failure", "error", "skipped")), "")
            tests["not_passed"].append({"test": name, "outcome": outcome, "message": msg[:500]})
except Exception as e:
    tests["error"] = f"no junit report: {e}"
doc["tests_gpu"] = tests
for key, name in (
    ("overhead", "gpu_overhead.json"),
    ("import_threads", "import_threads.json"),
    ("after_session", "after_session.json"),  # review item 9: CUPTI left attached after a session
    ("step_costs", "step_costs.json"),  # bench/gpu_step_costs.py: prof.step(), allocator, NVML, one op
    ("energy", "energy.json"),  # tests/gpu/test_energy_gpu.py: per-step J against NVML read directly
    ("gemm", "gemm.json"),  # tests/gpu/test_gemm_gpu.py: bf16 GEMM TFLOP/s, MFU, tensor-core share
    ("collectives", "collectives.json"),  # tests/gpu/test_collectives_gpu.py: NCCL's rows
):
    try:
        with open(os.path.join(work, name)) as f:
            doc[key] = json.load(f)
    except Exception as e:
        doc[key] = f"unavailable: {e}"
try:
    with open(os.path.join(work, "roofline.txt")) as f:
        doc["roofline"] = f.read()[-4000:]
except OSError:
    pass
with open(result, "w") as f:
    json.dump(doc, f, indent=2)
print(f"results: {result}")
print(f"tests/gpu: {tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped")
PYEOF
if [ -n "${OUT:-}" ]; then cp "$result" "$OUT"/ 2>/dev/null || true; fi
exit $rc
