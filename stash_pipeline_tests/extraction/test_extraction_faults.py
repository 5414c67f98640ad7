"""A provider answering garbage, or no key at all: one line that says what happened and what to
do (issue 22). Before: `UnicodeDecodeError: 'utf-16-be' codec can't decode ...` was the model's
reason, and the missing key's message did not name STASH_EXTRACTION=off."""

from __future__ import annotations

import pytest

from stash_pipeline.extraction import ExtractionConfig, ExtractionError, MissingApiKeyError
from stash_pipeline_tests.support.extraction_samples import run

GARBAGE = [
    (200, b"\xfe\xff\x00{\xd8\x00\x00\x01garbage"),  # a UTF-16 BOM, then no UTF-16 at all
    (200, b"<html>upstream proxy error</html>"),
    (200, b""),
    (200, {"unexpected": "shape"}),
    (200, {"type": "message", "content": "not a list of blocks"}),
    (200, {"type": "message", "content": [17]}),
]


@pytest.mark.parametrize(("status", "body"), GARBAGE)
def test_a_garbage_answer_fails_with_one_line_naming_the_malformed_answer(
        fake_anthropic, extraction_config, status, body):
    fake_anthropic.reply(status, body)
    with pytest.raises(ExtractionError) as error:
        run(extraction_config)
    message = str(error.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith("feedback extraction failed for trace t1: malformed answer"), message
    assert "model provider" in message and "ANTHROPIC_BASE_URL" in message
    assert len(fake_anthropic.requests) == 1  # garbage is not retried


def test_a_missing_key_names_the_way_to_train_without_one(fake_anthropic):
    config = ExtractionConfig.from_env({"ANTHROPIC_BASE_URL": fake_anthropic.base_url})
    with pytest.raises(MissingApiKeyError) as error:
        run(config)
    message = str(error.value)
    assert "\n" not in message
    assert "ANTHROPIC_API_KEY" in message and "STASH_EXTRACTION=off" in message
