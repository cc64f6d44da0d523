"""`gpuprof analyze`'s progress line (gpuprof/cli/progress.py): on a terminal, once a read has taken
GPUPROF_PROGRESS_AFTER_S seconds (2 by default; 0 here, so that no test waits on a clock), one line
redrawn in place with the bytes read of the file's size, the events per second and the time left,
cleared at the end; nothing with --quiet or when stderr is not a terminal. The terminal is a real
pseudo-terminal, read whole after the command ends."""

from __future__ import annotations

import gzip
import io
import json
import os
import pty
import subprocess
import sys

import pytest

from gpuprof import _core
from gpuprof.cli.progress import ReadProgress, count_text, duration_text, progress_line, size_text

CLI = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"


def trace_file(path, steps: int = 3, ops: int = 400) -> int:
    """A Kineto trace of `steps` steps of `ops` host ops each; returns its number of events."""
    events = []
    for s in range(steps):
        t0 = 1000 + s * 10_000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": 9000,
            }
        )
        for i in range(ops):
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": f"aten::op{i % 7}",
                    "pid": 1,
                    "tid": 1,
                    "ts": t0 + 1 + i * 20,
                    "dur": 10,
                }
            )
    text = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text)
    return len(events)


def analyze_on_a_terminal(*args: str, after_s: str = "0") -> tuple[int, str]:
    """Runs `gpuprof analyze ARGS`, stderr on a pseudo-terminal; returns (exit code, all it wrote there)."""
    rc, _, shown = analyze_on_a_terminal_with_output(*args, env=dict(GPUPROF_PROGRESS_AFTER_S=after_s))
    return rc, shown


def analyze_on_a_terminal_with_output(*args: str, env: dict) -> tuple[int, bytes, str]:
    """Runs `gpuprof analyze ARGS` with `env` added to the environment, stderr on a pseudo-terminal;
    returns (exit code, its stdout, all it wrote on the terminal)."""
    main_fd, term_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, "analyze", *args],
        stdout=subprocess.PIPE,
        stderr=term_fd,
        env=dict(os.environ, **env),
    )
    os.close(term_fd)
    shown = b""
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # the terminal's other end closed: the command has ended
            break
        if not data:
            break
        shown += data
    out, _ = proc.communicate(timeout=300)
    os.close(main_fd)
    return proc.returncode, out, shown.decode("utf-8", "replace")


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_file_read_shows_bytes_of_its_size_and_events_then_clears(tmp_path, name):
    path = tmp_path / name
    n = trace_file(path)
    size = path.stat().st_size  # a gzip file's compressed bytes: what is read of it
    rc, shown = analyze_on_a_terminal(str(path))
    assert rc == 0, shown
    # The line as drawn at the end of the read: all of the file, and a rate in events per second.
    line = f"reading {path}: {size_text(size)} of {size_text(size)} (100%), "
    assert line in shown, shown
    assert " events/s" in shown.split(line, 1)[1].split("\r", 1)[0]
    # Cleared before the report: nothing of it is left on the screen.
    assert shown.rstrip("\r\n").endswith("\r\x1b[K"), repr(shown[-200:])
    assert n == 1203


def test_no_line_with_quiet_or_before_the_delay_or_off_a_terminal(tmp_path):
    path = tmp_path / "trace.json"
    trace_file(path)
    rc, shown = analyze_on_a_terminal("--quiet", str(path))
    assert rc == 0 and "reading" not in shown, shown
    # A read shorter than the delay (an hour) shows nothing either.
    rc, shown = analyze_on_a_terminal(str(path), after_s="3600")
    assert rc == 0 and "reading" not in shown, shown
    # stderr to a pipe (logs, CI): nothing.
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "analyze", str(path)],
        capture_output=True,
        env=dict(os.environ, GPUPROF_PROGRESS_AFTER_S="0"),
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr


def test_a_folder_shows_files_read_of_all(tmp_path):
    for i in range(3):
        trace_file(tmp_path / f"rank{i}.json", steps=2, ops=50)
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    rc, shown = analyze_on_a_terminal("--workers", "1", str(tmp_path))
    assert rc == 0, shown
    assert f"reading 3 files ({size_text(total)}): 3 of 3 files (100%), " in shown, shown
    assert " files/s" in shown


