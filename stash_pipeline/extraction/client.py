"""The Anthropic Messages API call, with our own exponential backoff on 429, 5xx and lost
connections (the SDK's retries are off, so the delays are configurable and tests stay fast)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anthropic

from stash_pipeline.core.extraction_inputs import ExtractionInput
from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.extraction.errors import ExtractionError, MissingApiKeyError
from stash_pipeline.extraction.prompt import build_request
from stash_pipeline.extraction.schema import TOOL_NAME

log = logging.getLogger(__name__)


class AnthropicExtractor:
    """Sends one request per trace and returns the record tool's input (not yet validated)."""

    def __init__(self, config: ExtractionConfig, *, pending_traces: int = 1,
                 sleep: Callable[[float], None] = time.sleep):
        if not config.api_key:
            raise MissingApiKeyError(pending_traces)
        self.config = config
        self._sleep = sleep
        self._client = anthropic.Anthropic(api_key=config.api_key, base_url=config.base_url,
                                           max_retries=0, timeout=config.timeout_s)

    def answer(self, item: ExtractionInput) -> Any:
        request = build_request(item, self.config.model, self.config.max_tokens)
        message = self._create(item.trace.id, request)
        try:
            calls = [block for block in message.content
                     if block.type == "tool_use" and block.name == TOOL_NAME]
        except (AttributeError, TypeError) as error:  # JSON, but not a Messages API answer
            raise _malformed(item.trace.id, error) from None
        if len(calls) != 1:
            raise ExtractionError(
                f"malformed answer: expected one {TOOL_NAME} tool call, got "
                f"{[block.type for block in message.content]} (stop_reason {message.stop_reason})",
                trace_id=item.trace.id)
        return calls[0].input

    def _create(self, trace_id: str, request: dict[str, Any]):
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._client.messages.create(**request)
            except anthropic.APIResponseValidationError as error:
                raise _malformed(trace_id, error) from None
            except (anthropic.APIConnectionError, anthropic.APIStatusError) as error:
                status = getattr(error, "status_code", None)
                retryable = status is None or status == 429 or status >= 500
                if not retryable or attempt + 1 == attempts:
                    what = f"HTTP {status}" if status is not None else type(error).__name__
                    tried = f" after {attempt + 1} attempt(s)" if retryable else ""
                    raise ExtractionError(f"Anthropic API request failed{tried}: {what}: "
                                          f"{_message(error)}", trace_id=trace_id) from error
                delay = min(self.config.max_backoff_s, self.config.backoff_base_s * 2 ** attempt)
                log.warning("extraction for trace %s: %s, retry %d/%d in %.2fs", trace_id,
                            status or type(error).__name__, attempt + 1, attempts - 1, delay)
                self._sleep(delay)
            except (ValueError, TypeError, AttributeError) as error:
                # An answer that is no JSON (UnicodeDecodeError, JSONDecodeError) or no message.
                raise _malformed(trace_id, error) from None
        raise AssertionError("unreachable")


def _malformed(trace_id: str, error: Exception) -> ExtractionError:
    """The provider answered something that is not a Messages API answer: one line saying so."""
    detail = (str(error).strip().splitlines() or [""])[0][:200]
    return ExtractionError(f"malformed answer from the model provider (Anthropic Messages API): "
                           f"{type(error).__name__}: {detail}; check ANTHROPIC_BASE_URL, or "
                           "retry later", trace_id=trace_id)


def _message(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", body["error"]))
    return str(error)
