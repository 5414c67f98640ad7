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
    # STASH_EXTRACTION=off: a deployment without a model provider trains on deterministic pairs
    # only (ratings, comparisons, outcomes); comments, corrections and assessment stay unextracted.
    enabled: bool = True
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
            enabled=_switch(env.get("STASH_EXTRACTION", "on")),
            model=env.get("STASH_EXTRACTION_MODEL") or DEFAULT_MODEL,
            base_url=env.get("ANTHROPIC_BASE_URL") or None,
            max_retries=int(env.get("STASH_EXTRACTION_MAX_RETRIES", "4")),
            backoff_base_s=float(env.get("STASH_EXTRACTION_BACKOFF_S", "1.0")),
        )


def _switch(value: str) -> bool:
    normalized = value.strip().lower()
    if normalized in ("on", "1", "true", "yes"):
        return True
    if normalized in ("off", "0", "false", "no"):
        return False
    raise ValueError(f"STASH_EXTRACTION must be on or off, not {value!r}")
