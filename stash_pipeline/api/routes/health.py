"""``GET /health``: the process serves HTTP (a container's liveness and readiness probe).

It reads neither the database nor the object store: when the database is down every route answers
503 with its reason (docs/api.md), which a client can act on; a probe that failed then would take
every replica out of the load balancer and leave clients a connection error instead.
"""

from __future__ import annotations

from fastapi import APIRouter

from stash_pipeline.api.responses import Health

router = APIRouter(tags=["health"])
PATH = "/health"


@router.get(PATH)
def health() -> Health:
    return Health(status="ok")
