"""The checkpoint the seed promises, written and read back in one place.

``reward-model/`` holds exactly the seed's files: the weights, config, tokenizer, chat template,
``reward_stats.json`` (with the audience), ``action_reward_stats.json`` when trained on action
comparisons, and the model card ``README.md``; ``reward-model.tar.gz`` archives it. A training job
writes it with ``writing_checkpoint``; ``RewardModel`` and the scoring-only job read it with
``open_checkpoint``, so a checkpoint scores the same wherever it is loaded.
"""

from __future__ import annotations

import gzip
import json
import os
import tarfile
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from stash_pipeline.compute.contract import ARCHIVE_NAME, CHECKPOINT_DIR, atomic_path
from stash_pipeline.core.calibration import RewardStats
from stash_pipeline.core.errors import InputError, NotFoundError
from stash_pipeline.core.training_settings import MAX_LENGTH
from stash_pipeline.worker.model_card import model_card
from stash_pipeline.worker.modeling import load_config, load_reward_model, load_tokenizer
from stash_pipeline.worker.render import AUDIENCES, Audience, template_for_audience

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")
REWARD_STATS_FILE = "reward_stats.json"
ACTION_REWARD_STATS_FILE = "action_reward_stats.json"
MODEL_CARD_FILE = "README.md"
# A checkpoint whose reward_stats.json records no audience was trained before it was recorded.
DEFAULT_AUDIENCE: Audience = "personal"
# gzip level 1 in parallel members: model weights barely compress at any level (measured in
# docs/worker.md: level 9 saves a few percent more and takes many times longer).
ARCHIVE_LEVEL = 1
ARCHIVE_CHUNK_BYTES = 16 << 20


# --- writing -----------------------------------------------------------------------------------

class CheckpointWriter:
    """``reward-model/`` in the two steps of a training job: the weights as they are stored
    (``save_model``, before the model is cast back to fp32 for evaluation), then the stats and the
    model card once evaluation has computed them (``finish``). Made by ``writing_checkpoint``."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.stored_dtype: str | None = None
        self.window: int | None = None
        self.finished = False

    def save_model(self, model: Any, tokenizer: Any) -> None:
        """The weights in their current dtype, the config, and the tokenizer with its template
        and left truncation."""
        self.directory.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(self.directory)
        tokenizer.save_pretrained(self.directory)
        dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        self.stored_dtype = str(dtype).removeprefix("torch.")
        self.window = int(tokenizer.model_max_length)

    def finish(self, *, evaluator: str, audience: Audience, base_model: str,
               metrics: Mapping[str, Any], reward_stats: RewardStats,
               action_reward_stats: RewardStats | None) -> None:
        """The stats files and the model card beside the saved model, then a check that every
        file of the seed is there.

        The stats come from training pairs only: held-out pairs never set the display scale.
        reward_stats.json also records the audience, and the chat template renders for it when
        its caller names none (plain transformers, TRL), so a downloaded model renders as it was
        trained. The card is written from the job's own numbers (``metrics``).
        """
        if self.stored_dtype is None or self.window is None:
            raise RuntimeError(f"checkpoint {self.directory}: save_model comes before finish")
        directory = self.directory
        (directory / REWARD_STATS_FILE).write_text(
            json.dumps({**reward_stats.to_dict(), "audience": audience}))
        template = directory / "chat_template.jinja"
        if template.exists():  # the model renders for its audience wherever it is loaded
            template.write_text(template_for_audience(template.read_text(encoding="utf-8"),
                                                      audience), encoding="utf-8")
        if action_reward_stats is not None:
            (directory / ACTION_REWARD_STATS_FILE).write_text(
                json.dumps(action_reward_stats.to_dict()))
        card = model_card(evaluator=evaluator, audience=audience, base_model=base_model,
                          window=self.window, stored_dtype=self.stored_dtype, metrics=metrics,
                          reward_stats=reward_stats, action_reward_stats=action_reward_stats)
        (directory / MODEL_CARD_FILE).write_text(card, encoding="utf-8")
        expected = {*MODEL_FILES, REWARD_STATS_FILE, MODEL_CARD_FILE}
        if action_reward_stats is not None:
            expected.add(ACTION_REWARD_STATS_FILE)
        missing = expected - {p.name for p in directory.iterdir()}
        if missing:
            # A transformers upgrade must not change the published layout silently. A tokenizer
            # that needs more files (a vocabulary of its own) keeps them: the model needs them.
            raise RuntimeError(f"checkpoint {directory} lacks {sorted(missing)}")
        self.finished = True


@contextmanager
def writing_checkpoint(directory: Path) -> Iterator[CheckpointWriter]:
    """A writer of the checkpoint ``directory``, which appears whole: the files are written
    beside it and renamed into place when the block ends with the checkpoint finished."""
    with atomic_path(directory) as partial:
        writer = CheckpointWriter(partial)
        yield writer
        if not writer.finished:
            raise RuntimeError(f"checkpoint {directory} left unfinished: no stats or model card")


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
    """A write-only file object: bytes in, gzip members out in order, compressed by a thread
    pool."""

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


# --- reading -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SavedCheckpoint:
    """A checkpoint's folder and what its stats say, read before any weights are loaded."""

    directory: Path
    audience: Audience  # who it was trained for, as reward_stats.json records it
    reward_stats: RewardStats
    action_reward_stats: RewardStats | None  # None: not trained on action comparisons

    def load_model(self, *, device: str, dtype: torch.dtype = torch.float32,
                   max_length: int = MAX_LENGTH) -> tuple[Any, Any]:
        """(model, tokenizer) as trained: the saved left truncation, pad token and template;
        ``dtype`` the weights' (fp32 holds a bf16 checkpoint exactly)."""
        path = str(self.directory)
        tokenizer = load_tokenizer(path, max_length=max_length, config=load_config(path))
        model = load_reward_model(path, dtype=dtype, device=device, tokenizer=tokenizer)
        return model, tokenizer


@contextmanager
def open_checkpoint(path: str | os.PathLike[str]) -> Iterator[SavedCheckpoint]:
    """The checkpoint at ``path`` (a ``reward-model/`` directory or its archive) with its stats
    read; its folder lives until the block ends (an archive is extracted to a temporary one)."""
    with checkpoint_directory(path) as directory:
        saved = _read_json(directory / REWARD_STATS_FILE, required=True)
        reward_stats = RewardStats.from_dict(saved, file=REWARD_STATS_FILE)  # a JSON object
        audience = saved.get("audience", DEFAULT_AUDIENCE)
        if audience not in AUDIENCES:
            raise InputError(f"expected one of {AUDIENCES}, got {audience!r}",
                             file=REWARD_STATS_FILE, field="audience")
        actions = _read_json(directory / ACTION_REWARD_STATS_FILE, required=False)
        action_stats = (None if actions is None
                        else RewardStats.from_dict(actions, file=ACTION_REWARD_STATS_FILE))
        yield SavedCheckpoint(directory, audience, reward_stats, action_stats)


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
        raise InputError("expected a reward-model directory or a .tar.gz archive of one",
                         file=str(path))
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


def _read_json(path: Path, *, required: bool) -> Any:
    if not path.is_file():
        if required:
            raise InputError("the checkpoint lacks this file; it is written by training",
                             file=path.name)
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error}", file=path.name) from error
