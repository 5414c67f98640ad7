"""The API's client of the scoring server: one call, its answer, or the error the API answers.

No server, a server that does not answer within the time limit, and a busy one (refused at
admission, with the server's ``Retry-After``) are 503 (``ScoringUnavailable``): nothing was
changed, and the same call can succeed later. The server's 404 and 422 come back as
``NotFoundError`` and ``InputError``. A call cancelled (the API's client left) closes its
connection, and the server drops the request.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from stash_pipeline.core.errors import InputError, NotFoundError, UnavailableError
from stash_pipeline.core.reward_requests import RewardRequest
from stash_pipeline.serving.protocol import REWARDS_PATH, rewards_body

log = logging.getLogger(__name__)
# Seconds a client is told to wait when no server answers: a server starting loads its models.
NO_SERVER_RETRY_S = 5


class ScoringUnavailable(UnavailableError):
    def __init__(self, message: str, retry_after_s: int = NO_SERVER_RETRY_S):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ScoringClient:
    """Calls of ``url``'s ``REWARDS_PATH`` with ``token``, each waiting ``timeout_s`` at most."""

    def __init__(self, url: str, token: str, timeout_s: float):
        self.url, self.timeout_s = url.rstrip("/"), timeout_s
        self._headers = {"Authorization": f"Bearer {token}"}
        self._client: httpx.AsyncClient | None = None

    async def rewards(self, evaluator: str, request: RewardRequest) -> dict[str, Any]:
        """The server's answer for ``request`` scored by ``evaluator``."""
        if self._client is None:
            # The server refuses at admission what it would answer later than the call's
            # timeout_s; the client waits a little longer than that.
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s + 5, connect=2))
        try:
            response = await self._client.post(
                self.url + REWARDS_PATH, headers=self._headers,
                json=rewards_body(evaluator, request, self.timeout_s))
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            log.warning("no scoring server at %s: %s", self.url, error)
            raise ScoringUnavailable("no scoring server is running: the deployment starts one "
                                     "with `stash-pipeline serve`") from None
        except httpx.TimeoutException:
            raise ScoringUnavailable(f"the scoring server did not answer within "
                                     f"{self.timeout_s:g} s") from None
        except httpx.TransportError as error:
            log.warning("the scoring server at %s failed: %s", self.url, error)
            raise ScoringUnavailable("the scoring server closed the connection") from None
        return _answer(response)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _answer(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    detail = detail if isinstance(detail, str) else f"HTTP {response.status_code}"
    status = response.status_code
    if status == 200 and isinstance(body, dict):
        return body
    if status == 503:
        retry = response.headers.get("Retry-After", "")
        raise ScoringUnavailable(detail.removesuffix(f" (retry in {retry} s)"),
                                 int(retry) if retry.isdigit() else NO_SERVER_RETRY_S)
    if status == 404:
        raise NotFoundError(detail)
    if status == 422:
        field = body.get("field")
        # The server's detail names the field the way InputError does: said once, here.
        reason = detail.removeprefix(f"field {field!r}: ") if field else detail
        raise InputError(reason, field=field)
    if status == 401:
        log.error("the scoring server at %s refused this API's token: the two processes do not "
                  "share STASH_SIGNING_KEY (or STASH_HOME's signing.key)", response.url)
        raise ScoringUnavailable("the scoring server refused this API's credentials: its "
                                 "operator must give both the same signing key")
    raise RuntimeError(f"the scoring server answered {status}: {detail}")
