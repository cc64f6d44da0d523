"""Bad input never crashes: a TraceImportError naming the file and the place, or a counted skip."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from _traces import TRACES  # noqa: E402

import gpuprof
from gpuprof.traces.read import import_trace


def event(**kw):
    e = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
    e.update(kw)
    return e


def write(tmp_path, name, text: bytes, gz=False) -> Path:
    p = tmp_path / name
    p.write_bytes(gzip.compress(text) if gz else text)
    return p


def import_error(path, **kw) -> gpuprof.TraceImportError:
    with pytest.raises(gpuprof.TraceImportError) as info:
        gpuprof.analyze(path, **kw)
    err = info.value
    assert isinstance(err, ValueError)
    assert str(path) in str(err) and err.path == str(path)
    return err


def test_empty_file(tmp_path):
    err = import_error(write(tmp_path, "empty.json", b""))
    assert "the file is empty" in str(err)


def test_invalid_json_says_byte_and_event(tmp_path):
    text = json.dumps({"traceEvents": [event(), event()]}).encode()
    broken = text.replace(b'"ts": 10, "dur": 5}]', b'"ts": 10 "dur": 5}]')  # comma lost in event 1
    err = import_error(write(tmp_path, "bad.json", broken))
    assert err.event_index == 1
    assert err.byte_offset == broken.index(b' "dur": 5}]') + 1
    assert f"invalid JSON at byte {err.byte_offset} (in traceEvents[1])" in str(err)


def test_truncated_plain_json(tmp_path):
    text = json.dumps({"traceEvents": [event()] * 100}).encode()
    err = import_error(write(tmp_path, "cut.json", text[: len(text) // 2]))
    assert "ends early" in str(err)


def test_truncated_gzip(tmp_path):
    full = gzip.compress(json.dumps({"traceEvents": [event(ts=i) for i in range(20000)]}).encode())
    err = import_error(write(tmp_path, "cut.json.gz", full[: len(full) // 2]))
    assert "gzip data ends early" in str(err)
    assert err.byte_offset > 0  # the good text before the cut was read


def test_gzip_detected_by_content_not_name(tmp_path):
    p = write(tmp_path, "trace.json", json.dumps({"traceEvents": [event()]}).encode(), gz=True)
    assert gpuprof.analyze(p).counts["events"] == 1


def test_top_level_array_is_the_chrome_array_format(tmp_path):
    # A bare list of events is the Trace Event Format's "JSON Array Format": read, not refused.
    p = write(
        tmp_path,
        "array.json",
        json.dumps([event(name="ProfilerStep#1", cat="user_annotation", ts=0, dur=100), event()]).encode(),
    )
    r = gpuprof.analyze(p)
    assert r.counts["steps"] == 1 and r.steps[0]["total_us"] == 100.0


def test_not_a_trace(tmp_path):
    err = import_error(write(tmp_path, "x.json", b'{"schemaVersion": 1}'))
    assert "no traceEvents list" in str(err)
    err = import_error(write(tmp_path, "n.json", b"42"))
    assert "top-level JSON value is a number" in str(err)


def test_events_without_ts_or_dur_and_negative_durations_are_counted(tmp_path):
    bad = [
        {k: v for k, v in event().items() if k != "ts"},
        {k: v for k, v in event().items() if k != "dur"},
        event(dur=-4),
    ]
    p = write(tmp_path, "skips.json", json.dumps({"traceEvents": bad + [event()]}).encode())
    r = gpuprof.analyze(p)
    assert r.counts["skipped"] == 3 and r.counts["events"] == 1
    assert r.to_dict()["source"]["skipped_by_reason"] == {
        "missing ts": 1,
        "missing dur": 1,
        "negative dur": 1,
    }


def test_integers_beyond_64_bits_skip_the_event(tmp_path):
    text = json.dumps({"traceEvents": [event(args={"External id": 10**30}), event(ts=10**40), event()]})
    r = gpuprof.analyze(write(tmp_path, "big.json", text.encode()))
    assert r.counts["events"] == 1
    assert r.to_dict()["source"]["skipped_by_reason"] == {
        "number out of 64-bit range": 1,
        "time out of range": 1,
    }


def test_non_utf8_names_are_repaired_not_fatal(tmp_path):
    text = json.dumps({"traceEvents": [event(name="NAME")]}).encode().replace(b"NAME", b"op\xff\xfe")
    trace, _ = import_trace(write(tmp_path, "latin.json", text))
    names = [e["name"] for e in gpuprof._native._core.trace_events(trace)]
    assert names == ["op\ufffd\ufffd"]
    assert trace.metadata["import.invalid_utf8_strings"] == "1"


def test_size_limit_stands_in_for_a_huge_file(tmp_path):
    # A 2 GB file is streamed (never held whole); max_bytes shows the bounded read without
    # writing gigabytes: the read stops at the limit with a clear message.
    text = json.dumps({"traceEvents": [event(ts=i) for i in range(5000)]}).encode()
    err = import_error(write(tmp_path, "big.json.gz", text, gz=True), max_bytes=100_000)
    assert "larger than the limit of 100000 bytes" in str(err)
    err = import_error(write(tmp_path, "many.json", text), max_events=10)
    assert "more than 10 events" in str(err)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        gpuprof.analyze(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError, match="no trace files"):
        gpuprof.analyze(tmp_path)


def test_corrupt_gzip_of_a_real_trace(tmp_path):
    src = TRACES / "hta_mi250_rocm" / "rank0.json.gz"
    if not src.exists():
        pytest.skip(f"shared traces not found at {src}")
    data = bytearray(src.read_bytes())
    data[200:260] = b"\x55" * 60
    err = import_error(write(tmp_path, "corrupt.json.gz", bytes(data)))
    assert "corrupt gzip" in str(err) or "invalid JSON" in str(err)


def test_import_settings_are_read_from_the_environment_by_python(monkeypatch):
    # The binding reads no environment; Python parses the two variables and passes them. Values
    # out of range or not a whole number are ignored (0: the default), as they always were.
    from gpuprof.traces.read import import_settings

    monkeypatch.delenv("GPUPROF_MAX_TOKEN_MIB", raising=False)
    monkeypatch.delenv("GPUPROF_IMPORT_CPUS", raising=False)
    assert import_settings() == {"max_token_bytes": 0, "import_cpus": 0}
    monkeypatch.setenv("GPUPROF_MAX_TOKEN_MIB", " 2")
    monkeypatch.setenv("GPUPROF_IMPORT_CPUS", "+3")
    assert import_settings() == {"max_token_bytes": 2 << 20, "import_cpus": 3}
    for bad in ("0", "-1", "1.5", "abc", "16777216"):
        monkeypatch.setenv("GPUPROF_MAX_TOKEN_MIB", bad)
        assert import_settings()["max_token_bytes"] == 0, bad
    for bad in ("0", "-2", "two", "65536"):
        monkeypatch.setenv("GPUPROF_IMPORT_CPUS", bad)
        assert import_settings()["import_cpus"] == 0, bad


def test_import_settings_out_of_range_are_value_errors(tmp_path):
    from gpuprof._native import _core

    path = str(write(tmp_path, "t.json", json.dumps({"traceEvents": [event()]}).encode()))
    _, stats = _core.import_trace(path, max_token_bytes=1 << 20, import_cpus=1)
    assert stats["records"] == 1
    with pytest.raises(ValueError, match="max_token_bytes must be 0 .* whole number of MiB"):
        _core.import_trace(path, max_token_bytes=1000)
    with pytest.raises(ValueError, match="import_cpus must be 0 .* or 1 to 65535, got -1"):
        _core.import_trace(path, import_cpus=-1)
    with pytest.raises(ValueError, match="import_cpus must be"):
        _core.import_trace_json(b"{}", import_cpus=70000)
