"""``gpuprof run [--steps 10:15] [--out DIR] script.py [args...]``: profile an unmodified script.

The script runs in this process (as ``python script.py args...`` would run it), steps are counted
from the optimizer (one step per ``optimizer.step()``; in a loop that never calls ``torch.optim``,
one per backward pass; or at a marker the user names with ``--step-marker``: collect/autostep.py),
and the steps in the given range are recorded. The report is written as soon as the last of them
ends; the script then runs on at full speed (interrupt it with Ctrl-C once the report is written,
if you like: it is kept), or, with ``--stop-after``, is ended there (exit status 0). When torch runs
out of memory, the report of what was recorded says what filled it and the batch that fits: the
recorded steps' ``report.json`` when the error came inside them, else ``oom.json`` and ``oom.html``
beside it (docs/memory.md).
"""

from __future__ import annotations

import logging
import runpy
import sys
import traceback
from pathlib import Path

from ..collect.schedule import StepRangeError, step_range
from . import UserError

DEFAULT_STEPS = "5:10"
DEFAULT_STEP_HINT_AFTER_S = 60.0  # no step found by then: say how to mark steps

log = logging.getLogger("gpuprof")


class StopAfterRecording(BaseException):
    """Raised from the step that completes the recorded window (``--stop-after``) to end the script.

    A BaseException, like KeyboardInterrupt, so that the script's ``except Exception`` handlers
    and the profiler's own error handling let it through."""


def parse_steps(text: str) -> tuple[int, int]:
    """``"10:15"`` -> (10, 15): steps 10 to 14 (0-based, end excluded, like a Python slice)."""
    try:
        return step_range(text)
    except StepRangeError as e:
        raise UserError(str(e)) from None


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="profile an unmodified training script",
        description="Run a training script under gpuprof. Steps are counted from optimizer.step() "
        "calls (or from prof.step() if the script steps gpuprof.current() itself; a script that starts its "
        "own gpuprof.profile keeps it, and gpuprof run stands aside; in a loop without torch.optim, "
        "from the end of each backward pass; or at --step-marker NAME); the steps START:STOP "
        "(0-based, STOP excluded) are recorded. Writes report.json, report.html and trace.json.gz "
        "into --out.",
    )
    p.add_argument(
        "--steps",
        default=None,
        metavar="START:STOP",
        help=f"steps to record (default {DEFAULT_STEPS}: the 6th to the 10th optimizer step)",
    )
    p.add_argument(
        "--out",
        default="gpuprof-out",
        metavar="DIR",
        help="folder for report.json, report.html (default %(default)s)",
    )
    p.add_argument(
        "--stop-after",
        action="store_true",
        help="end the script once the recorded steps are over (the report is written; "
        "exit status 0) instead of letting it run to its end",
    )
    p.add_argument(
        "--no-trace",
        action="store_true",
        help="do not write the Chrome trace (trace.json.gz) beside the report",
    )
    p.add_argument(
        "--step-marker",
        metavar="NAME",
        default=None,
        help="end each step where a range NAME ends (torch.profiler.record_function(NAME), "
        "gpuprof.range(NAME)) or where a function NAME returns, instead of at optimizer steps or "
        "backward passes",
    )
    p.add_argument(
        "--step-hint-after",
        type=float,
        default=DEFAULT_STEP_HINT_AFTER_S,
        metavar="SECONDS",
        help="when no step is found after this long, say how to mark steps (default %(default)g; 0: never)",
    )
    p.add_argument(
        "--modules",
        action="store_true",
        help="also record the module view: time per nn.Module of the model, forward and backward "
        '(a few microseconds per module call; docs/metrics.md, "Modules")',
    )
    p.add_argument(
        "--compiled-kernels",
        action="store_true",
        help="for a torch.compile'd model: time the kernels Inductor generates on the CPU and name "
        "the aten operators and source lines of each (Inductor's kernel profiling and provenance on, "
        "its caches off, for graphs compiled during the run: compile time, not step time; "
        'docs/profiling.md, "Compiled models")',
    )
    p.add_argument(
        "--shapes",
        action="store_true",
        help="also record every operator's input shapes: the operators-by-shape table, and FLOPs of "
        "elementwise and reduction operators too (the matrix operators' are counted without it); "
        "costs a little per operator call",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="do not print the report at the end")
    p.add_argument(
        "--watch",
        action="store_true",
        help="watch the whole run instead of recording steps: per step its time, DataLoader wait, "
        "CPU time, RSS (and GPU utilization, memory, power) to OUT/rank<N>/watch.jsonl, with flags "
        "when steps slow down or memory grows; no profiler (docs/watch.md)",
    )
    p.add_argument(
        "--openmetrics",
        metavar="FILE",
        default=None,
        help="with --watch: also keep FILE (e.g. /var/lib/node_exporter/job.prom) up to date in "
        "OpenMetrics text for node_exporter's textfile collector; each rank of a job writes "
        "FILE's NAME.rank<N>.prom, or put {rank} in FILE",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="with --watch: samples per step, for samples/s when the loop draws no DataLoader "
        "batches of a known size",
    )
    p.add_argument(
        "--watch-max-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="with --watch: the bound on each watch.jsonl (default 16 MiB); past it older steps "
        "are merged two by two",
    )
    p.add_argument("script", help="the training script")
    p.add_argument("args", nargs="...", help="the script's own arguments")
    p.set_defaults(run=run)


