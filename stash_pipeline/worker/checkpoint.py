"""Writing the checkpoint the seed promises: ``reward-model/`` with exactly its files, and its archive.

Reading one back (directory or archive, and its stats) is ``checkpoint_loading``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from stash_pipeline.compute.job import ARCHIVE_NAME, CHECKPOINT_DIR
from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.worker.checkpoint_loading import ACTION_REWARD_STATS_FILE, REWARD_STATS_FILE
from stash_pipeline.worker.render import Audience

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")


def save_checkpoint(model: Any, tokenizer: Any, directory: Path, *, audience: Audience,
                    reward_stats: RewardStats, action_reward_stats: RewardStats | None) -> Path:
    """Write the model, tokenizer (with its template and left truncation) and the training stats.

    The stats come from training pairs only: held-out pairs never set the display scale.
    reward_stats.json also records the audience, so a downloaded model renders as it was trained.
    """
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / REWARD_STATS_FILE).write_text(json.dumps({**reward_stats.to_dict(), "audience": audience}))
    if action_reward_stats is not None:
        (directory / ACTION_REWARD_STATS_FILE).write_text(json.dumps(action_reward_stats.to_dict()))
    expected = set(MODEL_FILES) | {REWARD_STATS_FILE}
    if action_reward_stats is not None:
        expected.add(ACTION_REWARD_STATS_FILE)
    written = {p.name for p in directory.iterdir()}
    if written != expected:
        # A transformers upgrade that writes other files must not change the published layout silently.
        raise RuntimeError(f"checkpoint {directory} holds {sorted(written)}, expected {sorted(expected)}")
    return directory


def archive(directory: Path, destination: Path | None = None) -> Path:
    """``reward-model.tar.gz`` beside the directory, its one top-level folder ``reward-model/``."""
    destination = destination or directory.parent / ARCHIVE_NAME
    with tarfile.open(destination, "w:gz") as tar:
        for path in sorted(directory.iterdir()):
            tar.add(path, arcname=f"{CHECKPOINT_DIR}/{path.name}")
    return destination
