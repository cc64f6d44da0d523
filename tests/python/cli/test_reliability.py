"""Hostile and broken input, each as the reproducer that once crashed or misled (the reliability
issue): no segfault, no traceback, one line naming the file and exit 2; strings from outside cannot
change a Markdown report's structure; a closed pipe is not an error; `gpuprof diff` compares
operators by their host time."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_samples import cpu_report_dict

import gpuprof
from gpuprof.cli import main


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=300, cwd=cwd)


def one_error_line(proc: subprocess.CompletedProcess, path_fragment: bytes) -> str:
    assert proc.returncode == 2, proc
    assert b"Traceback" not in proc.stderr
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    assert len(lines) == 1, lines
    assert path_fragment.decode("utf-8", "replace") in lines[0] or path_fragment in proc.stderr
    return lines[0]


STEP = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10}


def test_deep_nesting_under_a_metadata_key_is_an_error_not_a_segfault(tmp_path):
    # 100,000 nested lists under a key that is captured as metadata (it used to skip the depth limit
    # and overflow the parser's stack: exit 139).
    n = 100_000
    path = tmp_path / "deep.json"
    path.write_bytes(b'{"m":' + b"[" * n + b"]" * n + b',"traceEvents":[]}')
    line = one_error_line(cli("analyze", str(path)), str(path).encode())
    assert "nested more than 64 levels" in line


def test_invalid_utf8_in_a_metadata_key_is_cleaned(tmp_path):
    path = tmp_path / "key.json"
    path.write_bytes(b'{"traceEvents":[' + json.dumps(STEP).encode() + b'],"k\xff":1,"v":{"\xfex":"\xfd"}}')
    report = gpuprof.analyze(path)  # no UnicodeDecodeError: names are cleaned to U+FFFD
    md = report.to_dict()["metadata"]
    assert md["k\ufffd"] == "1"
    assert "\ufffd" in md["v"]
    proc = cli("analyze", str(path))
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr


def test_a_file_name_that_is_not_utf8_as_argument_and_inside_a_folder(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    raw = os.fsencode(folder) + b"/rank\xff.json"
    with open(raw, "w") as f:
        json.dump({"traceEvents": [STEP]}, f)
    shown = os.fsdecode(raw)
    report = gpuprof.analyze(shown)
    assert report.source["path"].endswith("rank\\xff.json")  # printable, says which bytes
    assert [r.source["path"] for r in gpuprof.analyze(folder)] == [report.source["path"]]
    for target in (raw, os.fsencode(folder)):
        proc = subprocess.run(
            [sys.executable, "-m", "gpuprof", "analyze", target], capture_output=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        assert b"Traceback" not in proc.stderr and b"rank\\xff.json" in proc.stdout

    bad = os.fsencode(folder) + b"/broken\xfe.json"
    with open(bad, "wb") as f:
        f.write(b'{"traceEvents": [1, 2')
    with pytest.raises(gpuprof.TraceImportError) as e:
        gpuprof.analyze(os.fsdecode(bad))
    assert os.fsencode(e.value.path) == bad  # round-trips to the file
    assert "broken\\xfe.json" in str(e.value)
    one_error_line(
        subprocess.run([sys.executable, "-m", "gpuprof", "analyze", bad], capture_output=True, timeout=300),
        b"broken\\xfe.json",
    )


def test_a_huge_step_number_does_not_overflow(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"traceEvents": [{**STEP, "name": "ProfilerStep#99999999999999999999999"}]}))
    report = gpuprof.analyze(path)
    assert len(report.steps) == 1  # still a step marker; just not a usable number


HOSTILE = "evil\n# Heading\n<img src=x onerror=alert(1)>`x`\r\n| a | b |\x1b[31m"


def _markdown_is_inert(md: str) -> None:
    # Inside a code span nothing is markup; outside one, none of the hostile text may appear.
    import re

    for line in md.splitlines():
        assert not line.startswith("# Heading") and "\x1b" not in line
        outside = re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)
        assert "<img" not in outside and "# Heading" not in outside, line


def test_markdown_outputs_keep_outside_strings_inert(tmp_path, capsys):
    data = copy.deepcopy(cpu_report_dict())
    data["source"] = {**data.get("source", {}), "path": HOSTILE}
    for dl in data.get("dataloaders", []) or []:
        dl["dataset"] = HOSTILE
    path = tmp_path / "report.json"
    gpuprof.Report.from_dict(data).to_json(path)
    assert main(["report", str(path), "-f", "md"]) == 0
    md = capsys.readouterr().out
    _markdown_is_inert(md)
    assert "evil\\n# Heading" in md  # shown, escaped, inside one code span

    hostile_file = tmp_path / "evil\n# Heading `x`.json"
    gpuprof.Report.from_dict(cpu_report_dict()).to_json(hostile_file)
    assert main(["diff", str(hostile_file), str(path), "-f", "md"]) == 0
    _markdown_is_inert(capsys.readouterr().out)
    summary = tmp_path / "summary.md"
    os.environ["GITHUB_STEP_SUMMARY"] = str(summary)
    try:
        assert main(["check", str(hostile_file), "--max", "step_time_ms=100000"]) == 0
    finally:
        del os.environ["GITHUB_STEP_SUMMARY"]
    _markdown_is_inert(summary.read_text())
    assert "evil\\n# Heading" in summary.read_text()


def test_a_closed_pipe_ends_quietly(tmp_path):
    # `gpuprof report R | head -1`: the reader leaves after one line.
    path = tmp_path / "r.json"
    gpuprof.Report.from_dict(cpu_report_dict()).to_json(path)
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        f"{sys.executable} -c '{code}' report {path} -f text | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.startswith("gpuprof step breakdown")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_diff_compares_operators_by_host_time(tmp_path, capsys):
    base = copy.deepcopy(cpu_report_dict())
    new = copy.deepcopy(base)
    op = max(new["operators"], key=lambda r: r["host_total_us"])
    op["host_total_us"] *= 2
    paths = []
    for name, d in (("base.json", base), ("new.json", new)):
        gpuprof.Report.from_dict(d).to_json(tmp_path / name)
        paths.append(str(tmp_path / name))
    assert main(["diff", *paths, "-f", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["tables"]["operators"]["rows"]
    assert out["tables"]["operators"]["time"] == "host_total_us"
    top = rows[0]
    assert top["delta_us"] == pytest.approx(op["host_total_us"] / 2) and top["base_us"] > 0


def test_diff_sums_an_older_reports_operator_rows_by_name(tmp_path, capsys):
    # A schema 3 report whose operators had recorded shapes holds a row per name and shapes:
    # aten::mm on two shapes, 100 + 300 us. The newer report's one aten::mm row of 400 us is the
    # same time: no change (comparing with the last of the old rows said +100 us).
    base = copy.deepcopy(cpu_report_dict())
    new = copy.deepcopy(base)
    base["schema_version"] = 3
    row = {"calls": 1, "host_self_us": 1.0, "device_self_us": 0.0, "device_total_us": 0.0}
    base["operators"] = [
        {"name": "aten::mm", "input_shapes": "[[8, 4], [4, 4]]", **row, "host_total_us": 100.0},
        {"name": "aten::mm", "input_shapes": "[[64, 4], [4, 4]]", **row, "host_total_us": 300.0},
    ]
    new["operators"] = [{"name": "aten::mm", **row, "host_total_us": 400.0}]
    paths = []
    for name, d in (("base.json", base), ("new.json", new)):
        (tmp_path / name).write_text(json.dumps(d))
        paths.append(str(tmp_path / name))
    assert main(["diff", *paths, "-f", "json"]) == 0
    (mm,) = json.loads(capsys.readouterr().out)["tables"]["operators"]["rows"]
    assert (mm["name"], mm["base_us"], mm["new_us"], mm["delta_us"]) == ("aten::mm", 400.0, 400.0, 0.0)


def test_binary_and_sparse_files_fail_at_once_at_the_first_bad_byte(tmp_path):
    proc = cli("analyze", "/dev/zero")  # used to run forever, growing 100 MB/s
    assert "invalid JSON at byte 0: a NUL byte" in one_error_line(proc, b"/dev/zero")
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:  # 5 GB, all of it a hole after byte 15
        f.write(b'{"traceEvents":')
        f.truncate(5 << 30)
    proc = cli("analyze", str(sparse))
    assert "invalid JSON at byte 15: a NUL byte" in one_error_line(proc, str(sparse).encode())


@pytest.mark.parametrize("gz", [False, True])
def test_one_huge_string_stops_at_the_token_limit(tmp_path, gz):
    # A 3 MiB name with the limit set to 1 MiB (the default is 64 MiB): an error at the limit,
    # not a buffer doubling until memory runs out.
    import gzip

    text = b'{"traceEvents":[{"name":"' + b"a" * (3 << 20) + b'"}]}'
    path = tmp_path / ("big.json.gz" if gz else "big.json")
    path.write_bytes(gzip.compress(text, 1) if gz else text)
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(path)],
        capture_output=True,
        timeout=300,
        env={**os.environ, "GPUPROF_MAX_TOKEN_MIB": "1"},
    )
    line = one_error_line(proc, str(path).encode())
    assert "a single JSON string or number is longer than 1 MiB" in line and "GPUPROF_MAX_TOKEN_MIB" in line


def test_ctrl_c_stops_a_long_import_within_a_second(tmp_path):
    # An endless trace on a pipe: the import never ends by itself; SIGINT must end it quickly.
    import signal
    import time

    writer = (
        "import sys\nw = sys.stdout.buffer\nw.write(b'{\"traceEvents\":[')\n"
        'ev = b\'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1,"dur":1},\' * 1000\n'
        "try:\n    while True: w.write(ev)\nexcept BrokenPipeError:\n    pass\n"
    )
    producer = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE)
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    reader = subprocess.Popen(
        [sys.executable, "-c", code, "analyze", "/dev/stdin"],
        stdin=producer.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    producer.stdout.close()
    time.sleep(3.0)  # well inside the import by now
    assert reader.poll() is None
    sent = time.monotonic()
    reader.send_signal(signal.SIGINT)
    _, err = reader.communicate(timeout=30)
    waited = time.monotonic() - sent
    producer.kill()
    assert reader.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err
    assert waited < 5.0, waited  # about one chunk; generous for a loaded machine


def test_a_fifo_without_a_writer_is_reported_not_waited_on_forever(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    code = "import sys; from gpuprof.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", str(fifo)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "GPUPROF_FIFO_WAIT_S": "1"},
    )
    assert "a FIFO that no process is writing to" in one_error_line(proc, str(fifo).encode())


def test_a_fifo_with_a_writer_is_read(tmp_path):
    import threading

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    text = json.dumps({"traceEvents": [STEP]}).encode()

    def write():
        with open(fifo, "wb") as f:
            f.write(text)

    t = threading.Thread(target=write)
    t.start()
    report = gpuprof.analyze(fifo)
    t.join(10)
    assert len(report.steps) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the command as another user")
def test_permission_problems_are_named_as_such(tmp_path):
    # Root reads everything, so the command runs as `nobody`, in a folder it may search (pytest's
    # own temporary folders are private to root).
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="gpuprof-perm-", dir="/tmp"))
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "rank0.json").write_text(json.dumps({"traceEvents": [STEP]}))
    unreadable = tmp_path / "unreadable.json"
    unreadable.write_text(json.dumps({"traceEvents": [STEP]}))
    os.chmod(tmp_path, 0o755)
    os.chmod(locked, 0o000)
    os.chmod(unreadable, 0o000)
    # Load every module the command needs now: `nobody` cannot read the interpreter's folders.
    readable = tmp_path / "readable.json"
    readable.write_text(json.dumps({"traceEvents": [STEP]}))
    assert main(["analyze", str(readable)]) == 0
    readable_folder = tmp_path / "readable_folder"  # and the folder path's modules
    readable_folder.mkdir()
    (readable_folder / "rank0.json").write_text(json.dumps({"traceEvents": [STEP]}))
    assert main(["analyze", str(readable_folder)]) == 0

    def as_nobody(*args):
        # A forked child that becomes `nobody` runs the CLI (the interpreter under /root could not
        # be started by that user); its stderr and exit code come back as a CompletedProcess.
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                os.dup2(w, 2)
                os.setuid(65534)
                sys.stderr = os.fdopen(2, "w", errors="backslashreplace")
                rc = main(list(args))
                sys.stderr.flush()
            except BaseException:
                import traceback

                os.write(2, traceback.format_exc().encode())
                rc = 99
            os._exit(rc)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            err = f.read()
        _, status = os.waitpid(pid, 0)
        return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status), b"", err)

    try:
        for target, words in (
            (locked, b"permission denied (cannot list this folder)"),
            (locked / "rank0.json", b"permission denied"),
            (unreadable, b"Permission denied"),
        ):
            proc = as_nobody("analyze", str(target))
            line = one_error_line(proc, str(target).encode())
            assert words.decode() in line and "no such file" not in line, line
    finally:
        os.chmod(locked, 0o755)
        shutil.rmtree(tmp_path, ignore_errors=True)
