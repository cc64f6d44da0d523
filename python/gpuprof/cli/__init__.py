"""The ``gpuprof`` command: one module per verb (``gpuprof.cli.<verb>``), each with
``add_parser(subparsers)`` and ``run(args) -> int``.

User mistakes (a missing file, a bad option) are one clear line on stderr and exit code 2; a failed
check is exit code 1. Importing this package loads neither torch nor LibTorch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Verb modules, in the order `gpuprof --help` lists them.
VERBS = [
    "run",
    "capture",
    "top",
    "analyze",
    "scaling",
    "export",
    "report",
    "diff",
    "check",
    "findings",
    "mcp",
    "doctor",
]


from .._errors import UserError  # noqa: E402, F401 (the CLI's name for it)


def _terminal_columns() -> int:
    """The width argparse's help takes (shutil.get_terminal_size's columns: $COLUMNS, else the
    terminal's, else 80), without importing shutil, which loads bz2 and lzma: argparse makes a help
    formatter for every option it adds, so `gpuprof analyze` paid for them on every run."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(
            prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width
        )


class _Parser(argparse.ArgumentParser):
    """argparse's parser with ``_HelpFormatter``; the verbs' parsers (``add_subparsers``) are of this
    class too."""

    def __init__(self, *args, formatter_class=_HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser(verbs: list[str] | None = None) -> argparse.ArgumentParser:
    """The command's parser with the given verbs' subcommands (all of them by default)."""
    parser = _Parser(
        prog="gpuprof", description="Profile PyTorch training loops and explain where each step's time goes."
    )
    from .._build_info import GPUPROF_VERSION

    parser.add_argument("--version", action="version", version=f"gpuprof {GPUPROF_VERSION}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in verbs or VERBS:
        importlib.import_module(f"{__name__}.{verb}").add_parser(sub)
    parser.set_defaults(verb_parsers=sub.choices)
    return parser


def _named_verb(argv: list[str]) -> str | None:
    """The verb when the command line starts with one (`gpuprof analyze ...`), else None."""
    return argv[0] if argv and argv[0] in VERBS else None


def _negative_values_joined(argv: list[str], verb_parser: argparse.ArgumentParser) -> list[str]:
    """``--steps -1:3`` as ``--steps=-1:3``: argparse takes a value that starts with "-" (and is not a
    plain negative number) for an option and says "expected one argument"; joined, the verb's own
    check says what is wrong with the value. Options only: the scan stops at the first positional
    (``gpuprof run script.py ...``: what follows is the script's)."""
    out, i = list(argv[:1]), 1
    while i < len(argv):
        token = argv[i]
        out.append(token)
        i += 1
        if token == "--" or not token.startswith("-"):
            out += argv[i:]
            break
        action = verb_parser._option_string_actions.get(token)
        if action is None or action.nargs == 0 or i >= len(argv):
            continue
        if argv[i].startswith("-") and argv[i] not in verb_parser._option_string_actions:
            out[-1] = f"{token}={argv[i]}"
        else:
            out.append(argv[i])
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    global _quick_exit
    _quick_exit = False
    argv = sys.argv[1:] if argv is None else list(argv)
    # Only the named verb's module is imported (the others' imports cost ~10 ms of start-up);
    # `gpuprof`, `gpuprof --help` and a mistyped verb get the whole parser and its list of verbs.
    verb = _named_verb(argv)
    parser = build_parser([verb] if verb else None)
    if verb:
        argv = _negative_values_joined(argv, parser.get_default("verb_parsers")[verb])
    args, extra = parser.parse_known_args(argv)
    if extra:  # a mistyped option: the verb's own usage says which options it takes
        verb_parser = (getattr(args, "verb_parsers", None) or {}).get(getattr(args, "verb", None), parser)
        verb_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    try:
        rc = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        _quick_exit = bool(getattr(args, "quick_exit", False))
        return rc
    except UserError as e:
        from ..report.sections import printable

        # One line whatever the message quotes (a path or a trace name with a newline or an ANSI
        # escape in it shows as \n, \x1b).
        print(f"gpuprof {args.verb}: {printable(e)}", file=sys.stderr)
        return 2
    except MemoryError:
        # Past the caps that refuse an input before memory runs out (the process's memory was
        # already spent elsewhere): still one line, and the settings that bound an input.
        print(
            f"gpuprof {args.verb}: out of memory reading the input (GPUPROF_MAX_EVENTS and "
            "GPUPROF_MAX_REPORT_MIB bound what one input may take: docs/analyze.md, 'Limits')",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"gpuprof {args.verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuprof analyze T | head`): stop quietly, as other tools do. Python
        # would report the pipe again when it flushes stdout at exit, so point stdout at nothing.
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a program killed by the broken pipe


# Set by a verb that only read files and wrote its output (`analyze` of one file): nothing is left
# to clean up, so entry() ends the process without Python's teardown of every loaded module (about
# 8 ms of a 0.15 s `gpuprof analyze`, docs/performance.md). Never for `run` (the user's script's
# atexit handlers must run) nor for a folder (worker processes, a dask client).
_quick_exit = False


def entry(argv: list[str] | None = None) -> None:
    """The ``gpuprof`` command (the console script and ``python -m gpuprof``): ``main()``, then the
    process exits with its code."""
    rc = main(argv)
    if _quick_exit:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # let the interpreter's own exit report it as it always has
        else:
            os._exit(rc)
    sys.exit(rc)
