"""The terminal layer under ``print(report)`` (gpuprof.report.term): widths in terminal cells,
ellipsis, wrapping with a hanging indent, tables that fit the width, colour only when asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuprof.report.term import Console, Table, cell_len, clip


def test_cells_count_wide_characters_twice_and_combining_marks_not_at_all():
    assert cell_len("abc") == 3
    assert cell_len("日本語") == 6  # East Asian wide: two cells each
    assert cell_len("e\u0301") == 1  # e + combining acute accent: one cell
    assert clip("abcdefgh", 5) == "abcd…"  # 4 characters and the ellipsis: 5 cells
    assert clip("abc", 5) == "abc"
    assert clip("日本語です", 5) == "日本…"  # 2 + 2 + 1 cells; a third wide one would make 6
    assert cell_len(clip("日本語です", 5)) == 5


def test_long_lines_wrap_at_spaces_under_their_label_and_keep_no_trailing_blanks():
    c = Console(width=30)
    c.print("   fix: " + "alpha beta gamma delta epsilon zeta eta theta", indent=8)
    lines = c.text().splitlines()
    assert lines == ["   fix: alpha beta gamma delta", "        epsilon zeta eta theta"]
    assert all(len(line) <= 30 for line in lines)
    c = Console(width=20)
    c.print("x" * 45)  # one word longer than the line: cut where it ends
    assert c.text().splitlines() == ["x" * 20, "x" * 20, "x" * 5]


def test_table_columns_are_two_spaces_apart_numbers_right_names_elided_to_fit():
    t = Table("Kernels (top 2 of 9)")
    t.add_column("name")
    t.add_column("calls", justify="right")
    t.add_column("total (us)", justify="right")
    t.add_row("a_very_long_kernel_name_that_cannot_fit_in_thirty_columns", "5", "1,234")
    t.add_row("short", "12,020", "7")
    c = Console(width=40)
    c.table(t)
    lines = c.text().splitlines()
    # The numbers keep their width (6 and 10 cells), the name gets the rest: 40 - 6 - 10 - 2 * 2.
    assert lines == [
        "Kernels (top 2 of 9)",
        "name                   calls  total (us)",
        "a_very_long_kernel_…       5       1,234",
        "short                 12,020           7",
    ]


def test_colour_codes_only_when_asked_and_styles_close():
    t = Table()
    t.add_column("step", justify="right")
    t.add_row("mean", style="bold")
    plain, coloured = Console(color=False), Console(color=True)
    for c in (plain, coloured):
        c.print(("Kernel", "green"), " 35.7%")
        c.table(t)
    assert "\x1b" not in plain.text()
    assert coloured.text().splitlines()[0] == "\x1b[32mKernel\x1b[0m 35.7%"
    assert "\x1b[1mmean\x1b[0m" in coloured.text()


def test_printing_a_report_does_not_import_rich():
    code = (
        "import sys, gpuprof\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from report_samples import gpu_report\n"
        "text = str(gpu_report())\n"
        "rich = 'rich' in sys.modules or any(m.startswith('rich.') for m in sys.modules)\n"
        "print(rich, 'GPU summary' in text)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_a_table_of_numbers_too_wide_wraps_its_headers_onto_two_lines_at_the_bottom():
    t = Table()
    t.add_column("step", justify="right")
    for h in ("Communication us", "DataLoader us", "CPU Exec us"):
        t.add_column(h, justify="right")
    t.add_row("12", "77,306", "69,317", "14,091")
    c = Console(width=40)
    c.table(t)
    # On one line: 4 + 16 + 13 + 11 cells and 3 gaps of 2 = 50. Headers wrap at their spaces, never
    # inside a word, into two lines at most ("CPU Exec us": 7 cells, "Exec us" under "CPU"), the
    # shorter ones level with the last line: 4 + 13 + 10 + 7 + 6 = 40.
    assert c.text().splitlines() == [
        "      Communication  DataLoader      CPU",
        "step             us          us  Exec us",
        "  12         77,306      69,317   14,091",
    ]
