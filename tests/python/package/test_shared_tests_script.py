""".ci/shared-tests.py: which test files .ci/test reruns from a checkout with no ../shared beside it.
It picks them by what their code reads, so hand-built test folders cover each way in and the words
that must not count (a docstring or a comment that says "shared")."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / ".ci" / "shared-tests.py"

FILES = {
    "_traces.py": 'from pathlib import Path\nTRACES = Path(__file__).parent / "shared" / "traces"\n',
    "_helper.py": "from _traces import TRACES\n\nBIG = TRACES / 'big'\n",
    "conftest.py": "from _traces import TRACES as SHARED_TRACES\n",
    "test_imports_helper.py": "from _traces import TRACES\n\ndef test_a():\n    assert TRACES\n",
    "test_through_helper.py": "import _helper\n\ndef test_b():\n    assert _helper.BIG\n",
    "test_fixture.py": "def test_c(shared_traces):\n    assert shared_traces\n",
    "test_usefixtures.py": "import pytest\n\n@pytest.mark.usefixtures('shared_traces')\n"
    "def test_d():\n    pass\n",
    "test_own_path.py": "from pathlib import Path\n\nT = Path('.').parent / 'shared' / 'traces'\n",
    "test_dotdot.py": "P = '../shared/traces/x.json'\n",
    "test_docstring_only.py": (
        '"""Timings on this shared 2-CPU machine; the real traces live in ../shared/traces."""\n\n'
        "def test_e():\n"
        '    """A shared object, built here."""\n'
        "    # not ../shared either\n"
        "    name = 'lib_shared_thing'\n"
        "    assert name\n"
    ),
    "test_shared_word_in_names.py": "shared_mem_bytes = 0\n\ndef test_f():\n    shared = 1\n",
}


def _run(folder: Path) -> list:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, check=True, timeout=120
    )
    return sorted(Path(line).name for line in out.stdout.splitlines())


def test_picks_the_files_whose_code_reads_shared_and_no_other(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    assert _run(tmp_path) == [
        "test_dotdot.py",
        "test_fixture.py",
        "test_imports_helper.py",
        "test_own_path.py",
        "test_through_helper.py",
        "test_usefixtures.py",
    ]


def test_the_repository_input_pipeline_tests_are_not_picked_by_their_docstring():
    # test_input_pipeline.py says "shared 2-CPU machine" in its docstring and reads no trace.
    picked = _run(REPO / "tests" / "python")
    assert "test_input_pipeline.py" not in picked
    assert "test_import_fidelity.py" in picked  # reads ../shared/traces through the traces helper


def test_a_folder_that_is_not_there_is_an_error_that_says_so(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "is not a folder" in out.stderr
