"""`stash-pipeline accounts create|key|list`: accounts and their API keys (printed once)."""

from __future__ import annotations

import argparse

from stash_pipeline.cli.output import print_json, print_table
from stash_pipeline.cli.store import open_store


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("accounts", help="create accounts and their API keys")
    sub = parser.add_subparsers(dest="accounts_command", required=True, metavar="SUBCOMMAND")
    create = sub.add_parser(
        "create", help="a new account and its API key (shown once, stored hashed)")
    create.add_argument("--name", required=True, help="display name")
    create.add_argument("--id", dest="account_id", help="account id (default: a new UUID)")
    create.add_argument("--before-rollout", action="store_true",
                        help="an account as those that existed before the reward-model rollout: "
                             "its reward-model routes answer 404")
    create.add_argument("--json", action="store_true",
                        help="print one JSON object with id and api_key")
    create.set_defaults(handler=run_create)
    key = sub.add_parser("key", help="a new API key for an existing account (the old one stops "
                                     "working), e.g. for `local`, which CLI imports use")
    key.add_argument("account_id", metavar="ID")
    key.add_argument("--json", action="store_true", help="print one JSON object")
    key.set_defaults(handler=run_key)
    listing = sub.add_parser("list", help="one line per account (never a key)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(handler=run_list)


def run_create(args: argparse.Namespace) -> int:
    from stash_pipeline.services import accounts
    account, key = accounts.create(open_store(), args.name, account_id=args.account_id,
                                   reward_models_enabled=not args.before_rollout)
    if args.json:
        print_json({"id": account.id, "name": account.name, "api_key": key,
                    "reward_models_enabled": account.reward_models_enabled})
    else:
        print(f"Created account {account.id} ({account.name}).")
        print(f"API key (shown once; keep it secret): {key}")
    return 0


def run_key(args: argparse.Namespace) -> int:
    from stash_pipeline.services import accounts
    key = accounts.issue_key(open_store(), args.account_id)
    if args.json:
        print_json({"id": args.account_id, "api_key": key})
    else:
        print(f"New API key for {args.account_id} (shown once; the old key no longer works): {key}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from stash_pipeline.services import accounts
    rows = [accounts.view(a) for a in open_store().list_accounts()]
    if args.json:
        print_json({"accounts": rows, "count": len(rows)})
    else:
        print_table(rows, ["id", "name", "reward_models_enabled", "has_api_key", "created_at"])
    return 0
