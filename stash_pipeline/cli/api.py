"""`stash-pipeline api`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import argparse
import os


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "api", help="serve the HTTP API (docs/api.md)",
        description="Serve the HTTP API: the seed's /api/v1/rm/... routes, traces, feedback and "
                    "read-only SQL. OpenAPI at /openapi.json, docs at /docs.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                                                             "(default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(handler=run)


def public_url(host: str, port: int) -> str:
    """Where this process is reached when STASH_API_URL does not say: the local store's signed
    download URLs point here (a deployment behind a proxy sets STASH_API_URL)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from stash_pipeline.api import create_app, server
    from stash_pipeline.api.settings import ServerSettings
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.objects.env import API_URL_ENV
    from stash_pipeline.store import Store

    os.environ.setdefault(API_URL_ENV, public_url(args.host, args.port))
    settings = ServerSettings.from_env()
    # Opened here, not in the app's start-up: what is wrong with them (a database that is down, a
    # signing.key others may read) is then one line from the command, not uvicorn's traceback.
    store = Store.from_env()
    try:
        store.migrate()
        objects = object_store_from_env()
        server.raise_open_file_limit()
        uvicorn.Server(server.config(create_app(store, objects), settings, host=args.host,
                                     port=args.port, log_level=args.log_level)).run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down and says so; no traceback
        return 130
    finally:
        store.dispose()
    return 0
