"""Writing the checkpoint the seed promises: ``reward-model/`` with exactly its files, and its archive.

Reading one back (directory or archive, and its stats) is ``checkpoint_loading``.
"""

from __future__ import annotations

import gzip
import json
import os
import tarfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from stash_pipeline.compute.job import ARCHIVE_NAME, CHECKPOINT_DIR, atomic_path
from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.worker.checkpoint_loading import ACTION_REWARD_STATS_FILE, REWARD_STATS_FILE
from stash_pipeline.worker.render import Audience

__all__ = ["ARCHIVE_NAME", "CHECKPOINT_DIR", "MODEL_FILES", "archive", "save_checkpoint", "save_model",
           "write_stats"]

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")
# gzip level 1 in parallel members: model weights barely compress at any level (measured in
# docs/worker.md: level 9 saves a few percent more and takes many times longer).
ARCHIVE_LEVEL = 1
ARCHIVE_CHUNK_BYTES = 16 << 20


def save_checkpoint(model: Any, tokenizer: Any, directory: Path, *, audience: Audience,
                    reward_stats: RewardStats, action_reward_stats: RewardStats | None) -> Path:
    """Write the model (in its current dtype), tokenizer (with its template and left truncation)
    and the training stats; the folder appears whole (written beside it, then renamed)."""
    with atomic_path(directory) as partial:
        save_model(model, tokenizer, partial)
        write_stats(partial, audience=audience, reward_stats=reward_stats,
                    action_reward_stats=action_reward_stats)
    return directory


def save_model(model: Any, tokenizer: Any, directory: Path) -> None:
    """The weights in their current dtype, the config, and the tokenizer with its template."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def write_stats(directory: Path, *, audience: Audience, reward_stats: RewardStats,
                action_reward_stats: RewardStats | None) -> None:
    """The stats files beside a saved model, then a check that every file of the seed is there.

    The stats come from training pairs only: held-out pairs never set the display scale.
    reward_stats.json also records the audience, so a downloaded model renders as it was trained.
    """
    (directory / REWARD_STATS_FILE).write_text(json.dumps({**reward_stats.to_dict(), "audience": audience}))
    if action_reward_stats is not None:
        (directory / ACTION_REWARD_STATS_FILE).write_text(json.dumps(action_reward_stats.to_dict()))
    expected = set(MODEL_FILES) | {REWARD_STATS_FILE}
    if action_reward_stats is not None:
        expected.add(ACTION_REWARD_STATS_FILE)
    missing = expected - {p.name for p in directory.iterdir()}
    if missing:
        # A transformers upgrade must not change the published layout silently. A tokenizer that
        # needs more files (a vocabulary of its own) keeps them: the model needs them.
        raise RuntimeError(f"checkpoint {directory} lacks {sorted(missing)}")


def archive(directory: Path, destination: Path | None = None, *, level: int = ARCHIVE_LEVEL,
            threads: int | None = None) -> Path:
    """``reward-model.tar.gz`` beside the directory, its one top-level folder ``reward-model/``.

    The tar stream is gzipped in independent members of 16 MiB compressed on ``threads`` threads
    (zlib releases the GIL): a multi-member gzip file, which gzip, tar and Python read as one.
    """
    destination = destination or directory.parent / ARCHIVE_NAME
    with atomic_path(destination) as partial, partial.open("wb") as raw:
        with _ParallelGzip(raw, level, threads or os.cpu_count() or 1) as out:
            with tarfile.open(fileobj=out, mode="w|") as tar:
                for path in sorted(directory.iterdir()):
                    tar.add(path, arcname=f"{CHECKPOINT_DIR}/{path.name}")
    return destination


class _ParallelGzip:
    """A write-only file object: bytes in, gzip members out in order, compressed by a thread pool."""

    def __init__(self, raw: BinaryIO, level: int, threads: int):
        self.raw, self.level = raw, level
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.pending: deque[Future[bytes]] = deque()
        self.window = 2 * threads  # chunks in flight: bounds memory to a few dozen MiB
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        while len(self.buffer) >= ARCHIVE_CHUNK_BYTES:
            self._submit(bytes(self.buffer[:ARCHIVE_CHUNK_BYTES]))
            del self.buffer[:ARCHIVE_CHUNK_BYTES]
        return len(data)

    def _submit(self, chunk: bytes) -> None:
        self.pending.append(self.pool.submit(gzip.compress, chunk, self.level, mtime=0))
        while len(self.pending) > self.window:
            self.raw.write(self.pending.popleft().result())

    def __enter__(self) -> _ParallelGzip:
        return self

    def __exit__(self, error_type: Any, *exc: Any) -> None:
        try:
            if error_type is None:
                if self.buffer or not self.pending:
                    self._submit(bytes(self.buffer))
                while self.pending:
                    self.raw.write(self.pending.popleft().result())
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
