"""The `stash-pipeline` command line. Subcommands live one module each beside this file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from stash_pipeline.core.errors import StashError


def build_parser() -> argparse.ArgumentParser:
    from stash_pipeline.cli import (
        accounts,
        api,
        code_server,
        dev,
        evaluator,
        feedback,
        imports,
        pairs,
        review,
        rm,
        score,
        serve,
        traces,
    )

    parser = argparse.ArgumentParser(
        prog="stash-pipeline",
        description="Turn feedback on agent traces into reward models, and keep every trace "
                    "scored.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (imports, traces, review, feedback, pairs, rm, evaluator, score, accounts, api,
                   serve, code_server, dev):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as other command-line tools do. Output
        # still buffered would fail again at exit, so stdout is pointed at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the signal
    except StashError as error:
        print(f"error: {_with_detail(error)}", file=sys.stderr)
        return 2
    except Exception as error:
        if os.environ.get("STASH_DEBUG"):
            raise
        from stash_pipeline.core.errors import disk_full
        from stash_pipeline.store.locks import unavailable_database

        if disk_full(error):
            first = (str(error).strip().splitlines() or [""])[0]
            print(f"error: the disk is full ({first}); nothing was stored (free space, then run "
                  "it again)", file=sys.stderr)
            return 2
        known = unavailable_database(error)
        if known is not None:
            print(f"error: {_with_detail(known)}", file=sys.stderr)
            return 2
        first = (str(error).strip().splitlines() or [""])[0]
        print(f"error: unexpected {type(error).__name__}: {first} (a bug: run it again with "
              "STASH_DEBUG=1 for the traceback, and report it)", file=sys.stderr)
        return 1


def _with_detail(error: BaseException) -> str:
    """The error's sentence and, for the operator at the terminal, its driver's own words."""
    detail = getattr(error, "detail", None)
    return f"{error} ({detail})" if isinstance(detail, str) and detail else str(error)
