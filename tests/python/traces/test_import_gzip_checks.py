"""Every gzip member's CRC-32 and length are checked (on the inflating thread): a damaged trailer is
an error naming it, wherever the trailer lies. Each test runs with the build's default deflate
decoder (ISA-L's igzip where the build has it) and with zlib (GPUPROF_INFLATER=zlib, read at each
file opened): the framing is read by gpuprof for both, so the errors are the same."""

from __future__ import annotations

import json
import zlib

import pytest

from gpuprof.traces.read import TraceImportError, import_trace

# The importer reads gzip input 64 KiB at a time (cpp/src/io/text_stream.cpp).
READ_BYTES = 1 << 16


@pytest.fixture(autouse=True, params=["default", "zlib"])
def decoder(request, monkeypatch):
    if request.param == "zlib":
        monkeypatch.setenv("GPUPROF_INFLATER", "zlib")
    else:
        monkeypatch.delenv("GPUPROF_INFLATER", raising=False)
    return request.param


def trace_text(n_events: int) -> bytes:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 1000 + 3 * i, "dur": 2}
        for i in range(n_events)
    ]
    return json.dumps({"traceEvents": events}, indent=1).encode()


def gzip_member(data: bytes, level: int = 6) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: gzip wrapper
    return c.compress(data) + c.flush()


def damaged(gz: bytes, offset_from_end: int) -> bytes:
    b = bytearray(gz)
    b[len(b) - offset_from_end] ^= 0x01
    return bytes(b)


def test_a_wrong_crc_or_length_in_the_trailer_is_an_error(tmp_path):
    text = trace_text(2000)
    gz = gzip_member(text)
    good = tmp_path / "good.json.gz"
    good.write_bytes(gz)
    trace, stats = import_trace(good)
    assert trace.num_events == 2000 and stats["json_bytes"] == len(text)
    for offset, what in ((8, "incorrect data check"), (4, "incorrect length check")):
        bad = tmp_path / f"bad{offset}.json.gz"
        bad.write_bytes(damaged(gz, offset))  # 8: first CRC byte; 4: first length byte
        with pytest.raises(TraceImportError, match=what):
            import_trace(bad)


def test_a_trailer_across_two_reads_is_checked(tmp_path):
    # Stored (level 0) deflate grows with the text byte for byte (plus 5 bytes per stored block),
    # so padding the text finds a file that ends 1-7 bytes past the first 64 KiB read: its 8-byte
    # trailer is then split between the two reads.
    base = trace_text(540)
    assert len(gzip_member(base, level=0)) < READ_BYTES
    for pad in range(READ_BYTES):
        gz = gzip_member(base[:-1] + b" " * pad + base[-1:], level=0)
        if READ_BYTES < len(gz) < READ_BYTES + 8:
            break
    assert READ_BYTES < len(gz) < READ_BYTES + 8, len(gz)
    path = tmp_path / "split.json.gz"
    path.write_bytes(gz)
    assert import_trace(path)[0].num_events == 540
    path.write_bytes(damaged(gz, 8))  # the CRC's first byte: in the first read
    with pytest.raises(TraceImportError, match="incorrect data check"):
        import_trace(path)
    path.write_bytes(damaged(gz, 1))  # the length's last byte: in the second read
    with pytest.raises(TraceImportError, match="incorrect length check"):
        import_trace(path)


def test_members_back_to_back_are_each_checked(tmp_path):
    # `cat a.gz b.gz`: the text continues across members, and each member has its own trailer.
    text = trace_text(5000)
    half = len(text) // 2
    first, second = gzip_member(text[:half]), gzip_member(text[half:])
    path = tmp_path / "two.json.gz"
    path.write_bytes(first + second)
    trace, stats = import_trace(path)
    assert trace.num_events == 5000 and stats["json_bytes"] == len(text)
    path.write_bytes(damaged(first, 8) + second)
    with pytest.raises(TraceImportError, match="incorrect data check"):
        import_trace(path)


def test_truncated_or_corrupt_deflate_data_is_one_line(tmp_path):
    text = trace_text(3000)
    gz = gzip_member(text)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gz[: len(gz) // 2])
    with pytest.raises(TraceImportError, match=r"the gzip data ends early \(truncated file: \d+ compressed"):
        import_trace(path)
    # A stored block (level 0) whose length is not the complement its header gives.
    stored = bytearray(gzip_member(text[:1000], level=0))
    stored[13] ^= 0x01  # 10 header bytes, the block's type byte, LEN (2), then NLEN
    path.write_bytes(bytes(stored))
    with pytest.raises(TraceImportError, match="corrupt gzip data near compressed byte") as err:
        import_trace(path)
    assert "\n" not in str(err.value)


def stored_member(text: bytes) -> bytes:
    """One gzip member of one stored deflate block: 23 bytes of framing around the text."""
    n = len(text)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
    block = b"\x01" + n.to_bytes(2, "little") + (n ^ 0xFFFF).to_bytes(2, "little")
    return header + block + text + zlib.crc32(text).to_bytes(4, "little") + n.to_bytes(4, "little")


def test_a_second_member_whose_magic_bytes_straddle_two_reads_is_read(tmp_path):
    # The first member ends one byte before the first read does: the next member's first magic
    # byte is the read's last, its second the next read's first.
    events = json.loads(trace_text(10))["traceEvents"]
    head = b'{"traceEvents": [' + b",".join(json.dumps(e).encode() for e in events[:5])
    first = head[:-1] + b" " * (READ_BYTES - 1 - 23 - len(head)) + head[-1:]
    second = b"," + b",".join(json.dumps(e).encode() for e in events[5:]) + b"]}"
    assert len(stored_member(first)) == READ_BYTES - 1
    path = tmp_path / "straddle.json.gz"
    path.write_bytes(stored_member(first) + stored_member(second))
    trace, stats = import_trace(path)
    assert trace.num_events == 10 and stats["json_bytes"] == len(first) + len(second)
