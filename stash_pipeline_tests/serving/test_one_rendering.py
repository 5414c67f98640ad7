"""One rendering everywhere: a downloaded checkpoint read with plain transformers and its own chat
template gives the numbers the server, the CLI and stored scoring give, whatever form and spacing
the tool calls' arguments come in (a JSON string of any spacing, an object; OpenAI's form or
Anthropic's), on real traces (tau2-bench, AgentProcessBench with its broken arguments)."""

from __future__ import annotations

import itertools
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from stash_pipeline.core.reward_requests import ConversationRequest
from stash_pipeline.services.rewards import read_conversation
from stash_pipeline.worker.render import CHAT_TEMPLATE, evaluation_context_text, render_trace
from stash_pipeline.worker.rewards import score_requests
from stash_pipeline.worker.scoring import RewardModel, score_traces_and_actions
from stash_pipeline_tests.support.tiny_models import AGENTPROCESSBENCH, TAU2_RUNS, _domain_tools

pytestmark = pytest.mark.slow
# Ways a client writes the same arguments: OpenAI's API (compact), a pretty-printer, Python's
# json.dumps with its defaults (ASCII escapes), and odd spacing.
SPACINGS = {
    "compact": lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False),
    "indented": lambda value: json.dumps(value, indent=2, ensure_ascii=False),
    "ascii": json.dumps,
    "loose": lambda value: json.dumps(value, separators=(" ,  ", " :\t")),
}
# AgentProcessBench records whose agent emitted broken arguments (62, 112) and three others.
APB_RECORDS = (0, 1, 2, 62, 112)


