"""The malformed-input corpus (tests/corpus/import): each file, through the CLI as a user runs it,
gives a report (exit 0) or one line naming the file and what is wrong (exit 2): never a crash, a
traceback or a hang. The same files are replayed under ASan+UBSan and seed the fuzzer
(.ci/sanitize-import.sh)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "import"

# What each broken file must say (after "<file>: "); files not listed here must be read.
ERRORS = {
    "bad_crc.json.gz": "corrupt gzip data",
    "bad_escape.json": "invalid JSON at byte 25 (in traceEvents[0]): Invalid escape character",
    "bad_hex.json": "invalid JSON at byte 25 (in traceEvents[0]): Incorrect hex digit",
    "control_in_string.json": "invalid JSON at byte 26 (in traceEvents[0]): "
    "Invalid escape character in string",
    "deep_in_args.json": "nested more than 64 levels deep",
    "deep_under_key.json": "nested more than 64 levels deep",
    "empty.json": "the file is empty",
    "events_not_objects.json": "none of them an event object",
    "whitespace.json": "the file is empty",
    "literal_typo.json": "invalid JSON at byte 25: Invalid value",
    "lone_high_surrogate.json": "The surrogate pair in string is invalid",
    "missing_colon.json": "invalid JSON at byte 15: Missing a colon",
    "no_trace_events.json": "no traceEvents list",
    "nul_at_16.json": "invalid JSON at byte 16 (in traceEvents[0]): a NUL byte",
    "number_huge_exponent.json": "Number too big",
    "number_long_digits.json": "Number too big",
    "number_minus_only.json": "invalid JSON at byte 23 (in traceEvents[0]): Invalid value",
    "number_miss_exponent.json": "Miss exponent in number",
    "number_miss_fraction.json": "Miss fraction part in number",
    "top_is_string.json": "the top-level JSON value is a string",
    "trailing_comma.json": "invalid JSON at byte 18 (in traceEvents[1]): Invalid value",
    "trailing_garbage.json": "The document root must not be followed by other values",
    "truncated.json": "the text ends early",
    "truncated.json.gz": "the gzip data ends early",
    "unterminated_string.json": "Missing a closing quotation mark",
}


def corpus_files():
    return sorted(p.name for p in CORPUS.iterdir() if p.is_file())


def test_the_corpus_is_there_and_every_error_file_exists():
    names = set(corpus_files())
    assert len(names) >= 30
    assert set(ERRORS) <= names


@pytest.mark.parametrize("name", corpus_files())
def test_corpus_file_gives_a_report_or_one_error_line(name, tmp_path):
    path = CORPUS / name
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(path), "--json", str(tmp_path / "r.json")],
        capture_output=True,
        timeout=120,
    )
    assert b"Traceback" not in proc.stderr, proc.stderr.decode("utf-8", "replace")
    if name in ERRORS:
        assert proc.returncode == 2, proc
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        assert len(lines) == 1, lines
        assert str(path) in lines[0] and ERRORS[name] in lines[0], lines[0]
    else:
        assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
        assert (tmp_path / "r.json").stat().st_size > 0
