"""Reading a downloaded checkpoint: the directory or its archive, and its reward statistics."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.worker.render import AUDIENCES, Audience

REWARD_STATS_FILE = "reward_stats.json"
ACTION_REWARD_STATS_FILE = "action_reward_stats.json"
DEFAULT_AUDIENCE: Audience = "personal"


@contextmanager
def checkpoint_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The checkpoint's directory: ``path`` itself, or the archive extracted to a temporary one.

    The seed's archive holds a top-level ``reward-model/`` folder; an archive of the files alone is
    accepted too. The temporary directory is removed on exit: loading copies everything it needs.
    """
    path = Path(path)
    if path.is_dir():
        yield _model_folder(path, path)
        return
    if not path.is_file():
        raise NotFoundError(f"no reward-model checkpoint at {path}")
    if not tarfile.is_tarfile(path):
        raise InputError("expected a reward-model directory or a .tar.gz archive of one", file=str(path))
    with tempfile.TemporaryDirectory(prefix="reward-model-") as scratch:
        with tarfile.open(path, "r:*") as archive:
            # The "data" filter refuses absolute paths, links out of the folder and device files.
            archive.extractall(scratch, filter="data")
        yield _model_folder(Path(scratch), path)


def _model_folder(root: Path, source: Path) -> Path:
    if (root / "config.json").is_file():
        return root
    candidates = [child for child in root.iterdir() if (child / "config.json").is_file()]
    if len(candidates) != 1:
        raise InputError("no config.json in the checkpoint (nor in exactly one folder inside it)",
                         file=str(source))
    return candidates[0]


def read_stats(path: Path, *, required: bool) -> RewardStats | None:
    if not path.is_file():
        if required:
            raise InputError("the checkpoint lacks this file; it is written by training",
                             file=path.name)
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error}", file=path.name) from error
    return RewardStats.from_dict(data, file=path.name)


def saved_audience(directory: Path) -> Audience:
    """Who the model was trained for, when training recorded it in reward_stats.json."""
    path = directory / REWARD_STATS_FILE
    data = json.loads(path.read_text()) if path.is_file() else {}
    audience = data.get("audience", DEFAULT_AUDIENCE) if isinstance(data, dict) else DEFAULT_AUDIENCE
    if audience not in AUDIENCES:
        raise InputError(f"expected one of {AUDIENCES}, got {audience!r}", file=REWARD_STATS_FILE,
                         field="audience")
    return audience
