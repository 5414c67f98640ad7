"""How ``stash-pipeline api`` serves the app: uvicorn with read timeouts and a connection limit.

uvicorn alone never times out a client that trickles its request head or body, so its HTTP/1.1
protocol (h11) is extended here (docs/api.md, "Server limits"):

- **Header timeout** (``STASH_API_HEADER_TIMEOUT_S``): the request line and headers must be
  complete within this many seconds of the connection opening or of the previous response; else
  the connection is closed.
- **Body timeout** (``STASH_API_BODY_TIMEOUT_S``): the whole body must arrive within this many
  seconds of its head; else the server answers 408 (when no response has started) and closes.
- **Idle timeout** (``STASH_API_IDLE_TIMEOUT_S``): a kept-alive connection with no new request
  is closed after this many seconds (uvicorn's keep-alive timeout).
- **Connection limit** (``STASH_API_MAX_CONNECTIONS``): a connection past it makes room by closing
  the connection that has waited longest without a request in progress (one that sent nothing,
  trickles its head, or idles between requests); when every connection has a request in progress,
  the new one is answered 503 with ``Retry-After`` and closed. So connections that say nothing
  cannot keep a client out until they time out. The process's open-file limit is raised to its
  hard limit at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from stash_pipeline.api.settings import ServerSettings


def protocol_for(settings: ServerSettings) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``settings``' header and body timeouts and connection limit."""

    class GuardedH11Protocol(H11Protocol):
        limits = settings

        def connection_made(self, transport) -> None:
            self._head_timer = self._body_timer = None
            self._waiting_since = time.monotonic()  # for a request head, since then
            super().connection_made(transport)
            # Connections being closed (made room for a moment ago) do not count.
            open_ = sum(1 for c in self.connections if not c.transport.is_closing())
            if open_ > self.limits.max_connections and not self._make_room():
                transport.write(_busy_response())
                transport.close()
                return
            self._arm_head_timer()

        def _make_room(self) -> bool:
            """Close the connection that has waited longest without a request in progress;
            False when every other one has a request in progress."""
            waiting = [c for c in self.connections if c is not self
                       and isinstance(c, GuardedH11Protocol) and c._between_requests()
                       and not c.transport.is_closing()]
            if not waiting:
                return False
            min(waiting, key=lambda c: c._waiting_since).transport.abort()
            return True

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timers()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            cycle = self.cycle
            if cycle is not before and cycle is not None:  # a new request's head arrived
                self._cancel_timers()
                self._body_timer = self.loop.call_later(self.limits.body_timeout_s,
                                                        self._body_expired, cycle)
            if cycle is not None and not cycle.more_body and self._body_timer is not None:
                self._body_timer.cancel()  # the whole body is in
                self._body_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._waiting_since = time.monotonic()
                self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s,
                                                    self._head_expired, self.cycle)

        def _cancel_timers(self) -> None:
            for timer in (self._head_timer, self._body_timer):
                if timer is not None:
                    timer.cancel()
            self._head_timer = self._body_timer = None

        def _head_expired(self, cycle: Any) -> None:
            # Still no new request since the timer was armed (at connect or the last response).
            waiting = self.cycle is cycle and (cycle is None or cycle.response_complete)
            if waiting and not self.transport.is_closing():
                self.transport.close()

        def _body_expired(self, cycle: Any) -> None:
            if cycle is not self.cycle or not cycle.more_body or self.transport.is_closing():
                return
            if not cycle.response_started:
                self.transport.write(_timeout_response(self.limits.body_timeout_s))
            cycle.disconnected = True  # the app's next receive() gets http.disconnect
            cycle.message_event.set()
            self.transport.close()

    return GuardedH11Protocol


def _busy_response() -> bytes:
    body = json.dumps({"detail": "the server has no free connection: every one has a request "
                                 "in progress; try again in a second", "retryable": True}).encode()
    head = ("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"retry-after: 1\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


def _timeout_response(seconds: float) -> bytes:
    body = json.dumps({"detail": f"the request body did not arrive within {seconds:g} s; "
                                 "send it faster or in smaller requests"}).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


def quiet_disconnects(app: Any) -> Any:
    """``app`` without a logged traceback when a client goes away mid-body (a body timeout
    included), or when the server stops (Ctrl-C) with a request still in progress.

    uvicorn cancels the tasks of requests still running when its graceful shutdown times out
    (``STASH_API_SHUTDOWN_TIMEOUT_S``), or at once on a second Ctrl-C, and the app's start-up task
    as the process ends. Nothing went wrong on the server: what a cancelled request had begun is
    rolled back (its transaction, its temporary files), and it answers 503 if it had not answered
    yet."""
    from starlette.requests import ClientDisconnect

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        async def stopping() -> Any:
            """The app's shutdown message, also when the task waiting for it is cancelled (a
            second Ctrl-C): the app then shuts down as usual, instead of logging the
            cancellation's traceback as a failed shutdown."""
            nonlocal started
            try:
                message = await receive()
            except asyncio.CancelledError:
                if not started:
                    raise
                return {"type": "lifespan.shutdown"}
            started = True  # the start-up message came
            return message

        if scope.get("type") == "lifespan":
            await app(scope, stopping, send)
            return
        try:
            await app(scope, receive, tracked if scope.get("type") == "http" else send)
        except ClientDisconnect:
            if scope.get("type") != "http":
                raise
        except asyncio.CancelledError:
            if scope.get("type") == "http" and not started:
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.start", "status": 503, "headers": [
                        (b"content-type", b"application/json"), (b"connection", b"close"),
                        (b"retry-after", b"5")]})
                    await send({"type": "http.response.body", "body": _STOPPING})

    return guarded


_STOPPING = json.dumps({"detail": "the server is shutting down; nothing of this request was "
                                  "stored; try again", "retryable": True}).encode()


def config(app: Any, settings: ServerSettings, **options: Any) -> uvicorn.Config:
    """A uvicorn config for ``app`` with the limits of ``settings``; ``options`` go to uvicorn."""
    return uvicorn.Config(quiet_disconnects(app), http=protocol_for(settings),
                          timeout_keep_alive=settings.idle_timeout_s,
                          timeout_graceful_shutdown=settings.shutdown_timeout_s,
                          # The protocol limits connections itself (and so requests: one each);
                          # uvicorn's own count would include connections being closed.
                          limit_concurrency=None,
                          h11_max_incomplete_event_size=64 * 1024, **options)


def raise_open_file_limit() -> int:
    """The soft limit of open files raised to the hard one; returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft
