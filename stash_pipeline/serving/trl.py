"""TRL reward functions for ``GRPOTrainer(reward_funcs=...)``: a downloaded checkpoint read in the
trainer's process (``RewardFunction``), or the service asked over HTTP (``HttpRewardFunction``:
the API's /rewards routes, with an API key).

    from stash_pipeline.serving.trl import HttpRewardFunction, RewardFunction
    reward = RewardFunction("reward-model")        # the folder, or reward-model.tar.gz
    reward = HttpRewardFunction("https://stash.example", key="stash_...", model="release")
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=..., args=...)

TRL calls either as ``reward(prompts=..., completions=..., completion_ids=..., **columns)``; each
reward is the raw reward (or, ``output="calibrated"``, the calibrated score) of the conversation
the completion completes, its whole reward only (one forward each), exactly as the scoring server
and stored scoring give it. Prompts and completions are TRL's standard form (text: the prompt a
user turn, the completion an assistant turn) or conversational (lists of messages in OpenAI's
form, tool calls included). The completions of one prompt are candidates of one context: the
prompt is read once. docs/serving.md says how these compare with passing the checkpoint folder
itself to TRL.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.reward_requests import MAX_CANDIDATES, requests_for, reward_of
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.importers.openai_chat import convert_messages
from stash_pipeline.serving.settings import OUTPUTS, RELEASE

# How long the HTTP function keeps retrying a busy service (503 with Retry-After) for one call.
DEFAULT_PATIENCE_S = 600.0


class RewardFunction:
    """A checkpoint loaded in this process as the scoring job loads it (``scoring.RewardModel``:
    its template, audience and window), read by ``worker.rewards``."""

    def __init__(self, checkpoint: str | os.PathLike[str], *, output: str = "raw",
                 device: str | None = None, batch_tokens: int | None = None,
                 name: str = "stash_reward_model"):
        from stash_pipeline.worker.serving import load_model

        self.output = _output(output)
        self.model = load_model(str(checkpoint), device=device)
        self.batch_tokens = batch_tokens
        self.__name__ = name  # TRL logs each reward function's rewards under its name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **_columns: Any) -> list[float]:
        from stash_pipeline.worker.rewards import score_requests

        traces = _traces(prompts, completions)
        requests, where = requests_for(traces)
        answers = score_requests(self.model, requests, batch_tokens=self.batch_tokens)
        return [float(reward_of(answers, w)[self.output]) for w in where]


class HttpRewardFunction:
    """The service's rewards: ``model`` is ``release`` (the current shared-evaluator release) or
    one of the key's account's succeeded personal models. Requests go ``concurrency`` at a time;
    a busy service (503) is asked again after its ``Retry-After``, for ``patience_s`` at most."""

    def __init__(self, url: str, *, key: str, model: str = RELEASE, output: str = "raw",
                 concurrency: int = 4, timeout_s: float = 120.0,
                 patience_s: float = DEFAULT_PATIENCE_S, name: str = "stash_reward_service"):
        self.output = _output(output)
        self.path = ("/api/v1/evaluator/rewards" if model == RELEASE
                     else f"/api/v1/rm/reward-models/{model}/rewards")
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s,
                                   headers={"Authorization": f"Bearer {key}"})
        self.concurrency, self.patience_s = concurrency, patience_s
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 **_columns: Any) -> list[float]:
        bodies, where = _bodies(prompts, completions)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            answers = list(pool.map(self._ask, bodies))
        return [float(reward_of(answers, w)[self.output]) for w in where]

    def _ask(self, body: dict[str, Any]) -> dict[str, Any]:
        give_up = time.monotonic() + self.patience_s
        while True:
            response = self.client.post(self.path, json=body)
            wait = float(response.headers.get("Retry-After", "1") or 1)
            if response.status_code != 503 or time.monotonic() + wait > give_up:
                break
            time.sleep(wait)
        if response.status_code != 200:
            raise RuntimeError(f"the reward service answered {response.status_code}: "
                               f"{response.text[:500]}")
        return response.json()

    def close(self) -> None:
        self.client.close()


def _output(output: str) -> str:
    if output not in OUTPUTS:
        raise InputError(f"expected one of {OUTPUTS}", field="output")
    return output


def _traces(prompts: Sequence[Any], completions: Sequence[Any]) -> list[Trace]:
    if len(prompts) != len(completions):
        raise InputError(f"{len(prompts)} prompts for {len(completions)} completions",
                         field="completions")
    return [Trace(f"completion-{i}", _messages(p, "prompt") + _messages(c, "completion",
                                                                         reply=True))
            for i, (p, c) in enumerate(zip(prompts, completions))]


def _messages(value: Any, field: str, *, reply: bool = False) -> tuple[Message, ...]:
    """TRL's standard form (a string) or conversational form (a list of message dicts)."""
    if isinstance(value, str):
        return (Message("assistant" if reply else "user", value),)
    return convert_messages(value, field)


def _bodies(prompts: Sequence[Any], completions: Sequence[Any]
            ) -> tuple[list[dict[str, Any]], list[tuple[int, int | None]]]:
    """The API bodies that give each completion's reward (whole rewards only), and where each
    is in their answers, as ``requests_for`` places them: a prompt's one-message completions are
    candidates of its context (at most ``MAX_CANDIDATES`` a body), others whole conversations."""
    if len(prompts) != len(completions):
        raise InputError(f"{len(prompts)} prompts for {len(completions)} completions",
                         field="completions")
    bodies: list[dict[str, Any]] = []
    where: list[tuple[int, int | None]] = []
    open_bodies: dict[str, int] = {}
    for prompt, completion in zip(prompts, completions):
        context = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        candidate = (completion if isinstance(completion, str)
                     else completion[0] if len(completion) == 1 else None)
        if candidate is None:
            where.append((len(bodies), None))
            bodies.append({"conversation": list(context) + list(completion), "actions": False})
            continue
        key = json.dumps(context, sort_keys=True, default=str)
        index = open_bodies.get(key)
        if index is None or len(bodies[index]["candidates"]) >= MAX_CANDIDATES:
            index = open_bodies[key] = len(bodies)
            bodies.append({"context": list(context), "candidates": [], "actions": False})
        where.append((index, len(bodies[index]["candidates"])))
        bodies[index]["candidates"].append(candidate)
    return bodies, where
