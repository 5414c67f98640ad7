"""A personal model's training run (pairs to scores); Score again runs are scoring's
(defs/scoring), in the reward pool, while the storing step here needs no pool slot."""

import dagster as dg

from stash_pipeline.defs.personal.assets import (
    personal_checkpoint,
    personal_pairs,
    personal_scores,
    personal_split,
)
from stash_pipeline.defs.worker_runs import MAX_RUNTIME_S

personal_training_job = dg.define_asset_job(
    "personal_reward_model_training",
    selection=[personal_pairs, personal_split, personal_checkpoint, personal_scores],
    tags={"dagster/max_runtime": MAX_RUNTIME_S},
    description="Train a requested personal reward model and score its owner's traces.",
)