def _save(
    report, out: Path, trace: bool = True, rank: int = 0, world: int = 1
) -> tuple[list[str], list[str]]:
    """Write report.json (with the Chrome trace, so that both report files say where it is) and
    report.html: the --out folder's files (traces/export.py, the same for %%gpuprof --out): into
    ``out`` in a one-process run; into ``out/rank<N>`` for each rank of a job, rank 0 also into
    ``out`` (its report holds every rank: the job's report). Runs inside the script's training loop,
    so nothing raises: returns (the files written, "PATH: reason" for each that could not be)."""
    from ..traces.export import save_out_folder

    return save_out_folder(report, out, trace=trace, rank=rank, world=world)


def _who(rank: int, world: int) -> str:
    return f"rank {rank} of {world}: " if world > 1 else ""


def run(args) -> int:
    watching = getattr(args, "watch", False)
    if not watching:
        for flag, value in (
            ("--openmetrics", getattr(args, "openmetrics", None)),
            ("--batch-size", getattr(args, "batch_size", None)),
            ("--watch-max-bytes", getattr(args, "watch_max_bytes", None)),
        ):
            if value is not None:
                raise UserError(f"{flag} goes with --watch: gpuprof run --watch {flag} ... {args.script}")
    elif args.steps is not None or args.modules or args.stop_after or args.shapes or args.compiled_kernels:
        raise UserError(
            "--watch watches every step without the profiler (no step recorded): it takes no --steps, "
            f"--modules, --shapes, --compiled-kernels or --stop-after: gpuprof run --watch {args.script}"
        )
    start, stop = parse_steps(args.steps or DEFAULT_STEPS)
    script = Path(args.script)
    if not script.is_file():
        raise UserError(f"{args.script}: no such script")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create --out {args.out}: {e.strerror}") from None
    if watching:
        return _run_watched(args, script, out)

    from ..collect.autostep import StepFinder
    from ..collect.exchange import job_rank
    from ..collect.oom import is_out_of_memory
    from ..collect.schedule import schedule
    from ..session import profile
    from ..traces.export import rank_folders, save_rank_reports

    try:
        import torch  # noqa: F401  (the script needs it anyway; the optimizer hook lives there)
    except ImportError:
        raise UserError("torch is not importable here; gpuprof run profiles PyTorch scripts") from None

    # Warm up one step before the range so that first-call costs stay out of the recorded steps.
    warmup = 1 if start >= 1 else 0
    sched = schedule(wait=start - warmup, warmup=warmup, active=stop - start, repeat=1)
    written: list[str] = []
    recorded: list = []  # the report of the recorded steps, once they are over
    rank = list(job_rank()[:2])  # (rank, world size): the launcher's now, torch.distributed's later

    stopping: list[bool] = []

    oom_written: list[str] = []

    def on_ready(prof) -> None:
        if stopping:
            # --stop-after ended the script from inside the step that completed the window; the
            # profiler's exit then closes a span of nothing: the report already written is kept.
            return
        report = prof.report()
        if report.source.get("kind") == "out_of_memory":
            # Out of memory outside the recorded steps: its own files, beside the steps' report
            # (gpuprof analyze DIR leaves them out: a failure's record, not a rank's steps).
            rank[:] = job_rank()[:2]
            oom_written[:], failed = save_rank_reports(
                report, out, rank=rank[0], world=rank[1], stem="oom", trace=False
            )
            if failed:
                log.warning("gpuprof run: could not write %s", "; ".join(failed))
            return
        recorded[:] = [report]
        rank[:] = job_rank()[:2]  # torch.distributed's rank by now, when the script set it up
        written[:], failed = _save(
            report, out, trace=not getattr(args, "no_trace", False), rank=rank[0], world=rank[1]
        )
        numbers = [s["step"] for s in report.steps]
        span = f"steps {numbers[0]}..{numbers[-1]}" if numbers else "no complete step"
        if failed:
            # The training run comes first: one warning, and the report is printed at the end.
            log.warning("gpuprof run: could not write %s; the script goes on", "; ".join(failed))
        print(
            f"gpuprof run: {_who(*rank)}recorded {span}; "
            f"wrote {', '.join(written) if written else 'nothing'}",
            file=sys.stderr,
        )
        if getattr(args, "stop_after", False):
            print(f"gpuprof run: --stop-after: ending {script} after step {stop - 1}", file=sys.stderr)
            stopping.append(True)
            raise StopAfterRecording()

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script)] + list(args.args)
    sys.path.insert(0, str(script.resolve().parent))
    exit_code = 0
    failure = None
    try:
        # Each recorded step also goes to out(/rank<N>)/steps.partial.jsonl as it completes: a job
        # killed before the span closes keeps its steps (gpuprof report/analyze OUT read them).
        journal = rank_folders(out, rank[0], rank[1])[0]
        with profile(
            schedule=sched,
            on_trace_ready=on_ready,
            with_modules=args.modules,
            record_shapes=args.shapes,
            journal=journal,
            compiled_kernels=args.compiled_kernels,
        ) as prof:
            prof.yields_to_nested = True  # a session the script starts itself takes over
            prof.warn_without_steps = False  # a run without steps says so below, with its fix
            finder = StepFinder(
                prof,
                marker=getattr(args, "step_marker", None),
                announce=lambda line: print(line, file=sys.stderr, flush=True),
                hint_after_s=float(getattr(args, "step_hint_after", DEFAULT_STEP_HINT_AFTER_S) or 0),
            )
            prof.on_stand_aside = finder.remove  # the script's session paces its own steps
            with finder as stepper:
                try:
                    runpy.run_path(str(script), run_name="__main__")
                except SystemExit as e:
                    exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                except StopAfterRecording:
                    exit_code = 0
                except KeyboardInterrupt:
                    if not recorded:
                        raise
                    exit_code = 130  # interrupted after the report was written: keep it
                except BaseException as e:  # the script's own error: shown below, report kept
                    if is_out_of_memory(e):
                        raise  # through the session, which reports what filled memory
                    failure = e
                    traceback.print_exc()
    except BaseException as e:
        if not is_out_of_memory(e):
            raise
        failure = e
        traceback.print_exc()
    finally:
        sys.argv, sys.path = saved_argv, saved_path

    steps_seen = prof.step_num
    code = 1 if failure is not None else exit_code
    if prof.stood_aside_for and not recorded:
        # The script profiles itself: its own session, its own reports; the run is the script's.
        print(
            f"gpuprof run: {script} started its own gpuprof.profile (at {prof.stood_aside_for}) "
            f"after {steps_seen} steps; gpuprof run stood aside for it and wrote nothing to {out} "
            f"(the script's session has its reports). Exit code {code}, the script's",
            file=sys.stderr,
        )
        return code
    if not recorded:
        return _nothing_recorded(script, start, steps_seen, stepper, failure, exit_code, oom_written)
    return _recorded(args, script, stop, prof, recorded[0], rank, failure, exit_code, oom_written)


