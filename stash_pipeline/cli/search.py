"""The trace search on the command line: the options `traces list`, `traces export` and
`review` share, read by core.trace_search's one parser (as the API and the viewer read theirs)."""

from __future__ import annotations

import argparse
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.trace_search import FILTER_PARAMS, OUTCOMES, TraceFilter, parse_filter
from stash_pipeline.store import Store

# option -> the search parameter it sets
OPTIONS = {"search": "q", "tool": "tool", "task": "task_id", "outcome": "outcome",
           "credit_min": "credit_min", "credit_max": "credit_max", "since": "created_from",
           "until": "created_to"}


def add_search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                        help=f"only traces with this KEY ({', '.join(FILTER_PARAMS)}), e.g. "
                             "agent=NAME, domain=NAME, state=waiting|pending|scored; repeat "
                             "to combine")
    parser.add_argument("--search", metavar="TEXT",
                        help="text the user, assistant or tool messages or tool calls contain "
                             "(case-insensitive; system prompts are not searched)")
    parser.add_argument("--tool", metavar="NAME", help="only traces that call this tool")
    parser.add_argument("--task", metavar="ID", help="only traces of this metadata.task_id")
    parser.add_argument("--outcome", choices=OUTCOMES, help="by verified outcome")
    parser.add_argument("--credit-min", metavar="X",
                        help="the release's mean action credit at least X (-1 to 1)")
    parser.add_argument("--credit-max", metavar="X", help="... at most X")
    parser.add_argument("--since", metavar="DATE", help="created on or after DATE (YYYY-MM-DD)")
    parser.add_argument("--until", metavar="DATE", help="created on or before DATE")
    parser.add_argument("--saved", metavar="NAME",
                        help="a saved search of the owner's (the viewer's Save this search, "
                             "POST /api/v1/saved-filters); the options above narrow it")


def search_params(args: argparse.Namespace, store: Store, owner: str) -> dict[str, str]:
    """The search the options name, as text parameters (a saved search first, then the rest)."""
    params: dict[str, Any] = {}
    if args.saved:
        params.update(store.saved_filter(owner, name=args.saved).params)
    for item in args.filter:
        key, sep, value = item.partition("=")
        if not sep or key not in FILTER_PARAMS or not value:
            raise InputError(f"--filter is KEY=VALUE with KEY one of {', '.join(FILTER_PARAMS)}"
                             f", got {item!r}", field="filter")
        try:
            parse_filter({key: value})
        except InputError as error:
            raise InputError(f"{item!r}: {error.reason}", field="filter") from None
        params[key] = value
    for option, key in OPTIONS.items():
        value = getattr(args, option)
        if value is not None:
            params[key] = value
    return params


def trace_filter(args: argparse.Namespace, store: Store, owner: str) -> TraceFilter | None:
    """The options' search (None: every trace)."""
    where = parse_filter(search_params(args, store, owner))
    return where if where else None
