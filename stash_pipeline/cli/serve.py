"""`stash-pipeline serve`: the scoring server (docs/serving.md)."""

from __future__ import annotations

import argparse

from stash_pipeline.serving.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve", help="serve rewards on request: the scoring server the API forwards to",
        description="Load the current shared-evaluator release and the chosen personal models "
                    "once, keep them warm, and score conversations and candidate replies on "
                    "request, batching concurrent requests into shared forwards. The API's "
                    "/rewards routes forward here (STASH_SCORING_URL); --openrlhf-model also "
                    "answers OpenRLHF's /get_reward. See docs/serving.md.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                                                             "(default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--model", action="append", default=[], metavar="ID",
                        help="a personal model to keep warm (repeat for more; default: each "
                             "owner's most recent succeeded ones, STASH_PERSONAL_SCORING_MODELS)")
    parser.add_argument("--openrlhf-model", metavar="ID|release",
                        help="the model /get_reward scores with (OpenRLHF's remote reward model)")
    parser.add_argument("--device", choices=("cpu", "cuda", "mps"),
                        help="default: cuda, mps or cpu, whichever there is")
    parser.add_argument("--batch-tokens", type=int, metavar="N",
                        help="padded tokens a forward holds at most, and concurrent requests "
                             "gather into (default: 16384 on an accelerator, 1024 on CPU)")
    parser.add_argument("--gather-ms", type=float, default=5.0, metavar="MS",
                        help="how long a free forward waits for more requests (default 5)")
    parser.add_argument("--max-queue", type=int, default=256, metavar="N",
                        help="requests waiting at once; more are answered 503 (default 256)")
    parser.add_argument("--max-models", type=int, default=8, metavar="N",
                        help="checkpoints held at once (default 8)")
    parser.add_argument("--timeout-s", type=float, default=float(DEFAULT_TIMEOUT_S),
                        metavar="S", help="the longest a request waits (default "
                                          f"{DEFAULT_TIMEOUT_S})")
    parser.add_argument("--refresh-s", type=float, default=60.0, metavar="S",
                        help="how often a new release is looked for (default 60)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from stash_pipeline.api import server
    from stash_pipeline.api.settings import ServerSettings
    from stash_pipeline.cli.store import open_store
    from stash_pipeline.core.errors import InputError
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.serving.models import ModelRegistry
    from stash_pipeline.serving.protocol import scoring_token_from_env
    from stash_pipeline.serving.server import ServeSettings, create_app
    from stash_pipeline.worker.threads import use_cpu_threads

    for name in ("batch_tokens", "max_queue", "max_models"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError("must be a positive integer", field="--" + name.replace("_", "-"))
    threads = use_cpu_threads()  # before anything loads torch (docs/worker.md, "CPU threads")
    from stash_pipeline.worker.serving import Engine

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).info(threads.describe())
    store = open_store()
    engine = Engine(batch_tokens=args.batch_tokens, gather_s=args.gather_ms / 1000,
                    max_queue=args.max_queue)
    registry = ModelRegistry(store, object_store_from_env(), engine, device=args.device,
                             max_models=args.max_models, chosen=args.model)
    app = create_app(registry, engine, ServeSettings(
        token=scoring_token_from_env(), timeout_s=args.timeout_s,
        openrlhf_model=args.openrlhf_model, refresh_s=args.refresh_s))
    server.raise_open_file_limit()
    uvicorn.Server(server.config(app, ServerSettings.from_env(), host=args.host, port=args.port,
                                 log_level=args.log_level)).run()
    return 0
