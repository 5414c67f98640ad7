"""The Pipes message readers the worker's launches use (local: a temporary file; Modal: S3).

Dagster's Pipes session reads ``expected_writer_count`` of its reader, a property Dagster 1.13
marks as a preview, so every launch printed a ``PreviewWarning`` no user can act on. Each worker is
one writer: the readers here answer 1 without the preview decorator.
"""

from __future__ import annotations

from typing import Any

import dagster as dg


class _OneWriter:
    @property
    def expected_writer_count(self) -> int:
        return 1


class TempFileMessageReader(_OneWriter, dg.PipesTempFileMessageReader):
    """``PipesTempFileMessageReader`` for one worker process on this machine."""


def s3_message_reader(*, bucket: str, client: Any, interval: float) -> dg.PipesMessageReader:
    """``PipesS3MessageReader`` for one worker in the Modal function (dagster-aws loads only
    here)."""
    from dagster_aws.pipes import PipesS3MessageReader

    class S3MessageReader(_OneWriter, PipesS3MessageReader):
        pass

    return S3MessageReader(bucket=bucket, client=client, interval=interval)
