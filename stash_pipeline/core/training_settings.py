"""The seed's fixed training settings and request defaults: one place for every number.

"These are fixed in the worker; the request sets only" name, trace_ids, base_model, epochs and
max_pairs (seed, "Training settings"). Everything that trains, splits, caps or reports reads them here.
"""

from __future__ import annotations

MAX_LENGTH = 1024  # tokens kept from the end of every input (longer texts lose their beginning)
LEARNING_RATE = 1e-5  # AdamW
BATCH_SIZE = 4  # pairs a step
SEED = 0  # the split, the max_pairs sample and the batch order
HOLDOUT_FRACTION = 0.1  # of source traces, at least 1 when possible
MIN_PAIRS = 2  # usable pairs a training job needs, held-out ones included

# Request defaults (seed, "Start a personal training job").
DEFAULT_BASE_MODEL = "Qwen/Qwen3-0.6B"
DEFAULT_EPOCHS = 1
DEFAULT_MAX_PAIRS = 4000

# A failed model's error: the last 2000 characters of worker.log (seed, "Status").
ERROR_TAIL_CHARS = 2000

# How long a checkpoint's download URL stays valid (seed, "Downloading the weights": five minutes).
DOWNLOAD_URL_EXPIRES_S = 300
