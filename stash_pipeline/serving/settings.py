"""The scoring server's settings (``stash-pipeline serve``'s options, docs/serving.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stash_pipeline.serving.protocol import DEFAULT_REWARDS_MAX_BYTES, DEFAULT_TIMEOUT_S

RELEASE = "release"  # a model name of /get_reward's: the current shared-evaluator release
Output = Literal["raw", "calibrated"]
OUTPUTS: tuple[Output, ...] = ("raw", "calibrated")
GET_REWARD_KEY_ENV = "STASH_GET_REWARD_KEY"
# What the API's calls may weigh, over what it accepts from a client: it sends the conversation it
# read again as JSON (ids and empty fields written out).
API_BODY_FACTOR = 4


@dataclass(frozen=True)
class ServeSettings:
    token: str  # what the API sends (protocol.scoring_token)
    # The longest a request may wait for its model to load, and for its answer: a request whose
    # answer would come later, at the measured reading rate, is refused at admission.
    timeout_s: float = DEFAULT_TIMEOUT_S
    # /get_reward's models (personal model ids, or "release"): the first answers /get_reward,
    # each answers /get_reward/<it>.
    openrlhf_models: tuple[str, ...] = ()
    openrlhf_output: Output = "raw"  # what /get_reward's "rewards" are unless ?output= says
    openrlhf_key: str | None = None  # when set, /get_reward needs Authorization: Bearer <it>
    max_body_bytes: int = DEFAULT_REWARDS_MAX_BYTES  # /get_reward's bodies (the API's: 4x)
    refresh_s: float = 60.0  # how often a new release and the chosen models are looked for