def test_the_import_counts_every_event_and_the_file_bytes(tmp_path):
    from gpuprof.traces.read import import_trace

    path = tmp_path / "t.json"
    n = trace_file(path)
    progress = _core.ImportProgress()
    assert (progress.bytes, progress.events) == (0, 0)
    _trace, stats = import_trace(path, progress=progress)
    assert progress.events == stats["records"] == n
    assert progress.bytes == path.stat().st_size


def test_the_line_says_how_much_of_how_much_the_rate_and_the_time_left():
    # 1 GB of 4 GB in 2 s: 3 GB left at 0.5 GB/s is 6 s; 5 M events in 2 s is 2.5 M/s.
    assert (
        progress_line("reading t.json", 1e9, 4e9, "bytes", 5_000_000, "events", 2.0)
        == "reading t.json: 1.00 GB of 4.00 GB (25%), 2.50 M events/s, 0:06 left"
    )
    # A pipe has no size: no share, no time left; the rate of bytes when no events are counted.
    assert (
        progress_line("reading -", 3e6, None, "bytes", None, "events", 2.0) == "reading -: 3.00 MB, 1.50 MB/s"
    )
    # Files of a folder: 3 of 10 in 6 s leaves 7 at 0.5 a second, 14 s.
    assert (
        progress_line("reading 10 files", 3, 10, "files", None, "events", 6.0)
        == "reading 10 files: 3 of 10 files (30%), 0.50 files/s, 0:14 left"
    )
    # More read than the size (two threads' chunks overlap at the split): held at the size.
    assert (
        progress_line("r", 5e9, 4e9, "bytes", 10, "events", 1.0)
        == "r: 4.00 GB of 4.00 GB (100%), 10.0 events/s"
    )
    assert [size_text(n) for n in (0, 999, 1000, 12_345, 999_499, 999_600, 4.2e15)] == [
        "0 B",
        "999 B",
        "1.00 kB",
        "12.3 kB",
        "999 kB",
        "1.00 MB",
        "4200 TB",
    ]
    assert [count_text(n) for n in (0.5, 999, 12_345, 2.5e6)] == ["0.50", "999", "12.3 k", "2.50 M"]
    assert [duration_text(s) for s in (0, 59.4, 61, 3600, 3725)] == [
        "0:00",
        "0:59",
        "1:01",
        "1:00:00",
        "1:02:05",
    ]


def test_a_closed_stream_does_not_stop_the_read():
    class Gone(io.StringIO):
        def write(self, text):
            raise OSError("terminal gone")

    with ReadProgress("r", 10, lambda: (5, None), stream=Gone(), enabled=True, after_s=0) as shown:
        pass
    assert not shown.enabled


def test_a_line_wider_than_the_terminal_is_cut_to_one_line():
    """A long path would wrap, and each redraw would then leave a line behind: the line is cut."""
    main_fd, term_fd = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(term_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))  # 40 columns
    with open(term_fd, "w", encoding="utf-8", closefd=True) as term:
        label = "reading /a/very/long/path/to/a/trace/file.pt.trace.json"
        with ReadProgress(label, 4e9, lambda: (1e9, 10), stream=term, enabled=True, after_s=0):
            pass
    shown = b""
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.close(main_fd)
    drawn = [part for part in shown.decode().split("\r") if part.strip() and part != "\x1b[K"]
    assert drawn, shown
    for part in drawn:
        text = part.replace("\x1b[K", "").rstrip("\n")
        assert len(text) <= 39 and text.endswith("…"), repr(text)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_trace_read_in_windows_shows_each_pass_over_the_file(tmp_path, name):
    # Six steps of 1,000 events and a memory budget of 1 MiB (4,096 events at 256 bytes each): the
    # trace is read in windows of one step each (half the cap, with a context step on each side),
    # after a pass that finds the steps and one that copies each window's events into a file of
    # its own. Each pass's line is drawn as it ended before the next begins.
    path = tmp_path / name
    trace_file(path, steps=6, ops=999)
    size = path.stat().st_size
    rc, out, text = analyze_on_a_terminal_with_output(
        "--max-memory", "1M", str(path), env=dict(GPUPROF_PROGRESS_AFTER_S="0", TMPDIR=str(tmp_path))
    )
    assert rc == 0, text
    assert b"in 6 windows of consecutive steps" in out, out[:600]
    whole = f"{size_text(size)} of {size_text(size)} (100%)"
    assert f"reading {path} (finding its steps): {whole}, " in text, text
    assert f"reading {path} (copying it into 6 windows): {whole}, " in text, text
    # Each window reads its own file (plain JSON): all of it, with its events per second.
    for i in range(1, 7):
        line = text.split(f"reading {path} (window {i} of 6): ", 1)
        assert len(line) == 2, text
        drawn = line[1].split("\r", 1)[0]
        assert "(100%)" in drawn and " events/s" in drawn, drawn
    assert "windows" in text and "window 7" not in text
    assert text.rstrip("\r\n").endswith("\r\x1b[K"), repr(text[-200:])


