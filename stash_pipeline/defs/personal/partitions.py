"""One partition per personal reward model; the key is the model's id."""

import dagster as dg

personal_reward_model = dg.DynamicPartitionsDefinition(name="personal_reward_model")

# A run made for "Score again" carries the request's number; it rescores and trains nothing.
SCORE_AGAIN_TAG = "stash/score_again"
# A training run names its model and attempt (a partition key is the model's id; runs name it too).
MODEL_TAG = "stash/reward_model"
MODEL_NAME_TAG = "stash/reward_model_name"
ATTEMPT_TAG = "stash/attempt"
