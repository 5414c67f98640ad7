"""A TRL reward function from a downloaded checkpoint, for ``GRPOTrainer(reward_funcs=...)``.

    from stash_pipeline.serving.trl import RewardFunction
    reward = RewardFunction("reward-model")        # the folder, or reward-model.tar.gz
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=..., args=...)

TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., **columns)``; each
reward is the raw reward (or, ``output="calibrated"``, the calibrated score) of the conversation
the completion completes, exactly as the scoring server and stored scoring give it: the loader is
``scoring.RewardModel`` (the checkpoint's template, audience and 1024-token window), reads are
``worker.rewards``'. Prompts and completions are TRL's standard form (text: the prompt a user
turn, the completion an assistant turn) or conversational (lists of messages in OpenAI's form,
tool calls included). The completions of one prompt are candidates of one context: the prompt is
read once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.reward_requests import requests_for, reward_of
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.importers.openai_chat import convert_messages
from stash_pipeline.worker.rewards import score_requests
from stash_pipeline.worker.serving import load_model

OUTPUTS = ("raw", "calibrated")


class RewardFunction:
    def __init__(self, checkpoint: str | os.PathLike[str], *, output: str = "raw",
                 device: str | None = None, batch_tokens: int | None = None,
                 name: str = "stash_reward_model"):
        if output not in OUTPUTS:
            raise InputError(f"expected one of {OUTPUTS}", field="output")
        self.model = load_model(str(checkpoint), device=device)
        self.output, self.batch_tokens = output, batch_tokens
        self.__name__ = name  # TRL logs each reward function's rewards under its name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **_columns: Any) -> list[float]:
        if len(prompts) != len(completions):
            raise InputError(f"{len(prompts)} prompts for {len(completions)} completions",
                             field="completions")
        traces = [Trace(f"completion-{i}", _messages(p, "prompt") + _messages(c, "completion",
                                                                              reply=True))
                  for i, (p, c) in enumerate(zip(prompts, completions))]
        requests, where = requests_for(traces)
        answers = score_requests(self.model, requests, batch_tokens=self.batch_tokens)
        return [float(reward_of(answers, w)[self.output]) for w in where]


def _messages(value: Any, field: str, *, reply: bool = False) -> tuple[Message, ...]:
    """TRL's standard form (a string) or conversational form (a list of message dicts)."""
    if isinstance(value, str):
        return (Message("assistant" if reply else "user", value),)
    return convert_messages(value, field)
