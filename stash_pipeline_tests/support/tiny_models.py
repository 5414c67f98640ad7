"""Tiny models built from configs, and real traces to train and score them on (no hub needed).

Imported from every suite: `from stash_pipeline_tests.support.tiny_models import ...`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from stash_pipeline.core.traces import Message, ToolCall, Trace, content_trace_id
from stash_pipeline.worker import tiny_model

# The data lives beside the project, never inside it: <root>/../shared/data.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TAU2_RUNS = SHARED_DATA / "tau2-bench" / "runs"
TAU2_TOOLS = SHARED_DATA / "tau2-bench" / "domains" / "tools-data.json"
AGENTPROCESSBENCH = SHARED_DATA / "agentprocessbench" / "hotpotqa.jsonl"


def _openai_tool(tool: dict) -> dict:
    properties = {p["name"]: {"type": p.get("type", "string"),
                              "description": p.get("description", "")}
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
    """The first ``limit`` simulations of a run, with the domain's tools and its policy as
    system."""
    data = json.loads((TAU2_RUNS / f"{run}.json").read_text())
    domain = run.split("_", 1)[0]
    policy = (data.get("info") or {}).get("environment_info", {}).get("policy") or ""
    traces = []
    for simulation in data["simulations"][:limit]:
        messages = [Message("system", policy)] if policy else []
        for raw in simulation["messages"]:
            if raw["role"] == "tool":
                messages.append(Message("tool", raw.get("content") or "",
                                        tool_call_id=raw.get("id")))
                continue
            calls = tuple(ToolCall(c["id"], c["name"], c["arguments"])
                          for c in raw.get("tool_calls") or ())
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


def build_tokenizer(vocab_size: int = 1024):
    """The test tokenizer: learnt from real airline traces."""
    return tiny_model.build_tokenizer(corpus_text(), vocab_size)


def save_tiny_base_model(directory: Path, context: int) -> Path:
    """A tokenizer and a tiny Qwen3 causal LM of ``context`` positions saved like a real base
    checkpoint."""
    return tiny_model.save_tiny_base_model(directory, corpus_text(), context=context)


def write_checkpoint(model, tokenizer, directory: Path, *, audience: str, reward_stats,
                     action_reward_stats) -> Path:
    """``reward-model/`` of an in-memory model with chosen stats, through the training job's own
    writer (weights, then stats and card); the card's metrics are left empty."""
    from stash_pipeline.worker.checkpoint import writing_checkpoint

    with writing_checkpoint(directory) as checkpoint:
        checkpoint.save_model(model, tokenizer)
        checkpoint.finish(evaluator="test", audience=audience, base_model=model.name_or_path,
                          metrics={}, reward_stats=reward_stats,
                          action_reward_stats=action_reward_stats)
    return directory


# Three-layer decoders of each family the fast decoder runs (decoder.FAST_DECODER_TYPES,
# TREE_ROW_MODELS): small enough to compare every reward against the model's own forward.
SMALL_DECODER = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 128,
                 "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "max_position_embeddings": 512, "pad_token_id": 0}
SMALL_DECODER_TYPES = ("llama", "qwen2", "qwen3")


def small_decoder_classifier(model_type: str, attention: str = "sdpa"):
    """A one-label sequence classifier of ``SMALL_DECODER``'s shape, seed 0, in fp32."""
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        LlamaConfig,
        Qwen2Config,
        Qwen3Config,
    )

    configs = {"qwen3": lambda: Qwen3Config(head_dim=16, **SMALL_DECODER),
               "qwen2": lambda: Qwen2Config(**SMALL_DECODER),
               "llama": lambda: LlamaConfig(**SMALL_DECODER)}
    torch.manual_seed(0)
    config = configs[model_type]()
    config.num_labels = 1
    return AutoModelForSequenceClassification.from_config(
        config, attn_implementation=attention).float()


def random_head_checkpoint(base: Path, directory: Path, *, audience: str = "personal",
                           reward_stats=None, action_reward_stats=None, actions: bool = True,
                           seed: int = 2) -> Path:
    """``reward-model/`` of ``base`` with a score head drawn from N(0, 1) (rewards that differ
    from trace to trace, as a trained model's do), written by the training job's own writer."""
    import torch

    from stash_pipeline.core.calibration import RewardStats
    from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer

    tokenizer = load_tokenizer(str(base))
    model = load_reward_model(str(base), device="cpu", tokenizer=tokenizer)
    torch.manual_seed(seed)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return write_checkpoint(
        model, tokenizer, directory, audience=audience,
        reward_stats=reward_stats or RewardStats(mean=0.25, std=2.0, count=8),
        action_reward_stats=(action_reward_stats or RewardStats(mean=-0.5, std=0.5, count=6))
        if actions else None)
