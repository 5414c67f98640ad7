"""The `stash-pipeline` command line. Subcommands live one module each beside this file."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stash_pipeline.core.errors import StashError


def build_parser() -> argparse.ArgumentParser:
    from stash_pipeline.cli import (
        accounts, api, dev, evaluator, feedback, imports, pairs, rm, traces,
    )

    parser = argparse.ArgumentParser(
        prog="stash-pipeline",
        description="Turn feedback on agent traces into reward models, and keep every trace scored.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (imports, traces, feedback, pairs, rm, evaluator, accounts, api, dev):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except StashError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
