"""Work for a request stopped when its client leaves: what it waits for is cancelled (a queued
scoring request is taken out of the queue, a call to another server is closed, which that server
sees in turn), and the request ends quietly (``ClientDisconnect``: no traceback, no answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import ClientDisconnect, Request

Result = TypeVar("Result")


async def until_disconnected(request: Request) -> None:
    """Returns when the client has gone (its body already read: the next message is the
    disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[Result]) -> Result:
    """``work``'s result, or ``ClientDisconnect`` with ``work`` cancelled when the client leaves
    first."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(until_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if not task.done():
        task.cancel()
        raise ClientDisconnect()
    return task.result()
