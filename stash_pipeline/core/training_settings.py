"""The seed's fixed training settings and request defaults: one place for every number.

"These are fixed in the worker; the request sets only" name, trace_ids, base_model, epochs and
max_pairs (seed, "Training settings"). Everything that trains, splits, caps or reports reads them
here.
"""

from __future__ import annotations

MAX_LENGTH = 1024  # tokens kept from the end of every input (longer texts lose their beginning)
LEARNING_RATE = 1e-5  # AdamW
BATCH_SIZE = 4  # pairs a step
SEED = 0  # the split, the max_pairs sample and the batch order
HOLDOUT_FRACTION = 0.1  # of source traces, at least 1 when possible
MIN_PAIRS = 2  # usable pairs a training job needs, held-out ones included
# Training pairs whose rewards set the display scale (reward_stats.json, action_reward_stats.json):
# all of them up to this many, else a seeded sample of this many (core.calibration).
DISPLAY_SCALE_PAIRS = 256

# Request defaults (seed, "Start a personal training job").
DEFAULT_BASE_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_EPOCHS = 1
DEFAULT_MAX_PAIRS = 4000

# A failed model's error: the last 2000 characters of worker.log (seed, "Status").
ERROR_TAIL_CHARS = 2000

# The checkpoint (seed, "Checkpoints"): the folder the worker writes and its archive, the one file
# the object store keeps and the owner downloads.
CHECKPOINT_DIR = "reward-model"
ARCHIVE_NAME = "reward-model.tar.gz"

# How long a checkpoint's download URL stays valid (seed, "Downloading the weights": five minutes).
DOWNLOAD_URL_EXPIRES_S = 300

# The shared evaluator (docs/shared-evaluator.md). Not the seed's numbers: the project's choices.
# Of the task groups (or traces without a task) that carry reviewed comparisons but no verified
# outcome, this share goes to the benchmark, chosen by a stable hash so a group never moves.
BENCHMARK_SHARE = 0.2
# The release gate's confidence level (two-sided 95%), and the widest interval, half-width at 50%
# accuracy, that a slice may have to be judged at all: MIN_SLICE_PAIRS follows from both.
GATE_Z = 1.959963984540054
MAX_SLICE_HALF_WIDTH = 0.25
# The first release needs at least this many training pairs from independently reviewed comparisons.
MIN_REVIEWED_TRAINING_PAIRS = 1
