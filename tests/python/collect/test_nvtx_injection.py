"""NVTX injection: the user's NVTX ranges are collected where NVTX_INJECTION64_PATH names the
libcupti gpuprof loads; gpuprof never sets or changes the variable itself, and says in the metadata
whether the ranges are collected and, where not, how to turn that on. The GpuCollection here is
given the status a successful gpu_start returns (this machine has no GPU);
tests/gpu/test_nvtx_gpu.py proves the ranges arrive on a real one."""

import os

import pytest

import gpuprof
from gpuprof._native import _core
from gpuprof.collect.gpu import NVTX_INJECTION_ENV, GpuCollection, nvtx_injection_path

torch = pytest.importorskip("torch")


def _collection_started_with(library: str, nvtx_markers: bool = True) -> GpuCollection:
    g = GpuCollection(True, 1000)
    g.status = {
        "enabled": True,
        "message": "",
        "cupti_library": library,
        "cupti_version": 130001,
        "nvtx_markers": nvtx_markers,
        "nvml": False,
        "nvml_message": "",
    }
    g.status["nvtx"] = g._nvtx_injection()
    return g


@pytest.fixture
def fake_libcupti(tmp_path, monkeypatch):
    monkeypatch.delenv(NVTX_INJECTION_ENV, raising=False)
    lib = tmp_path / "libcupti.so.13"
    lib.write_bytes(b"")
    return str(lib)


def test_unset_injection_is_left_unset_and_the_note_says_how_to_turn_it_on(fake_libcupti):
    g = _collection_started_with(fake_libcupti)
    assert NVTX_INJECTION_ENV not in os.environ
    assert g.status["nvtx"] == (
        f"off: to collect your own NVTX ranges, start Python with "
        f"{NVTX_INJECTION_ENV}={fake_libcupti} (docs/gpu.md)"
    )
    g.release()
    assert NVTX_INJECTION_ENV not in os.environ


def test_another_tools_injection_is_never_overridden(fake_libcupti, monkeypatch, tmp_path):
    nsys = tmp_path / "libToolsInjection64.so"
    nsys.write_bytes(b"")
    monkeypatch.setenv(NVTX_INJECTION_ENV, str(nsys))
    g = _collection_started_with(fake_libcupti)
    assert os.environ[NVTX_INJECTION_ENV] == str(nsys)
    assert g.status["nvtx"] == (
        f"off: {NVTX_INJECTION_ENV} names another NVTX tool ({nsys}), which receives the NVTX ranges"
    )
    g.release()
    assert os.environ[NVTX_INJECTION_ENV] == str(nsys)


def test_injection_set_by_the_user_to_the_same_libcupti_is_on_and_kept(fake_libcupti, monkeypatch, tmp_path):
    # The same file under another name (a symlink, as the toolkit's libcupti.so -> libcupti.so.13).
    link = tmp_path / "libcupti.so"
    link.symlink_to(fake_libcupti)
    monkeypatch.setenv(NVTX_INJECTION_ENV, str(link))
    g = _collection_started_with(fake_libcupti)
    assert g.status["nvtx"] == f"on ({NVTX_INJECTION_ENV} names gpuprof's libcupti)"
    g.release()
    assert os.environ[NVTX_INJECTION_ENV] == str(link)


def test_no_marker_activity_means_no_injection(fake_libcupti):
    g = _collection_started_with(fake_libcupti, nvtx_markers=False)
    assert g.status["nvtx"].startswith("off: CUPTI's NVTX marker activity is unavailable")
    assert NVTX_INJECTION_ENV not in os.environ


def test_metadata_says_whether_nvtx_ranges_are_collected(fake_libcupti):
    g = _collection_started_with(fake_libcupti)
    trace = _core.Trace()
    g.drain_into(trace)  # never started natively: only the notes
    md = dict(trace.metadata)
    assert md["nvtx_ranges"] == g.status["nvtx"] and md["nvtx_ranges"].startswith("off: to collect")
    assert md["gpu_collection"].startswith("on (CUPTI 130001")
    g.release()


def test_a_host_only_session_leaves_the_environment_alone(monkeypatch):
    # No GPU here (or gpu=False): GPU collection never starts, so no injection and no note.
    monkeypatch.delenv(NVTX_INJECTION_ENV, raising=False)
    with gpuprof.profile(gpu=False) as prof:
        for _ in range(2):
            torch.randn(8, 8) @ torch.randn(8, 8)
            prof.step()
    assert NVTX_INJECTION_ENV not in os.environ
    assert "nvtx_ranges" not in prof.report().to_dict()["metadata"]


@pytest.mark.skipif(
    not os.path.exists("/usr/local/cuda/lib64/libcupti.so.13")
    and not os.path.exists("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"),
    reason="no CUDA 13 toolkit libcupti on this machine",
)
def test_nvtx_injection_path_names_the_libcupti_gpu_collection_loads():
    path = nvtx_injection_path()
    assert os.path.isfile(path)
    assert os.path.basename(path).startswith("libcupti.so.13")