def _nothing_recorded(script, start, steps_seen, stepper, failure, exit_code, oom_written) -> int:
    """The end of a run whose steps were never recorded: the script's failure (its exit code), or a
    UserError saying how to reach the range (mark the steps, a lower --steps)."""
    from ..collect.autostep import MARKER_HELP

    code = 1 if failure is not None else exit_code
    how = {
        "prof.step": "prof.step() calls",
        "backward": "backward passes",
        "marker": f"--step-marker {stepper.marker}",
    }.get(stepper.source or "", "optimizer.step() calls")
    if failure is not None or exit_code != 0:
        # The script failed: its error, not the step range, is what to fix first.
        why = (
            f"raised {type(failure).__name__}: {failure}"
            if failure is not None
            else f"exited with code {exit_code}"
        )
        print(
            f"gpuprof run: {script} {why} (exit code {code}) after {steps_seen} steps ({how}), "
            f"before step {start}; "
            + (
                f"the out-of-memory report is in {', '.join(oom_written)}"
                if oom_written
                else "nothing was recorded. Fix the error above and run gpuprof run again"
            ),
            file=sys.stderr,
        )
        return code
    if steps_seen == 0:
        # No boundary at all: no range of steps can help; marking the steps can.
        found = (
            f"no range named {stepper.marker!r} ended and no function {stepper.marker}() returned"
            if stepper.marker
            else "no torch.optim optimizer stepped and no backward pass ended"
        )
        raise UserError(
            f"{script} ended and no training step was found ({found}); nothing was recorded. "
            f"Mark the steps with {MARKER_HELP}, e.g. gpuprof run --step-marker train_step "
            f"{script}"
        )
    raise UserError(
        f"{script} ended after {steps_seen} steps ({how}), before step {start}; "
        f"nothing was recorded. Use --steps with a range below {steps_seen}, "
        "or run more steps"
    )


