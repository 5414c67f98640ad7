"""Requests to train a shared-evaluator candidate (`evaluator train` without --wait): the sensor
launches one run of the chain for each, in id order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from stash_pipeline.store import schema

r = schema.shared_training_requests


@dataclass(frozen=True)
class SharedTrainingRequest:
    id: int
    base_model: str | None  # None: the deployment's default
    epochs: int | None
    created_at: datetime


def request_shared_training(connection: sa.Connection, *, base_model: str | None = None,
                            epochs: int | None = None) -> SharedTrainingRequest:
    row = connection.execute(r.insert().values(base_model=base_model, epochs=epochs)
                             .returning(*r.c)).one()
    return SharedTrainingRequest(**row._asdict())


def shared_training_requests(connection: sa.Connection, after: int = 0,
                             limit: int | None = None) -> list[SharedTrainingRequest]:
    """The requests with an id above ``after`` (the sensor's cursor), oldest first, ``limit``
    at most."""
    rows = connection.execute(sa.select(r).where(r.c.id > after).order_by(r.c.id).limit(limit))
    return [SharedTrainingRequest(**row._asdict()) for row in rows]
