"""``X-Request-ID`` on every answer: the caller's own id when it sends a sane one (letters,
digits and ``._:-``, at most 128), else a new one; the failure log line names it, so a client's
report of an error finds its log. (A 500 is answered outside the middlewares: ``errors`` sets
the header on it.)
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_current: ContextVar[str | None] = ContextVar("request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being answered in this context (None outside one)."""
    return _current.get()


class RequestIds:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or ()).get(HEADER.lower().encode(), b"")
        text = sent.decode("latin-1")
        request_id = text if _SANE.fullmatch(text) else uuid.uuid4().hex
        # Set for the rest of the request's task (the server runs each request in a task of its
        # own), so the 500 handler, which runs outside this middleware, still finds it.
        _current.set(request_id)

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        await self.app(scope, receive, named)
