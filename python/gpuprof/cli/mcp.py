"""``gpuprof mcp --root FOLDER [--max-tokens N]``: an MCP server over stdio whose tools answer
questions about the runs and traces under FOLDER (docs/agents.md). Needs the MCP Python SDK:
``pip install 'torch-gpuprof[mcp]'``."""

from __future__ import annotations

import os

from . import UserError


def add_parser(subparsers) -> None:
    from ..agents.answers import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS

    p = subparsers.add_parser(
        "mcp",
        help="serve runs and traces to an AI assistant (MCP over stdio)",
        description="An MCP server over stdio for AI assistants: tools analyze, top, findings, "
        "diff, check and explain over the runs and traces under --root (nothing outside it is "
        "read), answers sized to a token budget. capture is listed but not available in this "
        "version. See docs/agents.md to register it with an assistant.",
    )
    p.add_argument(
        "--root",
        metavar="FOLDER",
        default=os.curdir,
        help="the only folder the assistant may read (default: the current folder)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        help="the largest answer, in tokens of 4 characters "
        f"(default %(default)s, at least {MIN_MAX_TOKENS})",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from ..agents.answers import MIN_MAX_TOKENS, AnswerError

    if args.max_tokens < MIN_MAX_TOKENS:
        raise UserError(f"--max-tokens must be at least {MIN_MAX_TOKENS}, got {args.max_tokens}")
    if not os.path.isdir(args.root):
        raise UserError(f"--root {args.root}: not a folder")
    try:
        from ..agents.server import serve
    except ImportError as e:
        raise UserError(str(e)) from None
    try:
        serve(args.root, max_tokens=args.max_tokens)
    except ImportError as e:
        raise UserError(str(e)) from None
    except AnswerError as e:
        raise UserError(str(e)) from None
    return 0
