"""The pre-download path of a training job: build, extract, cap, split, in that order."""

from __future__ import annotations

import json

import pytest

from stash_pipeline.core.feedback import Comment, Rating
from stash_pipeline.core.split import NotEnoughPairsError
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.extraction import ExtractionConfig, MissingApiKeyError
from stash_pipeline.pipelines.training_pairs import training_pairs


def trace(trace_id: str) -> Trace:
    return Trace(trace_id, (Message("user", "What is 2+2?"), Message("assistant", "5"),
                            Message("user", "Wrong, it is 4."), Message("assistant", "4")))


TRACES = [trace(f"t{i}") for i in range(12)]
RATINGS = [Rating(f"r{i}{k}", f"t{i}", v, f"m{m}")
           for i in range(12) for k, (m, v) in enumerate([(1, 0), (3, 1)])]


def answer_for(trace_id: str) -> dict:
    return {"preferences": [{
        "action_id": "m1", "source_id": "m2", "preferred": "alternative",
        "alternative": {"type": "text", "text": "4"}, "evidence_quote": "it is 4",
        "rationale": "2+2 is 4."}], "skipped": []}


def test_extracted_and_rated_pairs_are_capped_together_then_split(fake_anthropic,
                                                                   extraction_config):
    for t in TRACES:
        fake_anthropic.reply_tool(answer_for(t.id))
    result = training_pairs(TRACES, RATINGS, max_pairs=20, config=extraction_config)
    report = result.report
    assert report["extraction_requests"] == 12
    assert report["pairs"] == 20 and report["dropped_by_max_pairs"] == 4  # 12 rated + 12 extracted
    assert report["by_source"]["step_rating"] + report["by_source"]["correction"] == 20
    assert report["train_pairs"] + report["eval_pairs"] == 20  # one-trace pairs never cross
    assert report["eval_traces"] == 1 and report["generated_pairs"] == sum(
        p.generated for p in result.pairs)


def test_missing_key_fails_before_any_split_when_extraction_is_needed():
    with pytest.raises(MissingApiKeyError):
        training_pairs(TRACES, RATINGS, config=ExtractionConfig(api_key=None))


def test_too_few_pairs_is_the_clear_error(fake_anthropic, extraction_config):
    fake_anthropic.reply_tool({"preferences": [], "skipped": [
        {"source_id": "k", "reason": "not actionable"}]})
    plain = Trace("t", (Message("user", "hi"), Message("assistant", "hello")))
    result = training_pairs([plain], [Comment("k", "t", "nice")], config=extraction_config)
    assert result.split is None and "found 0" in result.report["error"]
    assert result.report["skipped_ambiguous"] == 1
    with pytest.raises(NotEnoughPairsError, match="found 0"):
        result.require_split()


def test_the_preview_calls_no_model_and_counts_what_would_be_extracted():
    result = training_pairs(TRACES, RATINGS, extract=False, config=ExtractionConfig(api_key=None))
    pending = result.report["pending_extraction"]
    assert result.report["extraction_requests"] == 0 and pending["traces"] == 12
    assert (pending["correction"], pending["assessment"]) == (12, 24)
    assert result.report["pairs"] == 12 and result.split is not None


def test_a_deployment_without_extraction_trains_on_deterministic_pairs():
    config = ExtractionConfig.from_env({"STASH_EXTRACTION": "off"})
    result = training_pairs(TRACES, RATINGS, config=config)
    assert result.report["extraction"] == "off" and result.report["pairs"] == 12
    assert result.report["pending_extraction"]["traces"] == 12
    with pytest.raises(ValueError, match="STASH_EXTRACTION"):
        ExtractionConfig.from_env({"STASH_EXTRACTION": "maybe"})


def test_orphaned_feedback_is_left_out_and_counted(fake_anthropic, extraction_config):
    """Feedback on an action a reimport removed (m9 here) never stops training: the rating and
    the comment on it are left out, the comment is not sent for extraction, and the report
    counts both."""
    for t in TRACES:
        fake_anthropic.reply_tool(answer_for(t.id))
    orphans = [Rating("gone", "t0", 1, "t0/m9"), Comment("k-gone", "t1", "bad", "t1/m9")]
    result = training_pairs(TRACES, [*RATINGS, *orphans], max_pairs=20,
                            config=extraction_config)
    assert result.report["orphaned_feedback"] == 2
    assert result.report["extraction_requests"] == 12
    assert all("k-gone" not in json.dumps(body) for body in fake_anthropic.requests)
    assert not any("gone" in p.source_id for p in result.pairs)
