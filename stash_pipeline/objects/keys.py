"""Object keys: the one layout for checkpoints, and the rule every key obeys.

A key is a relative path of ``/``-separated segments. Each segment starts with a letter or digit
and continues with letters, digits, ``.``, ``_`` or ``-``: so no segment is ``.`` or ``..``, no key
is absolute, hidden (the local store's temporary files start with ``.``) or needs quoting in a URL.
Model ids (UUIDs), attempts (run ids or numbers) and release versions all fit.
"""

from __future__ import annotations

import re

from stash_pipeline.core.training_settings import ARCHIVE_NAME
from stash_pipeline.objects.errors import ObjectLocationError

MAX_KEY_LENGTH = 1024  # S3's limit, in UTF-8 bytes; our keys are ASCII
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def validate_key(key: str) -> str:
    """``key`` itself when it is a valid key, else an ``ObjectLocationError`` saying why."""
    if not isinstance(key, str) or not key:
        raise ObjectLocationError(f"object key {key!r}: must be a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise ObjectLocationError(
            f"object key {key[:60]!r}...: longer than {MAX_KEY_LENGTH} characters")
    if key.startswith("/"):
        raise ObjectLocationError(f"object key {key!r}: must be relative, not absolute")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise ObjectLocationError(
                f"object key {key!r}: empty, '.' or '..' segments would leave the store's root")
        if not _SEGMENT.fullmatch(segment):
            raise ObjectLocationError(
                f"object key {key!r}: segment {segment!r} must start with a letter or digit and "
                "hold only letters, digits, '.', '_' and '-'")
    return key


def _segment(value: str | int, what: str) -> str:
    text = str(value)
    if not _SEGMENT.fullmatch(text):
        raise ObjectLocationError(
            f"{what} {text!r}: must start with a letter or digit and hold only letters, digits, "
            "'.', '_' and '-'")
    return text


def reward_model_checkpoint_key(model_id: str, attempt: str | int) -> str:
    """``reward-models/<model id>/<attempt>/reward-model.tar.gz``.

    One key per attempt (a Dagster run id, say): a retry never overwrites, and a failed attempt's
    object is never the one a succeeded model points to.
    """
    return (f"reward-models/{_segment(model_id, 'model id')}/{_segment(attempt, 'attempt')}/"
            f"{ARCHIVE_NAME}")


def shared_evaluator_checkpoint_key(version: str) -> str:
    """``shared-evaluator/<release version>/reward-model.tar.gz``."""
    return f"shared-evaluator/{_segment(version, 'release version')}/{ARCHIVE_NAME}"


def result_key(checkpoint_key: str, name: str) -> str:
    """``<the checkpoint's folder>/results/<name>``: a result file of the job that trained the
    checkpoint at ``checkpoint_key`` (metrics.json, scores.jsonl, ...), kept beside it so that a
    later step finds it by the key it computes from its partition or candidate, in any task."""
    folder = validate_key(checkpoint_key).rpartition("/")[0]
    return validate_key(f"{folder}/results/{_segment(name, 'result file name')}")
