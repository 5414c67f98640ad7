"""What the API and the scoring server agree on: where the server is, how the API proves it is
the API, and the body of a scoring call.

The server's own routes (``/v1/...``) take ``Authorization: Bearer <token>``, the token an HMAC
of a fixed label under the deployment's signing secret (``STASH_SIGNING_KEY``, or the key file in
``STASH_HOME``, which every API and pipeline process already shares): a process that cannot sign
download URLs cannot ask for scores either.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any

from stash_pipeline.core.home import stash_home
from stash_pipeline.core.reward_requests import RewardRequest, request_to_dict
from stash_pipeline.objects.signing import signing_secret_from_env

SCORING_URL_ENV = "STASH_SCORING_URL"
DEFAULT_PORT = 8100
DEFAULT_SCORING_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
SCORING_TIMEOUT_ENV = "STASH_SCORING_TIMEOUT_S"
# What a caller waits for an answer, queueing, loading a model and reading included.
DEFAULT_TIMEOUT_S = 30
REWARDS_PATH = "/v1/rewards"
_TOKEN_LABEL = b"stash-pipeline scoring server v1"


def scoring_token(secret: bytes) -> str:
    return hmac.new(secret, _TOKEN_LABEL, hashlib.sha256).hexdigest()


def scoring_token_from_env(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return scoring_token(signing_secret_from_env(environ, stash_home(environ)))


def scoring_url_from_env(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return (environ.get(SCORING_URL_ENV) or DEFAULT_SCORING_URL).rstrip("/")


def rewards_body(evaluator: str, request: RewardRequest, timeout_s: float) -> dict[str, Any]:
    """A call of ``REWARDS_PATH``: the evaluator (a release version or a personal model id), the
    request in its JSON form, and how long the caller waits."""
    return {"evaluator": evaluator, "request": request_to_dict(request), "timeout_s": timeout_s}
