"""Extraction settings, read once from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# claude-sonnet-4-5 reaches end of life on 2026-11-30 (the SDK warns); override with
# STASH_EXTRACTION_MODEL.
DEFAULT_MODEL = "claude-sonnet-4-6"


@dataclass(frozen=True)
class ExtractionConfig:
    api_key: str | None = None
    model: str = DEFAULT_MODEL
    base_url: str | None = None  # None: Anthropic's API; tests point it at a local server
    max_retries: int = 4  # retries after the first attempt, on 429, 5xx and connection errors
    backoff_base_s: float = 1.0  # delay before retry k is backoff_base_s * 2**k, capped
    max_backoff_s: float = 30.0
    timeout_s: float = 120.0
    max_tokens: int = 8192

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ExtractionConfig:
        env = os.environ if environ is None else environ
        return cls(
            api_key=env.get("ANTHROPIC_API_KEY") or None,
            model=env.get("STASH_EXTRACTION_MODEL") or DEFAULT_MODEL,
            base_url=env.get("ANTHROPIC_BASE_URL") or None,
            max_retries=int(env.get("STASH_EXTRACTION_MAX_RETRIES", "4")),
            backoff_base_s=float(env.get("STASH_EXTRACTION_BACKOFF_S", "1.0")),
        )
