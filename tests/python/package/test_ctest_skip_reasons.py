"""ctest says why it skipped (tests/cpp/ctest_skip_reasons.cmake, run by ctest after the tests via
the build folder's CTestCustom.cmake): each skipped GoogleTest test with its GTEST_SKIP() message,
read from ctest's log of the run (LastTest.log.tmp while ctest runs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "cpp" / "ctest_skip_reasons.cmake"

# ctest's log of two tests, one skipped, as ctest 3.25 and GoogleTest 1.12 write it.
LOG = """\
Start testing: Nov 25 17:26 UTC
----------------------------------------------------------
1/2 Testing: SplitImport.AGzipFile
Output:
----------------------------------------------------------
[ RUN      ] SplitImport.AGzipFile
/src/tests/cpp/io_import_test.cpp:761: Skipped
no gzip program to write the test file; see PATH
[  SKIPPED ] SplitImport.AGzipFile (0 ms)
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] SplitImport.AGzipFile
<end of output>
2/2 Testing: Breakdown.NameRules
[ RUN      ] Breakdown.NameRules
[       OK ] Breakdown.NameRules (0 ms)
<end of output>
"""


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not on PATH")
def test_skipped_tests_are_listed_with_their_reason(tmp_path):
    log = tmp_path / "LastTest.log"
    (tmp_path / "LastTest.log.tmp").write_text(LOG)  # the run in progress: ctest's name for it
    log.write_text("[ RUN      ] Old.Run\nx.cpp:1: Skipped\nan older run\n[  SKIPPED ] Old.Run (0 ms)\n")
    p = subprocess.run(
        ["cmake", f"-DLOG={log}", "-P", str(SCRIPT)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    lines = (p.stdout + p.stderr).strip().splitlines()
    assert lines == [
        "Why the skipped tests were skipped:",
        "  SplitImport.AGzipFile: no gzip program to write the test file, see PATH",
    ]
