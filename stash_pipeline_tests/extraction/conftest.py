from __future__ import annotations

import pytest

from stash_pipeline.extraction.config import ExtractionConfig
from stash_pipeline_tests.support.fake_anthropic import FakeAnthropic
from stash_pipeline_tests.support.waiting import REQUEST_S, bound


@pytest.fixture
def fake_anthropic():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def extraction_config(fake_anthropic) -> ExtractionConfig:
    # Tiny backoff so retry tests run in milliseconds; the doubling is still exercised.
    return ExtractionConfig(api_key="test-key", base_url=fake_anthropic.base_url,
                            backoff_base_s=0.001, max_backoff_s=0.01, max_retries=3,
                            timeout_s=bound(REQUEST_S))