def _recorded(args, script, stop, prof, report, rank, failure, exit_code, oom_written) -> int:
    """The end of a run with a report: say what it covers when the script ended early, print it
    (rank 0 the job's, other ranks their summary line), then the script's own error."""
    from ..report.sections import summary_line

    steps_seen = prof.step_num
    numbers = [s["step"] for s in report.steps]
    if numbers and numbers[-1] < stop - 1:
        # The steps the report holds (a signal's cut span includes the step it came in).
        ended = (
            f"stood aside for the script's own gpuprof.profile (at {prof.stood_aside_for})"
            if prof.stood_aside_for
            else f"the script ended after {steps_seen} steps"
        )
        print(
            f"gpuprof run: {ended}; the report covers steps {numbers[0]}..{numbers[-1]} only",
            file=sys.stderr,
        )
    if not args.quiet:
        # Under a launcher every rank's output lands in one terminal: each rank prints its one
        # summary line, and rank 0 the job's report (every rank's row, the straggler call), from
        # memory: the same as report.json, and it also knows how long writing took.
        if rank[1] > 1 and rank[0] != 0:
            print(f"gpuprof run: {_who(*rank)}{summary_line(report)}")
        else:
            print(report.to_text())
    if failure is not None:
        print(f"gpuprof run: {script} raised {type(failure).__name__}: {failure}", file=sys.stderr)
        if oom_written:
            print(f"gpuprof run: the out-of-memory report is in {', '.join(oom_written)}", file=sys.stderr)
        return 1
    return exit_code


def _run_watched(args, script: Path, out: Path) -> int:
    """``gpuprof run --watch``: the script runs as ``python script.py`` would, with the watcher on
    (session/watch.py); its exit status is the script's."""
    from ..session.watch import DEFAULT_MAX_BYTES, _Watching

    try:
        import torch  # noqa: F401  (the step finder's hooks live there)
    except ImportError:
        raise UserError("torch is not importable here; gpuprof run --watch watches PyTorch scripts") from None
    if args.batch_size is not None and args.batch_size <= 0:
        raise UserError(f"--batch-size must be a positive number of samples, not {args.batch_size}")
    watching = _Watching(
        str(out),
        openmetrics=args.openmetrics,
        batch_size=args.batch_size,
        max_bytes=args.watch_max_bytes or DEFAULT_MAX_BYTES,
        marker=getattr(args, "step_marker", None),
        announce=lambda line: print(line, file=sys.stderr, flush=True),
        script=str(script),
    )
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script)] + list(args.args)
    sys.path.insert(0, str(script.resolve().parent))
    code = 0
    watching.start()
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # the script's own error: shown as Python shows it, exit status 1
        traceback.print_exc()
        code = 1
    finally:
        sys.argv, sys.path = saved_argv, saved_path
        watching.stop()
    where = watching.path
    if not args.quiet and where is not None:
        print(f"gpuprof run: watched {watching.watcher.step_num} steps; wrote {where}", file=sys.stderr)
    return code
