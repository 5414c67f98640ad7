"""Requests answered by the engine from the event loop: the model made ready, the request planned
and admitted in a thread (``Engine.submit``), its answer awaited; whatever is still queued when
the caller is cancelled (its client left: ``web.disconnect``) is cancelled too, so the engine never
reads for nobody.

A batch of OpenRLHF queries of any size is answered in waves (``answer_all``): its requests are
submitted while the engine admits them, and one the engine refuses waits for this batch's own
earlier ones (or, with none in flight, for the engine's Retry-After) instead of failing the batch.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.reward_requests import RewardRequest
from stash_pipeline.serving.models import ModelRegistry
from stash_pipeline.worker.serving import Engine, EngineBusy


async def answer(registry: ModelRegistry, engine: Engine, evaluator: str, asked: RewardRequest,
                 horizon_s: float) -> tuple[str, dict[str, Any]]:
    """(the evaluator's kind, its answer to ``asked``); refused (EngineBusy, 503) when its answer
    would come later than ``horizon_s``."""
    state = await asyncio.to_thread(registry.ready, evaluator, horizon_s)
    future = await submitted(engine, evaluator, asked, horizon_s)
    return state.kind, await result(future)


async def answer_all(registry: ModelRegistry, engine: Engine, evaluator: str,
                     requests: Sequence[RewardRequest], horizon_s: float,
                     fields: Sequence[str]) -> tuple[str, list[dict[str, Any]]]:
    """(the evaluator's kind, the answers to ``requests``), in waves the engine admits.
    ``fields[i]``: where request i came from, named by an InputError about it. EngineBusy (503)
    only when nothing of this batch is in flight and the engine stays full for ``horizon_s``."""
    state = await asyncio.to_thread(registry.ready, evaluator, horizon_s)
    answers: list[dict[str, Any] | None] = [None] * len(requests)
    in_flight: deque[tuple[int, Future[dict[str, Any]]]] = deque()
    try:
        for index, asked in enumerate(requests):
            deadline = time.monotonic() + horizon_s
            while True:
                try:
                    future = await submitted(engine, evaluator, asked, None)
                    break
                except EngineBusy as busy:
                    if in_flight:
                        done, oldest = in_flight.popleft()
                        answers[done] = await result(oldest)
                    elif time.monotonic() + busy.retry_after_s > deadline:
                        raise
                    else:
                        await asyncio.sleep(busy.retry_after_s)
                except InputError as error:
                    raise InputError(error.reason, field=fields[index]) from None
            in_flight.append((index, future))
        while in_flight:
            done, oldest = in_flight.popleft()
            answers[done] = await result(oldest)
    finally:
        for _, future in in_flight:
            future.cancel()
    found = [a for a in answers if a is not None]
    if len(found) != len(requests):
        raise RuntimeError("a request of the batch was left unanswered")
    return state.kind, found


async def submitted(engine: Engine, evaluator: str, asked: RewardRequest,
                    horizon_s: float | None) -> Future[dict[str, Any]]:
    """``engine.submit`` in the model's planning thread (it plans); if the caller is cancelled
    meanwhile, the request it queues is cancelled as soon as it is."""
    loop = asyncio.get_running_loop()
    planning = loop.run_in_executor(engine.planner(evaluator), functools.partial(
        engine.submit, evaluator, asked, horizon_s=horizon_s))
    try:
        return await asyncio.shield(planning)
    except asyncio.CancelledError:
        planning.add_done_callback(_cancel_queued)
        raise


def _cancel_queued(planning: asyncio.Future[Future[dict[str, Any]]]) -> None:
    if not planning.cancelled() and planning.exception() is None:
        planning.result().cancel()


async def result(future: Future[dict[str, Any]]) -> dict[str, Any]:
    """The engine's answer; the request cancelled if the caller is."""
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()
        raise