def tau2_conversations(run: str = "retail_gpt-4.1", count: int = 2) -> list[dict[str, Any]]:
    """Real tau2-bench simulations as OpenAI-form conversations (their arguments objects)."""
    data = json.loads((TAU2_RUNS / f"{run}.json").read_text())
    policy = data["info"]["environment_info"]["policy"]
    out = []
    for simulation in data["simulations"][:count]:
        messages = [{"role": "system", "content": policy}]
        for raw in simulation["messages"]:
            if raw["role"] == "tool":
                messages.append({"role": "tool", "tool_call_id": raw["id"],
                                 "content": raw.get("content") or ""})
                continue
            message = {"role": raw["role"], "content": raw.get("content")}
            if raw.get("tool_calls"):
                message["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                    "name": c["name"], "arguments": c["arguments"]}} for c in raw["tool_calls"]]
            messages.append(message)
        out.append({"id": simulation["id"], "messages": messages,
                    "tools": list(_domain_tools(run.split("_", 1)[0]))})
    return out


def apb_conversations() -> list[dict[str, Any]]:
    """AgentProcessBench records (OpenAI form, arguments strings as the agent wrote them)."""
    lines = itertools.islice(AGENTPROCESSBENCH.open(), max(APB_RECORDS) + 1)
    return [json.loads(line) for index, line in enumerate(lines) if index in APB_RECORDS]


def with_arguments(conversation: dict[str, Any], write) -> dict[str, Any]:
    """The conversation with every object of arguments written by ``write`` (strings kept)."""
    def call(c: dict[str, Any]) -> dict[str, Any]:
        arguments = c["function"]["arguments"]
        return {**c, "function": {**c["function"], "arguments": arguments if isinstance(
            arguments, str) else write(arguments)}}
    return {**conversation, "messages": [
        {**m, "tool_calls": [call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in conversation["messages"]]}


def anthropic_form(conversation: dict[str, Any]) -> dict[str, Any]:
    """The same conversation in Anthropic's Messages form: tool_use blocks with object inputs,
    tool results in user turns."""
    system = "\n\n".join(m["content"] for m in conversation["messages"] if m["role"] == "system")
    messages: list[dict[str, Any]] = []
    for m in conversation["messages"]:
        if m["role"] == "assistant":
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": c["function"]["arguments"]} for c in m.get("tool_calls") or ()]
            messages.append({"role": "assistant", "content": blocks})
        elif m["role"] == "tool":
            result = {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                      "content": m["content"]}
            if messages and messages[-1]["role"] == "user" and isinstance(
                    messages[-1]["content"], list):
                messages[-1]["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        elif m["role"] == "user":
            messages.append({"role": "user", "content": m["content"]})
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in conversation["tools"]]
    return {"system": system, "messages": messages, "tools": tools}


class Plain:
    """A checkpoint as plain transformers loads it: its tokenizer, its chat template, fp32."""

    def __init__(self, archive: Path, folder: Path):
        with tarfile.open(archive) as opened:
            opened.extractall(folder, filter="data")
        path = folder / "reward-model"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=torch.float32).eval()

    def text(self, conversation: dict[str, Any], **variables: Any) -> str:
        return self.tokenizer.apply_chat_template(
            conversation["messages"], tools=conversation.get("tools"), tokenize=False,
            **variables)

    def reward(self, text: str) -> float:
        inputs = self.tokenizer(text, return_tensors="pt", truncation=True,
                                add_special_tokens=False)
        with torch.no_grad():
            return self.model(**inputs).logits[0, 0].item()


@pytest.fixture(scope="module")
def personal(checkpoints, tmp_path_factory) -> tuple[Plain, RewardModel]:
    archive = checkpoints["personal"]
    return Plain(archive, tmp_path_factory.mktemp("plain")), RewardModel(archive, device="cpu")


def test_arguments_of_any_spacing_render_as_their_object(personal):
    """Every real trace's arguments, written four ways as OpenAI's JSON strings, render as the
    object does (what ``json.dumps`` writes); broken ones as the agent wrote them."""
    plain, _ = personal
    checked = broken = 0
    for conversation in tau2_conversations(count=3) + apb_conversations():
        as_objects = plain.text(conversation)
        for write in SPACINGS.values():
            assert plain.text(with_arguments(conversation, write)) == as_objects
        for message in conversation["messages"]:
            for call in message.get("tool_calls") or ():
                arguments = call["function"]["arguments"]
                value = read_json(arguments) if isinstance(arguments, str) else arguments
                canonical = (json.dumps(value, ensure_ascii=False) if isinstance(value, dict)
                             else arguments)
                assert f'"arguments": {canonical}}}\n</tool_call>' in as_objects
                checked += 1
                broken += not isinstance(value, dict)
    assert checked > 25 and broken == 2


def read_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


@pytest.mark.parametrize("source", ["tau2", "agentprocessbench"])
def test_plain_transformers_reads_what_the_server_cli_and_stored_scoring_read(personal, source):
    """The text plain transformers renders (arguments in any spacing, the system message left
    in: the checkpoint's template leaves it out for a personal model) is the project's
    rendering, and its reward the server's, the CLI's (``score_requests``) and stored scoring's
    (``score_traces_and_actions``), to 1e-6 in fp32 (relative: the random score head gives
    rewards near 10, where fp32's own step is 1e-6); an Anthropic-form conversation too."""
    plain, loaded = personal
    conversations = tau2_conversations() if source == "tau2" else apb_conversations()
    for conversation in conversations:
        trace, _ = read_conversation(conversation, field="conversation")
        rendered = render_trace(loaded.tokenizer, trace, loaded.audience)
        served = score_requests(loaded, [ConversationRequest(trace, actions=False)])[0]["raw"]
        stored, _ = score_traces_and_actions(loaded.model, loaded.tokenizer, [trace],
                                             loaded.audience, actions=False)
        assert stored[trace.id] == pytest.approx(served, abs=1e-6)
        for write in SPACINGS.values():
            text = plain.text(with_arguments(conversation, write))
            assert text == rendered
            assert plain.reward(text) == pytest.approx(served, rel=1e-6, abs=1e-6)
        if source == "tau2":
            anthropic, found = read_conversation(anthropic_form(conversation), field="c")
            assert found == "anthropic"
            assert render_trace(loaded.tokenizer, anthropic, loaded.audience) == rendered
            assert score_requests(loaded, [ConversationRequest(anthropic, actions=False)])[0][
                "raw"] == pytest.approx(served, abs=1e-6)


def test_a_shared_checkpoint_keeps_the_system_message_and_reads_the_evaluation_context(
        checkpoints, tmp_path):
    plain = Plain(checkpoints["shared"], tmp_path)
    loaded = RewardModel(checkpoints["shared"], device="cpu")
    conversation = tau2_conversations(count=1)[0]
    trace, _ = read_conversation({**conversation, "metadata": {
        "evaluation_context": "Refunds go to the original payment method."}}, field="c")
    context = evaluation_context_text(trace, "shared")
    text = plain.text(with_arguments(conversation, SPACINGS["compact"]),
                      evaluation_context=context)
    assert text == render_trace(loaded.tokenizer, trace, "shared")
    assert "Refunds go to the original payment method." in text
    served = score_requests(loaded, [ConversationRequest(trace, actions=False)])[0]["raw"]
    assert plain.reward(text) == pytest.approx(served, rel=1e-6, abs=1e-6)


def test_the_saved_template_names_the_checkpoints_audience(personal):
    plain, loaded = personal
    saved = plain.tokenizer.chat_template
    assert saved != CHAT_TEMPLATE and "default_audience = 'personal'" in saved
    assert saved == loaded.tokenizer.chat_template
