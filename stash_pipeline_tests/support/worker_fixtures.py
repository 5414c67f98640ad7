"""Fixtures and token pairs the worker suites share: the tiny model with a score head at std 1
(the scoring suites), and pairs of every kind a batch meets (the decoder and shared-prompt suites).
A test module takes a fixture by importing it."""

from __future__ import annotations

import random

import pytest
import torch

from stash_pipeline.worker.batching import MIN_SHARED_PREFIX
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer
from stash_pipeline.worker.train import EncodedPair


@pytest.fixture(scope="module")
def tokenizer(tiny_base_model):
    return load_tokenizer(str(tiny_base_model))


@pytest.fixture(scope="module")
def model(tiny_base_model, tokenizer):
    model = load_reward_model(str(tiny_base_model), dtype=torch.float32, device="cpu",
                              tokenizer=tokenizer)
    # The loaded head is initialised at std 0.02: scores near zero would hide a misread position.
    torch.manual_seed(1)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)
    return model


def tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(1, 97) for _ in range(count)]


def mixed_pairs() -> list[EncodedPair]:
    """Pairs of every kind a batch meets: two tails after one prompt (twice, one prompt also
    shared across pairs), a side nested in the other, identical sides in two pairs, a prompt too
    short to pack, and sides that share nothing."""
    rng = random.Random(0)
    prompt, other, short = tokens(rng, 60), tokens(rng, 35), tokens(rng, MIN_SHARED_PREFIX - 1)
    lone = tokens(rng, 50)
    return [
        EncodedPair(prompt + tokens(rng, 12), prompt + tokens(rng, 30)),
        EncodedPair(other + tokens(rng, 20), other + tokens(rng, 5)),
        EncodedPair(prompt + tokens(rng, 7), lone),
        EncodedPair(lone + tokens(rng, 9), lone),
        EncodedPair(short + tokens(rng, 10), short + tokens(rng, 11)),
        EncodedPair(tokens(rng, 40), tokens(rng, 25)),
    ]
