"""``gpuprof diff BASE NEW``: what changed between two runs, per category and per kernel/operator.

A comparison of numbers both reports already hold: the mean step time, each category's mean time and
share, and each kernel's and operator's total time (matched by name).
"""

from __future__ import annotations

from ..report.compare import TOP_ROWS, compare  # noqa: F401 (compare: the API of gpuprof diff)
from . import UserError
from .report import load_report, write_output


def _signed(v: float, digits: int = 1) -> str:
    return f"{v:+,.{digits}f}"


def _per_sample_lines(d: dict) -> list[str]:
    """When the batch size changed: the lines that say so and compare the time per sample."""
    if "sample_time_us" not in d:
        return []
    b, st = d["batch_size"], d["sample_time_us"]
    change = "" if st["change_pct"] is None else f" ({_signed(st['change_pct'])}%)"
    return [
        f"batch size changed: {b['base']} -> {b['new']} samples per step, so the step times do not compare; "
        f"per sample: {st['base'] / 1000:.3f} ms -> {st['new'] / 1000:.3f} ms{change}"
    ]


def _calls(v: float) -> str:
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def _call_change_lines(d: dict, show, markdown: bool = False) -> list[str]:
    """HTA's trace diff categories of each table: their counts, then the names that changed with
    their calls per step (``show`` makes a name safe for the output)."""
    from ..report import sections as sec
    from ..report.compare import CALL_CHANGES

    titles = dict(sec.TABLES[:2])
    lines: list[str] = []
    for key, changes in (d.get("calls") or {}).items():
        counts = ", ".join(f"{changes[c]['count']} {c}" for c in CALL_CHANGES)
        head = f"{titles.get(key, key)} by calls per step: {counts}"
        lines += ["", f"**{head}**" if markdown else head]
        if markdown:
            lines.append("")
        for c in CALL_CHANGES[:4]:
            rows = changes[c]["rows"]
            more = changes[c]["count"] - len(rows)
            for r in rows:
                b, n = _calls(r["base_calls_per_step"]), _calls(r["new_calls_per_step"])
                if markdown:
                    lines.append(f"- {c}: {show(r['name'])} ({b} → {n})")
                else:
                    lines.append(f"  {c:<9}  {b:>10} -> {n:<10}  {show(r['name'])}")
            if more > 0:
                lines.append(f"- {c}: ... and {more} more" if markdown else f"  {c:<9}  ... and {more} more")
    return lines


def render_text(d: dict, base_name: str, new_name: str) -> str:
    from ..report.sections import printable
    from ..traces.read import display_path

    st = d["step_time_us"]
    change = "" if st["change_pct"] is None else f" ({_signed(st['change_pct'])}%)"
    # Names and paths from outside show inert (a trace's kernel name cannot clear the screen, set
    # the window title, print a link or reorder the line).
    lines = [
        f"gpuprof diff: {printable(display_path(base_name))} -> {printable(display_path(new_name))}",
        f"mean step time: {st['base'] / 1000:.3f} ms -> {st['new'] / 1000:.3f} ms{change}",
        *_per_sample_lines(d),
        "",
    ]
    w = max([len(c["name"]) for c in d["categories"]] + [8])
    lines.append(
        f"{'category':<{w}}  {'base us':>12}  {'new us':>12}  {'delta us':>12}  {'base %':>7}  {'new %':>7}"
    )
    for c in d["categories"]:
        lines.append(
            f"{c['name']:<{w}}  {c['base_us']:>12,.1f}  {c['new_us']:>12,.1f}  "
            f"{_signed(c['delta_us']):>12}  {c['base_pct']:>7.1f}  {c['new_pct']:>7.1f}"
        )
    for t in d["tables"].values():
        lines += ["", f"{t['title']}: largest changes in total time ({len(t['rows'])} of {t['total_rows']})"]
        for r in t["rows"]:
            mark = f" [{r['status']}]" if r["status"] else ""
            lines.append(
                f"  {_signed(r['delta_us']):>12} us  {r['base_us']:>12,.1f} -> {r['new_us']:>12,.1f}  "
                f"{printable(r['name'])}{mark}"
            )
    lines += _call_change_lines(d, printable)
    return "\n".join(lines) + "\n"


def render_markdown(d: dict, base_name: str, new_name: str) -> str:
    from ..report.markdown import md_code, md_escape, table
    from ..traces.read import display_path

    st = d["step_time_us"]
    change = "" if st["change_pct"] is None else f" ({_signed(st['change_pct'])}%)"
    out = [
        f"## gpuprof diff: {md_code(display_path(base_name))} → {md_code(display_path(new_name))}",
        "",
        f"**Mean step time: {st['base'] / 1000:.3f} ms → {st['new'] / 1000:.3f} ms{change}**",
        *[f"\n**{line[:1].upper() + line[1:]}**" for line in _per_sample_lines(d)],
        "",
    ]
    out += table(
        ["category", "base (us)", "new (us)", "delta (us)", "base %", "new %"],
        [
            [
                md_escape(c["name"]),
                f"{c['base_us']:,.1f}",
                f"{c['new_us']:,.1f}",
                _signed(c["delta_us"]),
                f"{c['base_pct']:.1f}",
                f"{c['new_pct']:.1f}",
            ]
            for c in d["categories"]
        ],
        [":--"] + ["--:"] * 5,
    )
    for t in d["tables"].values():
        out += ["", f"### {t['title']}: largest changes ({len(t['rows'])} of {t['total_rows']})", ""]
        out += table(
            ["name", "base (us)", "new (us)", "delta (us)", ""],
            [
                [
                    md_escape(r["name"]),
                    f"{r['base_us']:,.1f}",
                    f"{r['new_us']:,.1f}",
                    _signed(r["delta_us"]),
                    r["status"],
                ]
                for r in t["rows"]
            ],
            [":--", "--:", "--:", "--:", ":--"],
        )
    out += _call_change_lines(d, md_escape, markdown=True)
    return "\n".join(out) + "\n"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two reports: per category and per kernel/operator",
        description="Compare two saved reports (report.json files or `gpuprof run` "
        "folders): mean step time, each category, and the kernels and operators "
        "whose total time changed most.",
    )
    p.add_argument("base", metavar="BASE", help="the baseline report (JSON or folder)")
    p.add_argument("new", metavar="NEW", help="the report to compare with it")
    p.add_argument("--format", "-f", choices=["text", "md", "json"], default="text")
    p.add_argument(
        "--top", type=int, default=TOP_ROWS, help="kernels/operators to list (default %(default)s)"
    )
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="write here instead of stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.top < 1:
        raise UserError(f"--top must be at least 1, got {args.top}")
    d = compare(load_report(args.base), load_report(args.new), top=args.top)
    if args.format == "json":
        import json

        write_output(json.dumps(d, indent=2) + "\n", args.output)
        return 0
    render = render_markdown if args.format == "md" else render_text
    write_output(render(d, args.base, args.new), args.output)
    return 0
