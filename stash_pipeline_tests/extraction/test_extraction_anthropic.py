from __future__ import annotations

import pytest

from stash_pipeline.core.pairs import pair_context
from stash_pipeline.core.traces import Message, ToolCall, Trace
from stash_pipeline.extraction import (
    ExtractionConfig,
    ExtractionError,
    MissingApiKeyError,
    extract_feedback_pairs,
)
from stash_pipeline_tests.support.extraction_samples import COMMENT, TRACE, run
from stash_pipeline_tests.support.fake_anthropic import error_body, text_message


def preference(**overrides) -> dict:
    base = {
        "action_id": "m2.call1", "source_id": "k1",
        "alternative": {"type": "text", "text": "Before I book: window or aisle seat?"},
        "preferred": "alternative",
        "evidence_quote": "Booking without asking which seat I wanted was wrong.",
        "rationale": "The user expected to be asked about the seat before booking.",
    }
    return {**base, **overrides}


def test_good_extraction_makes_generated_pairs_with_provenance(fake_anthropic, extraction_config):
    fake_anthropic.reply_tool({"preferences": [
        preference(),
        preference(action_id="m5", source_id="m6", evidence_quote="I wanted a window seat.",
                   alternative={"type": "tool_call", "tool_call": {
                       "name": "change_seat", "arguments": {"flight": "AF123", "seat": "window"}}},
                   rationale="The user corrected the seat."),
        preference(action_id="m2.call0", source_id="assessment", preferred="original",
                   evidence_quote="[AF123]",
                   alternative={"type": "tool_call", "tool_call": {
                       "name": "search_flights", "arguments": {"to": "LON"}}},
                   rationale="Searching the requested destination was right."),
    ], "skipped": []})
    result = run(extraction_config)
    assert result.requests == 1 and result.skipped_count == 0
    by_source = {p.source_kind: p for p in result.pairs}
    assert set(by_source) == {"comment", "correction", "assessment"}
    assert all(p.generated and p.kind == "action" for p in result.pairs)

    comment = by_source["comment"]
    assert comment.source_id == "k1" and comment.evidence_quote.startswith("Booking without")
    assert comment.rejected.action_id == "t1/m2.call1" and comment.is_tool_call
    assert comment.rejected.trace.messages == TRACE.messages[:3]
    # The alternative replaces the second call; both sides share its context (text + first call).
    assert comment.chosen.trace.messages[-1] == Message(
        "assistant", "Before I book: window or aisle seat?")
    context = pair_context(comment)
    assert context[-1] == Message("assistant", "Let me look.", tool_calls=(
        ToolCall("c0", "search_flights", {"to": "PAR"}),))

    correction = by_source["correction"]
    assert correction.source_id == "t1/m6" and correction.tool_name == "change_seat"
    assert correction.chosen.trace.messages[-1].tool_calls[0].arguments == {
        "flight": "AF123", "seat": "window"}
    assert correction.rejected.trace.messages[-1] == Message("assistant", "AF123 is booked.")

    assessment = by_source["assessment"]
    assert assessment.source_id == "assessment"
    assert assessment.chosen.action_id == "t1/m2.call0"
    assert assessment.chosen.trace.messages[-1].tool_calls[-1].arguments == {"to": "PAR"}
    assert assessment.rejected.trace.messages[-1].tool_calls[-1].arguments == {"to": "LON"}
    assert assessment.slices == {"tool": "search_flights", "domain": "airline",
                                 "agent": "travel-bot"}

    (request,) = fake_anthropic.requests
    assert request["model"] == "claude-sonnet-4-6"
    assert request["tool_choice"] == {"type": "tool", "name": "record_preferences"}
    prompt = request["messages"][0]["content"]
    for expected in ("[m2.call1] tool call book_flight", "[k1] on m2.call1:",
                     "[m6] No, I wanted a window seat.", "Automatic assessment is enabled"):
        assert expected in prompt
    headers = fake_anthropic.headers[0]  # SDK 2.x sends the key as a bearer token
    assert "test-key" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


def test_ambiguous_feedback_is_skipped_and_counted(fake_anthropic, extraction_config):
    fake_anthropic.reply_tool({"preferences": [], "skipped": [
        {"source_id": "k1", "reason": "does not say what should have been done"},
        {"source_id": "m6", "reason": "ambiguous"}]})
    result = run(extraction_config)
    assert result.pairs == () and result.skipped_count == 2
    assert result.skipped[0] == ("t1", result.skipped[0][1])


@pytest.mark.parametrize("overrides, message", [
    ({"evidence_quote": "Booking was fine."}, "not verbatim in source 'k1'"),
    ({"action_id": "m9"}, "unknown action id 'm9'"),
    ({"action_id": "m3"}, "m3 is a tool message, not an assistant action"),
    ({"action_id": "m6"}, "m6 is a user message, not an assistant action"),
    ({"alternative": {"type": "tool_call", "tool_call": {"arguments": {}}}},
     "a tool call needs a tool name"),
    ({"alternative": {"type": "tool_call", "tool_call": {"name": "change_seat",
                                                         "arguments": "[1, 2]"}}},
     "arguments must be a JSON object, got str"),
    ({"alternative": {"type": "text", "text": "Let me look."}, "action_id": "m2"},
     "identical to the original action"),
    ({"source_id": "k99"}, "unknown source id 'k99'"),
    ({"source_id": "m6", "action_id": "m7", "evidence_quote": "window seat"},
     "correction m6 comes before the action"),
    ({"preferred": "both"}, "preferred must be 'original' or 'alternative'"),
    ({"rationale": ""}, "rationale must be non-empty text"),
])
def test_invalid_extraction_fails_naming_trace_and_action(fake_anthropic, extraction_config,
                                                          overrides, message):
    fake_anthropic.reply_tool({"preferences": [preference(**overrides)], "skipped": []})
    with pytest.raises(ExtractionError, match=message) as error:
        run(extraction_config)
    assert error.value.trace_id == "t1"
    assert error.value.action_id == overrides.get("action_id", "m2.call1")
    assert "trace t1, action" in str(error.value)


