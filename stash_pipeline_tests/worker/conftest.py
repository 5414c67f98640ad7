"""Worker test fixtures: real tau2-bench traces, and a tiny Qwen3 base model saved like a real one."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

from stash_pipeline.core.pairs import Pair, PairSide
from stash_pipeline.core.traces import Message, ToolCall, Trace, action_messages, content_trace_id

# The data lives beside the project, never inside it: <root>/../shared/data.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TAU2_RUNS = SHARED_DATA / "tau2-bench" / "runs"
TAU2_TOOLS = SHARED_DATA / "tau2-bench" / "domains" / "tools-data.json"
AGENTPROCESSBENCH = SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl"


def _openai_tool(tool: dict) -> dict:
    properties = {p["name"]: {"type": p.get("type", "string"), "description": p.get("description", "")}
                  for p in tool.get("parameters", [])}
    required = [p["name"] for p in tool.get("parameters", []) if p.get("required")]
    return {"type": "function", "function": {
        "name": tool["name"], "description": tool.get("description", ""),
        "parameters": {"type": "object", "properties": properties, "required": required}}}


@lru_cache(maxsize=None)
def _domain_tools(domain: str) -> tuple[dict, ...]:
    data = json.loads(TAU2_TOOLS.read_text())
    return tuple(_openai_tool(t) for t in data[domain]["tools"])


def tau2_traces(run: str = "airline_gpt-4o_azure", limit: int = 3) -> list[Trace]:
    """The first ``limit`` simulations of a run, with the domain's tools and its policy as system."""
    data = json.loads((TAU2_RUNS / f"{run}.json").read_text())
    domain = run.split("_", 1)[0]
    policy = (data.get("info") or {}).get("environment_info", {}).get("policy") or ""
    traces = []
    for simulation in data["simulations"][:limit]:
        messages = [Message("system", policy)] if policy else []
        for raw in simulation["messages"]:
            if raw["role"] == "tool":
                messages.append(Message("tool", raw.get("content") or "", tool_call_id=raw.get("id")))
                continue
            calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in raw.get("tool_calls") or ())
            messages.append(Message(raw["role"], raw.get("content") or "", tool_calls=calls))
        traces.append(Trace(
            id=content_trace_id("tau2", simulation["id"]), messages=tuple(messages), domain=domain,
            agent=run, tools=_domain_tools(domain),
            metadata={"task_id": simulation["task_id"],
                      "evaluation_context": {"domain": domain, "task_id": simulation["task_id"]}},
        ))
    return traces


def corpus_text(limit: int = 40) -> list[str]:
    """Raw text to train a tiny tokenizer on: message contents and call arguments of real traces."""
    texts: list[str] = []
    for trace in tau2_traces(limit=limit):
        for message in trace.messages:
            texts.append(message.content)
            texts.extend(json.dumps(c.arguments) for c in message.tool_calls)
    texts.extend(json.dumps(t) for t in _domain_tools("airline"))
    return texts


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen adds these as non-special added tokens: they are split off before pre-tokenisation.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def build_tokenizer(vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus_text(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
    )


def build_base_model(directory: Path, vocab_size: int) -> None:
    """A causal LM like a real base checkpoint: loading it for classification adds the score head."""
    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    import torch

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)


@pytest.fixture(scope="session")
def tiny_base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path to a saved tiny Qwen3 base model + tokenizer, loadable with from_pretrained."""
    directory = tmp_path_factory.mktemp("tiny-qwen3")
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(directory)
    build_base_model(directory, len(tokenizer))
    return directory


@pytest.fixture(scope="session")
def tau2_sample() -> list[Trace]:
    """A few real airline simulations, with tools, policy and evaluation context."""
    return tau2_traces(limit=4)


CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Dakar", "Hanoi", "Perth",
          "Seoul", "Rome", "Delhi", "Dublin", "Madrid", "Vienna", "Prague", "Athens", "Sofia", "Riga"]


def synthetic_trace(i: int) -> Trace:
    """A good action (look the flight up) and a bad one (refuse) in one trace."""
    city = CITIES[i % len(CITIES)]
    return Trace(id=f"s{i}", messages=(
        Message("user", f"Please book flight {i} to {city} for me."),
        Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "search_direct_flight", {"destination": city}),)),
        Message("tool", f'{{"flight": "HAT{i:03d}", "seats": {i % 7 + 1}}}', tool_call_id=f"c{i}"),
        Message("assistant", "I cannot help with that, goodbye."),
    ))


def build_synthetic_pairs(start: int, count: int) -> list[Pair]:
    """Half step-rating pairs (one trace, shared prefix), half generated-alternative pairs."""
    pairs = []
    for i in range(start, start + count):
        trace = synthetic_trace(i)
        good, bad = trace.action(f"s{i}/m1.call0"), trace.action(f"s{i}/m3")
        chosen = PairSide(trace.with_messages(action_messages(trace, good)), good.id)
        if i % 2:
            rejected = PairSide(trace.with_messages(action_messages(trace, bad)), bad.id)
        else:
            refusal = Message("assistant", "I cannot help with that, goodbye.")
            rejected = PairSide(trace.with_messages(trace.messages[:1] + (refusal,)), good.id)
        pairs.append(Pair(id=f"p{i}", kind="action", chosen=chosen, rejected=rejected,
                          source_kind="step_rating", source_id=f"r{i}", source_trace_ids=(trace.id,),
                          is_tool_call=True, tool_name="search_direct_flight"))
    return pairs


@pytest.fixture(scope="session")
def synthetic_pairs():
    """build_synthetic_pairs(start, count): a learnable preference, half shared-prefix pairs."""
    return build_synthetic_pairs
