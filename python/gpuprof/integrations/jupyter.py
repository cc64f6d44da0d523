"""Jupyter: ``%load_ext gpuprof`` and the ``%%gpuprof`` cell magic.

``%%gpuprof`` profiles the cell it heads and shows the report inline (a ``Report`` displays as the
HTML report). Steps come from ``prof.step()`` if the cell calls it (``prof`` is the session, put in
the notebook's namespace), otherwise one step per ``optimizer.step()``; a cell with neither is one
step. The report is kept in a variable (``gpuprof_report`` unless ``--name`` says otherwise).
"""

from __future__ import annotations

import ast

from IPython.core import magic_arguments
from IPython.core.magic import Magics, cell_magic, magics_class


def calls_prof_step(source: str) -> bool:
    """Whether the cell calls ``prof.step()`` itself (then the optimizer does not pace steps)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "step"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "prof"
        for n in ast.walk(tree)
    )


@magics_class
class GpuprofMagics(Magics):
    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "--steps",
        default=None,
        metavar="START:STOP",
        help="record only these steps (0-based, STOP excluded); default: all",
    )
    @magic_arguments.argument(
        "--out",
        default=None,
        metavar="DIR",
        help="also save report.json, report.html and trace.json.gz in DIR (as gpuprof run --out)",
    )
    @magic_arguments.argument(
        "--name", default="gpuprof_report", help="variable that receives the Report (default: gpuprof_report)"
    )
    @magic_arguments.argument("--text", action="store_true", help="show the text summary, not HTML")
    @magic_arguments.argument("--quiet", action="store_true", help="show nothing; just keep the report")
    @cell_magic
    def gpuprof(self, line: str, cell: str):
        """Profile this cell and show where each step's time went."""
        from ..collect.autostep import OptimizerSteps
        from ..collect.schedule import StepRangeError, schedule, step_range
        from ..session import ProfilerError, profile

        args = magic_arguments.parse_argstring(self.gpuprof, line)
        sched = None
        if args.steps:
            try:
                start, stop = step_range(args.steps)
            except StepRangeError as e:
                print(f"%%gpuprof: {e}")
                return None
            warmup = 1 if start >= 1 else 0
            sched = schedule(wait=start - warmup, warmup=warmup, active=stop - start, repeat=1)
        ns = self.shell.user_ns
        code = self.shell.compile(cell, "<%%gpuprof cell>", "exec")
        error = None
        with profile(schedule=sched) as prof:
            ns["prof"] = prof
            prof.warn_without_steps = False  # a cell without steps is one step, as the magic says
            stepper = None if calls_prof_step(cell) else OptimizerSteps(prof).install()
            try:
                exec(code, ns)
            except Exception as e:  # the cell's own error: re-raised once the report is kept
                error = e
            finally:
                if stepper is not None:
                    stepper.remove()
        try:
            report = prof.report()
        except ProfilerError as e:
            print(f"%%gpuprof: {e}")
            report = None
        if report is not None:
            ns[args.name] = report
            if args.out:
                # The same files, by the same names, as `gpuprof run --out DIR`.
                from ..traces.export import save_out_folder

                written, failed = save_out_folder(report, args.out)
                if failed:
                    print(f"%%gpuprof: could not write {'; '.join(failed)}")
            if not args.quiet:
                from IPython.display import display

                if args.text:
                    from IPython.display import Pretty

                    display(Pretty(report.to_text(color=False)))  # one output, not one per line
                else:
                    display(report)
        if error is not None:
            raise error
        return None


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(GpuprofMagics)