def test_quote_whitespace_may_be_rewrapped_but_words_must_match(fake_anthropic,
                                                                extraction_config):
    fake_anthropic.reply_tool({"preferences": [preference(
        evidence_quote="Booking without asking\n  which seat")], "skipped": []})
    assert len(run(extraction_config).pairs) == 1


@pytest.mark.parametrize("answer, message", [
    (text_message("I think the agent was fine."), "expected one record_preferences tool call"),
    ({"id": "m", "type": "message", "role": "assistant", "model": "x", "stop_reason": "tool_use",
      "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
      "content": [{"type": "tool_use", "id": "t", "name": "record_preferences",
                   "input": {"preferences": "none"}}]}, "'preferences' must be a list"),
])
def test_malformed_answer_fails_naming_the_trace(fake_anthropic, extraction_config, answer,
                                                 message):
    fake_anthropic.reply(200, answer)
    with pytest.raises(ExtractionError, match=message) as error:
        run(extraction_config)
    assert error.value.trace_id == "t1" and error.value.action_id is None


def test_rate_limit_then_success_retries(fake_anthropic, extraction_config):
    fake_anthropic.reply(429, error_body("rate_limit_error", "slow down"))
    fake_anthropic.reply(529, error_body("overloaded_error", "overloaded"))
    fake_anthropic.reply_tool({"preferences": [preference()], "skipped": []})
    result = run(extraction_config)
    assert len(result.pairs) == 1 and len(fake_anthropic.requests) == 3


def test_server_errors_exhaust_retries_with_a_clear_error(fake_anthropic, extraction_config):
    for _ in range(4):
        fake_anthropic.reply(500, error_body("api_error", "internal failure"))
    with pytest.raises(ExtractionError, match=r"after 4 attempt\(s\): HTTP 500: internal failure"):
        run(extraction_config)
    assert len(fake_anthropic.requests) == 4  # 1 + max_retries, then no more


def test_backoff_doubles_from_the_configured_base(fake_anthropic, extraction_config):
    from stash_pipeline.core.extraction_inputs import extraction_input
    from stash_pipeline.extraction.client import AnthropicExtractor

    delays: list[float] = []
    config = ExtractionConfig(api_key="k", base_url=fake_anthropic.base_url, max_retries=3,
                              backoff_base_s=0.5, max_backoff_s=1.5)
    for _ in range(4):
        fake_anthropic.reply(503, error_body("api_error", "unavailable"))
    extractor = AnthropicExtractor(config, sleep=delays.append)
    with pytest.raises(ExtractionError):
        extractor.answer(extraction_input(TRACE, [COMMENT], ["comment"]))
    assert delays == [0.5, 1.0, 1.5]


def test_client_errors_are_not_retried(fake_anthropic, extraction_config):
    fake_anthropic.reply(401, error_body("authentication_error", "invalid x-api-key"))
    with pytest.raises(ExtractionError, match="HTTP 401: invalid x-api-key"):
        run(extraction_config)
    assert len(fake_anthropic.requests) == 1


def test_missing_key_is_a_clear_error_only_when_extraction_is_needed(fake_anthropic):
    config = ExtractionConfig.from_env({"ANTHROPIC_BASE_URL": fake_anthropic.base_url})
    with pytest.raises(MissingApiKeyError, match="ANTHROPIC_API_KEY"):
        run(config)
    assert fake_anthropic.requests == []
    plain = Trace("t2", (Message("user", "hi"),))  # nothing to extract from: no key needed
    assert extract_feedback_pairs([plain], [], "personal", config).requests == 0


def test_shared_audience_extracts_only_from_opted_in_traces_without_assessment(
        fake_anthropic, extraction_config):
    assert run(extraction_config, audience="shared").requests == 0  # t1 did not opt in
    from dataclasses import replace

    fake_anthropic.reply_tool({"preferences": [], "skipped": []})
    result = extract_feedback_pairs([replace(TRACE, contribute=True)], [COMMENT], "shared",
                                    extraction_config)
    assert result.requests == 1  # the later user message m6: a possible correction
    prompt = fake_anthropic.requests[0]["messages"][0]["content"]
    assert "Automatic assessment is disabled" in prompt
    assert COMMENT.text not in prompt  # comments never train the shared evaluator


def test_configuration_from_environment():
    config = ExtractionConfig.from_env({"ANTHROPIC_API_KEY": "sk", "STASH_EXTRACTION_MODEL": "m",
                                        "STASH_EXTRACTION_BACKOFF_S": "0.25"})
    assert (config.api_key, config.model, config.backoff_base_s) == ("sk", "m", 0.25)
    assert ExtractionConfig.from_env({}).model == "claude-sonnet-4-6"
