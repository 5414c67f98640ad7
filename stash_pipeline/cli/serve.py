"""`stash-pipeline serve`: the scoring server (docs/serving.md)."""

from __future__ import annotations

import argparse

from stash_pipeline.core.reward_requests import IN_FLIGHT_FORWARDS, REQUEST_FORWARDS
from stash_pipeline.serving.protocol import DEFAULT_PORT, DEFAULT_TIMEOUT_S
from stash_pipeline.serving.settings import OUTPUTS


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
    parser.add_argument("--openrlhf-model", action="append", default=[], metavar="ID|release",
                        help="a model OpenRLHF's /get_reward/<ID> scores with (repeat for more; "
                             "the first also answers /get_reward); anyone who reaches the "
                             "server may use them unless STASH_GET_REWARD_KEY is set")
    parser.add_argument("--openrlhf-output", choices=OUTPUTS, default="raw",
                        help="what /get_reward's rewards are unless ?output= says (default raw)")
    parser.add_argument("--device", choices=("cpu", "cuda", "mps"),
                        help="default: cuda, mps or cpu, whichever there is")
    parser.add_argument("--batch-tokens", type=int, metavar="N",
                        help="padded tokens a forward holds at most, and concurrent requests "
                             "gather into (default: 16384 on an accelerator, 1024 on CPU)")
    parser.add_argument("--gather-ms", type=float, default=5.0, metavar="MS",
                        help="how long a free forward waits for more requests (default 5)")
    parser.add_argument("--max-queue", type=int, default=256, metavar="N",
                        help="requests waiting at once; more are answered 503 (default 256)")
    parser.add_argument("--max-request-tokens", type=int, metavar="N",
                        help="tokens of forwards one request may need; more is 422 (default: "
                             f"{REQUEST_FORWARDS} forwards of --batch-tokens)")
    parser.add_argument("--max-tokens-in-flight", type=int, metavar="N",
                        help="tokens queued or being read at once; a request past it is 503 "
                             f"with Retry-After (default: {IN_FLIGHT_FORWARDS} forwards of "
                             "--batch-tokens)")
    parser.add_argument("--max-models", type=int, default=8, metavar="N",
                        help="checkpoints held at once (default 8)")
    parser.add_argument("--timeout-s", type=float, default=float(DEFAULT_TIMEOUT_S),
                        metavar="S", help="the longest a request waits for its model and its "
                                          "answer: one whose answer would come later is 503 at "
                                          f"once (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--refresh-s", type=float, default=60.0, metavar="S",
                        help="how often a new release is looked for (default 60)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"))
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import logging
    import os

    import uvicorn

    from stash_pipeline.api import server
    from stash_pipeline.api.settings import ApiSettings, ServerSettings
    from stash_pipeline.cli.store import open_store
    from stash_pipeline.core.errors import InputError
    from stash_pipeline.objects import object_store_from_env
    from stash_pipeline.serving.protocol import scoring_token_from_env
    from stash_pipeline.serving.settings import GET_REWARD_KEY_ENV, ServeSettings
    from stash_pipeline.worker.threads import use_cpu_threads

    for name in ("batch_tokens", "max_queue", "max_models", "max_request_tokens",
                 "max_tokens_in_flight"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError("must be a positive integer", field="--" + name.replace("_", "-"))
    threads = use_cpu_threads()  # before anything loads torch (docs/worker.md, "CPU threads")
    from stash_pipeline.serving.models import ModelRegistry
    from stash_pipeline.serving.server import create_app
    from stash_pipeline.worker.serving import Engine

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).info(threads.describe())
    store = open_store()
    engine = Engine(batch_tokens=args.batch_tokens, gather_s=args.gather_ms / 1000,
                    max_queue=args.max_queue, max_request_tokens=args.max_request_tokens,
                    max_tokens_in_flight=args.max_tokens_in_flight)
    registry = ModelRegistry(store, object_store_from_env(), engine, device=args.device,
                             max_models=args.max_models, chosen=args.model)
    app = create_app(registry, engine, ServeSettings(
        token=scoring_token_from_env(), timeout_s=args.timeout_s,
        openrlhf_models=tuple(dict.fromkeys(args.openrlhf_model)),
        openrlhf_output=args.openrlhf_output,
        openrlhf_key=os.environ.get(GET_REWARD_KEY_ENV) or None,
        max_body_bytes=ApiSettings.from_env().max_rewards_bytes, refresh_s=args.refresh_s))
    server.raise_open_file_limit()
    uvicorn.Server(server.config(app, ServerSettings.from_env(), host=args.host, port=args.port,
                                 log_level=args.log_level)).run()
    return 0
