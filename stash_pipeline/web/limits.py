"""Request body limits: 413 before a body larger than its route allows is read into anything.

A declared Content-Length over the limit is refused at once; a chunked body is counted as it
arrives and refused once it passes the limit.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"the request body is larger than the limit of {limit} bytes")


class BodyLimit:
    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int]):
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await JSONResponse({"detail": BodyTooLarge(limit).detail},
                               status_code=413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)
