"""``gpuprof analyze PATH [--json OUT]``: the report of an existing PyTorch-profiler trace (a file,
or a folder of them). A folder of per-rank traces (or of gpuprof's saved per-rank reports) of one
distributed job gives one cross-rank report (docs/distributed.md). Loads neither torch nor LibTorch."""

from __future__ import annotations

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
        help="also write the report as JSON (a list of reports for a folder)",
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
        "--peak-tflops",
        type=float,
        default=None,
        metavar="N",
        help="the device's dense peak in TFLOPS for MFU, where gpuprof's peak table has no row for "
        "it or the trace ran on a CPU (docs/metrics.md, 'MFU and HFU')",
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

    from ..report.build import analyze_file
    from ..report.text import progress
    from ..traces.read import TraceImportError, check_path

    try:
        folder = stat.S_ISDIR(check_path(args.path).st_mode)
    except OSError as e:  # missing, or not allowed: one line saying which
        raise UserError(str(e)) from None
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise UserError(f"--peak-tflops must be a positive number of TFLOPS, got {args.peak_tflops:g}")
    if folder:
        return _run_folder(args)
    args.quick_exit = True  # only files read and written: cli.entry() may skip the teardown
    files = [args.path]  # one file (a folder is every rank's file: _run_folder)
    reports = []
    # On a terminal, a bar over the files (a pulsing one for a single file: the import runs in C++
    # without the GIL, so the bar keeps moving); nothing in logs and CI output.
    size_mb = sum(os.path.getsize(f) for f in files) / 1e6
    with progress(
        f"analysing {len(files)} trace file{'s' if len(files) > 1 else ''} ({size_mb:.0f} MB)", total=None
    ) as advance:
        for f in files:
            try:
                # The timelines and per-step tables only the JSON and HTML carry.
                reports.append(
                    analyze_file(
                        f,
                        drop_incomplete_last_step=not args.keep_incomplete_last_step,
                        with_step_views=bool(args.json_out or args.html_out),
                        peak_tflops=args.peak_tflops,
                    )
                )
            except (TraceImportError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
                raise UserError(str(e)) from None
            advance()
    return _write_outputs(args, reports, lambda: reports[0].to_json())


def _run_folder(args) -> int:
    """A folder is map-reduce over its files (gpuprof.analysis.summaries)."""
    from ..analysis.summaries import summarize_file, summarize_files
    from ..report.build import build_report, cross_rank_report
    from ..report.sections import printable
    from ..report.text import progress
    from ..traces.folders import rank_files
    from ..traces.read import TraceImportError, display_path

    unrecognised: list = []
    try:
        files = rank_files(args.path, unrecognised)
    except OSError as e:  # the folder itself cannot be listed
        raise UserError(str(e)) from None
    if not files:
        raise UserError(
            f"{display_path(args.path)}: no trace files (*.json.gz, or *.json with traceEvents) and no "
            "gpuprof reports in this folder"
        )
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be 1 or more, got {args.workers}")
    if unrecognised:  # listed and skipped: neither a trace nor a gpuprof report
        names = ", ".join(printable(display_path(p)) for p in unrecognised[:5])
        more = f" and {len(unrecognised) - 5} more" if len(unrecognised) > 5 else ""
        print(
            f"gpuprof analyze: skipped {len(unrecognised)} file(s) that are neither a trace nor a gpuprof "
            f"report: {names}{more}",
            file=sys.stderr,
        )
    drop = not args.keep_incomplete_last_step
    keep = "all" if len(files) <= 64 else "rank0"
    size_mb = sum(os.path.getsize(f) for f in files) / 1e6
    skipped: list[dict] = []  # files that cannot be read: named, and the others reported
    try:
        with progress(
            f"analysing {len(files)} file{'s' if len(files) > 1 else ''} ({size_mb:.0f} MB)", total=len(files)
        ) as advance:
            results = summarize_files(
                files,
                workers=args.workers,
                dask_address=args.dask,
                drop_incomplete_last_step=drop,
                keep_report=keep,
                on_done=advance,
                skipped=skipped,
                peak_tflops=args.peak_tflops,
            )
    except (TraceImportError, FileNotFoundError, IsADirectoryError, PermissionError, ValueError) as e:
        raise UserError(str(e)) from None
    except RuntimeError as e:
        if "--dask" in str(e):
            raise UserError(str(e)) from None
        raise
    if skipped and len(skipped) == len(files):
        first = skipped[0]
        raise UserError(
            f"no file of {display_path(args.path)} could be read: {first['path']}: {first['error']}"
            + (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else "")
        )
    for s in skipped:  # exit status 0: the report of the others is made, and says so
        print(f"gpuprof analyze: skipped {printable(s['path'])}: {printable(s['error'])}", file=sys.stderr)
    read = [(f, r) for f, r in zip(files, results) if r is not None]
    job = args.ranks or any(s.get("world_size", 1) > 1 for _f, (s, _d) in read)
    if job:
        reports = [cross_rank_report([r for _f, r in read], skipped=skipped)]
        payload = lambda: reports[0].to_json()  # noqa: E731 (built only for --json)
    else:
        reports, idle = [], []
        for f, (_s, d) in read:
            report = build_report(
                analysed=d
                if d is not None
                else summarize_file(str(f), drop, keep_report="all", peak_tflops=args.peak_tflops)[1]
            )
            (idle if _no_work_in_steps(report) else reports).append((f, report))
        if reports:  # a folder of nothing but idle traces still shows them, as they are
            for f, _report in idle:
                print(
                    f"gpuprof analyze: left out {printable(display_path(f))}: its steps hold no recorded "
                    "work (a torch.profiler cycle's trailing trace: the next cycle's warm-up only)",
                    file=sys.stderr,
                )
        reports = [r for _f, r in (reports or idle)]
        payload = lambda: "[\n" + ",\n".join(r.to_json() for r in reports) + "\n]"  # noqa: E731
    return _write_outputs(args, reports, payload)


def _no_work_in_steps(report) -> bool:
    """No step, or steps of nothing but Other: no operator, range, data loading or device work was
    recorded in them (what torch.profiler's schedule writes for the warm-up of a cycle that never
    ran)."""
    from ..analysis import CATEGORIES

    avg = report.average
    return not report.steps or all(not avg.get(f"{key}_us") for key, _name in CATEGORIES if key != "other")


def _write_outputs(args, reports: list, payload) -> int:
    """Print the reports; write the JSON text ``payload()`` (--json) and one HTML file per report
    (--html)."""
    from ..traces.read import display_path

    for i, report in enumerate(reports):
        if i:
            print()
        print(report)
    if args.json_out:
        from ..traces.atomic import write_text

        try:
            write_text(args.json_out, payload() + "\n")
        except OSError as e:
            raise UserError(f"cannot write {display_path(args.json_out)}: {e.strerror}") from None
    if args.html_out:
        stem, ext = os.path.splitext(args.html_out)
        for i, report in enumerate(reports):
            out = args.html_out if len(reports) == 1 else f"{stem}_{i}{ext or '.html'}"
            try:
                report.to_html(out)
            except OSError as e:
                raise UserError(f"cannot write {display_path(out)}: {e.strerror}") from None
    return 0