def _html_in_six_windows(tmp_path):
    """A trace of six steps of 999 operators, read in six windows of one step each for an HTML
    report on a terminal, its progress line drawn at once: (path, its size, exit code, stderr)."""
    path = tmp_path / "trace.json"
    trace_file(path, steps=6, ops=999)
    rc, _out, text = analyze_on_a_terminal_with_output(
        "--max-memory",
        "1M",
        str(path),
        "--html",
        str(tmp_path / "r.html"),
        env=dict(GPUPROF_PROGRESS_AFTER_S="0", TMPDIR=str(tmp_path)),
    )
    return path, path.stat().st_size, rc, text


def test_a_trace_read_in_windows_for_html_reads_the_drawn_steps_windows_again(tmp_path):
    # The same six windows of one step each, for an HTML report: after the windows, the window of
    # the slowest step and that of the median one (each a window of its own here) are read again
    # from the trace itself, each its own pass on the line.
    path, size, rc, text = _html_in_six_windows(tmp_path)
    assert rc == 0, text
    again = [part for part in text.split(f"reading {path} (window ")[1:] if "again" in part.split(")")[0]]
    assert len(again) == 2, text
    for part in again:
        assert " of 6 again, for the step timelines): " in part
        assert f"{size_text(size)} of {size_text(size)} (100%)" in part.split("\r", 1)[0]


def test_the_chrome_trace_of_a_trace_read_in_windows_shows_its_passes_too(tmp_path):
    # The same six windows of one step each, for an HTML report: its Chrome trace is written after
    # the analysis's line has closed, reading the file again (its steps found, its events copied into
    # six window files, each window read): a line of its own, each pass drawn as it ended.
    path, size, rc, text = _html_in_six_windows(tmp_path)
    assert rc == 0, text
    assert (tmp_path / "r.trace.json.gz").is_file()
    whole = f"{size_text(size)} of {size_text(size)} (100%)"
    # After the analysis's own passes, in this order.
    writing = text.split("writing the Chrome trace", 1)
    assert len(writing) == 2 and f"reading {path} (window 6 of 6)" in writing[0], text
    assert f"writing the Chrome trace (finding its steps): {whole}, " in text, text
    assert f"writing the Chrome trace (copying it into 6 windows): {whole}, " in text, text
    for i in range(1, 7):
        line = text.split(f"writing the Chrome trace (window {i} of 6): ", 1)
        assert len(line) == 2, text
        drawn = line[1].split("\r", 1)[0]
        assert "(100%)" in drawn and " events/s" in drawn, drawn
    assert "writing the Chrome trace (window 7" not in text
    assert text.rstrip("\r\n").endswith("\r\x1b[K"), repr(text[-200:])
    # --quiet: neither line; the trace is written all the same.
    (tmp_path / "r.trace.json.gz").unlink()
    rc, _out, text = analyze_on_a_terminal_with_output(
        "--quiet",
        "--max-memory",
        "1M",
        str(path),
        "--html",
        str(tmp_path / "r.html"),
        env=dict(GPUPROF_PROGRESS_AFTER_S="0", TMPDIR=str(tmp_path)),
    )
    assert rc == 0 and "writing" not in text and "reading" not in text, text
    assert (tmp_path / "r.trace.json.gz").is_file()
