"""Feedback -> preferences through the Anthropic API, with validation (DESIGN §4)."""

from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline.extraction.errors import ExtractionError, MissingApiKeyError
from stash_pipeline.extraction.extract import (
    ExtractionResult,
    extract_feedback_pairs,
    extract_items,
    extract_pairs,
    extraction_inputs,
)

__all__ = [
    "ExtractionConfig", "ExtractionError", "ExtractionResult", "MissingApiKeyError",
    "extract_feedback_pairs", "extract_items", "extract_pairs", "extraction_inputs",
]
