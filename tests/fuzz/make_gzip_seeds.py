"""Writes tests/fuzz/gzip_seeds/: the gzip fuzz target's starting inputs (tests/fuzz/gzip_fuzz.cpp),
small .json.gz files made from the JSON seeds beside them, one for each shape of gzip file the
importer reads: a plain member, every optional header field (FEXTRA, FNAME, FCOMMENT, FHCRC),
stored and fixed-Huffman blocks, two members back to back, zero padding after the member, and a
member cut short. Run from the repository's root: python3 tests/fuzz/make_gzip_seeds.py"""

import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds"


def member(
    text: bytes, *, level: int = 6, strategy: int = zlib.Z_DEFAULT_STRATEGY, header: bytes = b""
) -> bytes:
    """One gzip member (RFC 1952) of `text`: the fixed header with the flags `header` needs, the
    optional fields, the raw deflate data, then CRC-32 and length."""
    flags, fields = 0, b""
    if header:
        extra = b"gp\x04\x00fuzz"  # one FEXTRA subfield: id "gp", 4 bytes
        fields = struct.pack("<H", len(extra)) + extra + b"trace.json\x00" + b"made for fuzzing\x00"
        flags = 0x04 | 0x08 | 0x10 | 0x02
    fixed = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, flags, 0, 0, 255)
    head = fixed + fields
    if flags & 0x02:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    deflate = zlib.compressobj(level, zlib.DEFLATED, -15, 8, strategy)
    body = deflate.compress(text) + deflate.flush()
    return head + body + struct.pack("<II", zlib.crc32(text), len(text) & 0xFFFFFFFF)


def main() -> None:
    out = HERE / "gzip_seeds"
    out.mkdir(exist_ok=True)
    skew = (SEEDS / "kernel_clock_skew.json").read_bytes()
    flops = (SEEDS / "flop_args.json").read_bytes()
    memory = (SEEDS / "memory_over_capacity.json").read_bytes()
    seeds = {
        "plain.json.gz": member(skew),
        "all_header_fields.json.gz": member(flops, header=b"yes"),
        "stored_blocks.json.gz": member(memory, level=0),
        "fixed_huffman.json.gz": member(skew, strategy=zlib.Z_FIXED),
        "two_members.json.gz": member(flops) + member(memory),
        "zero_padding.json.gz": member(skew) + b"\x00" * 16,
        "cut_short.json.gz": member(flops)[:-20],
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
