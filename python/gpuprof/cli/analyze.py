"""``gpuprof analyze PATH [--json OUT]``: the report of an existing PyTorch-profiler trace (a file,
or a folder of them). A folder of per-rank traces (or of gpuprof's saved per-rank reports) of one
distributed job gives one cross-rank report (docs/distributed.md). Loads neither torch nor LibTorch."""

from __future__ import annotations

import contextlib
import os
import sys

from . import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="report on existing PyTorch-profiler (Kineto) trace files",
        description="Read a .json or .json.gz trace written by torch.profiler (or a folder of them, "
        "one report per file) and print where each step's time went.",
    )
    p.add_argument("path", help="trace file, or a folder searched recursively for trace files")
    p.add_argument(
        "--json",
        metavar="OUT",
        dest="json_out",
        help="also write the report as JSON (a list of reports for a folder that is not one job)",
    )
    p.add_argument(
        "--html",
        metavar="OUT",
        dest="html_out",
        help="also write the one-file HTML report (for a folder: one file per trace, "
        "OUT_<n>.html beside OUT)",
    )
    p.add_argument(
        "--ranks",
        action="store_true",
        help="treat the folder's files as the ranks of one job (automatic when the files "
        "carry distributedInfo with world_size > 1 or are gpuprof reports of a job)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes reading the files of a folder (default: the CPUs; each holds "
        "one trace at a time)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        default=None,
        help="read the files on an existing dask.distributed cluster (scheduler address, "
        "e.g. tcp://head:8786); needs `python -m pip install distributed`",
    )
    p.add_argument(
        "--max-memory",
        metavar="SIZE",
        default=None,
        help="the most memory the analysis may hold, e.g. 4G or 512M (default: GPUPROF_MAX_MEMORY, "
        "else half the memory left); a trace with more events than fit is analysed in windows of "
        "steps, its report saying what that left out; a folder's workers divide it (docs/analyze.md, "
        "'Limits')",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        metavar="N",
        help="the device's dense peak in TFLOPS for MFU, where gpuprof's peak table has no row for "
        "it or the trace ran on a CPU (docs/metrics.md, 'MFU and HFU')",
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress line on stderr (shown on a terminal when a read takes over two seconds)",
    )
    p.add_argument(
        "--keep-incomplete-last-step",
        action="store_true",
        help="keep a last step with fewer than 0.8x the device work of the one before "
        "(the old plugin dropped it)",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    import stat

    from ..traces.read import check_path, max_memory_setting, parse_size

    try:
        folder = stat.S_ISDIR(check_path(args.path).st_mode)
    except OSError as e:  # missing, or not allowed: one line saying which
        raise UserError(str(e)) from None
    try:  # GPUPROF_MAX_MEMORY is read where the budget is set; a bad value is said here, once
        max_memory = parse_size(args.max_memory) if args.max_memory is not None else 0
        max_memory_setting()
    except ValueError as e:
        raise UserError(f"--max-memory: {e}" if args.max_memory is not None else str(e)) from None
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise UserError(f"--peak-tflops must be a positive number of TFLOPS, got {args.peak_tflops:g}")
    if folder:
        return _run(args, folder, max_memory)
    args.quick_exit = True  # only files read and written: cli.entry() may skip the teardown
    with _fewer_collections():
        return _run(args, folder, max_memory)


def _run(args, folder: bool, max_memory: int) -> int:
    from ..report.inputs import analyze
    from ..traces.read import TraceImportError

    try:
        if folder:
            from .progress import folder_progress

            result = analyze(
                args.path,
                drop_incomplete_last_step=not args.keep_incomplete_last_step,
                peak_tflops=args.peak_tflops,
                ranks=args.ranks,
                workers=args.workers,
                dask_address=args.dask,
                max_memory=max_memory,
                say=lambda line: print(f"gpuprof analyze: {line}", file=sys.stderr),
                progress=folder_progress(args.quiet),
            )
        else:
            shown = counter = trace_progress = None
            if _progress_possible(args.quiet):  # cli/progress.py loads only for a terminal
                from .progress import export_progress, file_progress

                shown, counter = file_progress(args.path, args.quiet)
                trace_progress = export_progress(args.quiet)
            with shown or contextlib.nullcontext():
                result = analyze(
                    args.path,
                    drop_incomplete_last_step=not args.keep_incomplete_last_step,
                    # The timelines and per-step tables only the JSON and HTML carry.
                    with_step_views=bool(args.json_out or args.html_out),
                    peak_tflops=args.peak_tflops,
                    max_memory=max_memory,
                    import_progress=counter,
                    read_pass=shown.phase if shown else None,
                    trace_progress=trace_progress,
                )
    except (TraceImportError, FileNotFoundError, IsADirectoryError, PermissionError, ValueError) as e:
        raise UserError(str(e)) from None
    except RuntimeError as e:
        if "--dask" in str(e):
            raise UserError(str(e)) from None
        raise
    except OSError as e:  # the folder itself cannot be listed
        raise UserError(str(e)) from None
    if isinstance(result, list):  # a folder of files that are not one job: one report each
        return _write_outputs(args, result, lambda: ["[\n" + ",\n".join(r.to_json() for r in result) + "\n]"])
    return _write_outputs(args, [result], None)


def _progress_possible(quiet: bool) -> bool:
    """Whether a file's read may show progress: not ``--quiet`` and stderr a terminal, as
    ``progress.file_progress`` decides it; otherwise that module is not loaded at all."""
    return not quiet and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


@contextlib.contextmanager
def _fewer_collections():
    """Python's cycle collector less often while one file is analysed: the report is tens of
    thousands of dicts and lists built from the native tables, none of them in a cycle, and at the
    default threshold (a collection every 700 new containers) the collector ran some 40 times over
    them (docs/performance.md, "Start-up"). Every 100,000 it runs once or twice; the thresholds are
    put back afterwards."""

    import gc

    old = gc.get_threshold()
    gc.set_threshold(100_000, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _write_outputs(args, reports: list, payload) -> int:
    """Print the reports; write the JSON text, the pieces ``payload()`` returns (--json; None: the
    one report's, written as it is made, a windowed read's per-step rows streamed from their file),
    and one HTML file per report (--html)."""
    from ..traces.read import display_path

    for i, report in enumerate(reports):
        if i:
            print()
        print(report)
    if args.json_out:
        from ..report.renderers import write_report_file
        from ..traces.atomic import write_text

        try:
            if payload is None:  # one report, streamed: a windowed read's per-step rows from their file
                write_report_file(args.json_out, dict(reports[0].data), end="\n")
            else:
                write_text(args.json_out, *payload(), "\n")
        except OSError as e:
            raise UserError(f"cannot write {display_path(args.json_out)}: {e.strerror}") from None
    if args.html_out:
        from ..traces.export import save_report_files

        stem, ext = os.path.splitext(args.html_out)
        for i, report in enumerate(reports):
            out = args.html_out if len(reports) == 1 else f"{stem}_{i}{ext or '.html'}"
            # The Chrome trace beside it: one that cannot be written is a warning, the HTML is kept.
            written, failed = save_report_files(report, [(out, "html")], True)
            failed = [line.replace(out, display_path(out)) for line in failed]
            if out not in written:
                raise UserError(f"cannot write {failed[-1]}")
            for line in failed:
                print(f"gpuprof analyze: warning: {line}", file=sys.stderr)
    return 0
