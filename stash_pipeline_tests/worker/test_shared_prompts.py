"""Sides that share a prompt run as one tree row: the same rewards, gradients and loss as apart."""

from __future__ import annotations

import copy

import pytest
import torch

from stash_pipeline.worker import decoder, readout
from stash_pipeline.worker.batching import (
    MAX_TREE_TOKENS,
    MIN_SHARED_PREFIX,
    Row,
    common_prefix,
    pack_rows,
    read_rows,
    rows_for,
)
from stash_pipeline.worker.evaluation import sequence_rewards
from stash_pipeline.worker.readout import TREE_ROW_MODELS, reads_tree_rows, tree_attention
from stash_pipeline.worker.train import (
    EncodedPair,
    backward_groups,
    make_optimizer,
    pair_rewards,
    train_step,
)
from stash_pipeline_tests.support.tiny_models import SMALL_DECODER_TYPES, small_decoder_classifier
from stash_pipeline_tests.support.worker_fixtures import mixed_pairs


def unpacked(function, *args, **kwargs):
    """``function`` with tree rows off: every side that shares a prompt runs apart."""
    before, readout.TREE_ROWS = readout.TREE_ROWS, False
    try:
        return function(*args, **kwargs)
    finally:
        readout.TREE_ROWS = before


@pytest.fixture(params=[True, False], ids=["fast-decoder", "model-modules"])
def fast_decoder(request, monkeypatch):
    monkeypatch.setattr(decoder, "FAST_DECODER", request.param)
    return request.param


def test_common_prefix_counts_the_first_tokens_two_sequences_share():
    assert common_prefix([1, 2, 3, 4], [1, 2, 3, 9]) == 3
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5], [6, 5]) == 0
    assert common_prefix([], [1]) == 0
    assert all(common_prefix(list(range(n)) + [99], list(range(n)) + [98]) == n for n in range(40))


def test_pack_rows_shares_prompts_nested_sides_and_identical_sides():
    prompt = list(range(1, MIN_SHARED_PREFIX + 1))
    a, b = prompt + [50, 51], prompt + [60]
    rows = pack_rows([a, b, prompt, a], share_prefixes=True, branches=True)
    # The prompt is read inside a, b forks from the prompt's last token: one row of 19 tokens.
    assert rows == [Row(tuple(prompt + [50, 51, 60]),
                        ((len(prompt) - 1, tuple(prompt)), (len(prompt) + 1, tuple(a)),
                         (len(prompt) + 2, tuple(b))),
                        ((len(prompt) + 2, len(prompt) - 1),))]
    # Without branches, b runs alone; without prefix sharing every distinct side does.
    assert [len(r.ids) for r in pack_rows([a, b, prompt], share_prefixes=True)] == [len(a), len(b)]
    assert len(pack_rows([a, b, prompt, a], share_prefixes=False)) == 3
    # A prompt under the minimum is not worth a tree; a nested side still reads inside.
    short = prompt[:-1]
    rows = pack_rows([short + [50], short + [60], short], share_prefixes=True, branches=True)
    assert [r.forks for r in rows] == [(), ()] and len(rows[0].reads) == 2
    with pytest.raises(ValueError, match="no tokens"):
        pack_rows([[]], share_prefixes=True)


def test_tree_rows_stop_at_their_token_limit():
    prompt = list(range(1, 101))
    tails = [prompt + [i] * 300 for i in range(1, 19)]
    rows = pack_rows(tails, share_prefixes=True, branches=True)
    assert sorted(key for row in rows for _, key in row.reads) == sorted(map(tuple, tails))
    assert all(len(row.ids) <= MAX_TREE_TOKENS for row in rows)
    assert len(rows) == 3 and all(row.forks for row in rows)  # 6 tails a row: 100 + 6 * 300


def test_tree_attention_gives_each_branch_its_own_causal_view():
    # Row: tokens 0-2 a prompt, 3-4 one tail, 5-6 another after token 2, then a pad.
    tree = tree_attention([((5, 2),)], [7], 8, "cpu")
    assert tree.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 4, 0]]
    allowed = tree.allowed[0, 0].int().tolist()
    assert allowed[4] == [1, 1, 1, 1, 1, 0, 0, 0]
    assert allowed[6] == [1, 1, 1, 0, 0, 1, 1, 0]
    assert allowed[7] == [0, 0, 0, 0, 0, 0, 0, 1]  # a pad sees itself only
    with pytest.raises(ValueError, match="continue an earlier token"):
        tree_attention([((3, 5),)], [7], 7, "cpu")


def test_tree_rows_only_for_checked_decoders_on_sdpa():
    assert set(SMALL_DECODER_TYPES) == TREE_ROW_MODELS
    assert all(reads_tree_rows(small_decoder_classifier(kind)) for kind in SMALL_DECODER_TYPES)
    assert not reads_tree_rows(small_decoder_classifier("qwen3", "eager"))
    sides = [s for p in mixed_pairs() for s in (p.chosen_ids, p.rejected_ids)]
    assert any(row.forks for row in rows_for(small_decoder_classifier("qwen3"), sides))
    assert not any(row.forks for row in rows_for(small_decoder_classifier("qwen3", "eager"), sides))
    with pytest.raises(ValueError, match="cannot run tree rows"):
        read_rows(small_decoder_classifier("qwen3", "eager"),
                  [Row((1, 2, 3), ((1, "a"), (2, "b")), ((2, 0),))], pad_id=0)


def test_cost_and_backward_groups_count_a_shared_prompt_once():
    prompt = [7] * 500
    pair = EncodedPair(prompt + [1] * 100, prompt + [2] * 200)
    assert pair.cost == 800
    assert EncodedPair([3] * 10, [4] * 20).cost == 30
    # Two such pairs fit a 1600-token budget only with their prompts counted once.
    other = EncodedPair([9] * 500 + [1] * 100, [9] * 500 + [2] * 200)
    assert backward_groups([pair, other], 1600, share_prefixes=True) == [[0, 1]]
    assert backward_groups([pair, other], 1600, share_prefixes=True, branches=False) == [[0], [1]]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", SMALL_DECODER_TYPES)
def test_packed_rewards_equal_unpacked_and_each_side_alone(model_type, fast_decoder):
    model = small_decoder_classifier(model_type).eval()
    pairs = mixed_pairs()
    sides = [s for p in pairs for s in (p.chosen_ids, p.rejected_ids)]
    assert sum(bool(row.forks) for row in rows_for(model, sides)) == 2
    with torch.no_grad():
        # A forward of at most 128 tokens: the tree rows, plain rows, pads, in several forwards.
        for budget in (128, 4096):
            packed = pair_rewards(model, pairs, "cpu", pad_id=0, batch_tokens=budget)
            apart = unpacked(pair_rewards, model, pairs, "cpu", pad_id=0, batch_tokens=budget)
            for ours, theirs in zip(packed, apart):
                assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
        alone = [model(input_ids=torch.tensor([side])).logits[0, 0].item() for side in sides]
    assert torch.cat(packed).tolist() == pytest.approx(
        alone[0::2] + alone[1::2], abs=1e-5)
    # Evaluation's reads (every distinct side once, through read_rows) pack the same way.
    evaluated = sequence_rewards(model, sides, 0)
    assert [evaluated[tuple(side)] for side in sides] == pytest.approx(alone, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3", "llama"])
def test_a_training_step_has_the_unpacked_gradients_and_loss(model_type, fast_decoder):
    model = small_decoder_classifier(model_type).train()
    pairs = mixed_pairs()
    results = {}
    for trees in (True, False):
        copied = copy.deepcopy(model)
        step = train_step if trees else (lambda *a, **k: unpacked(train_step, *a, **k))
        with decoder.training_copy(copied, torch.float32) as weights:
            assert (weights is not None) == fast_decoder
            # Groups of at most 256 tokens: the step runs several forwards and backwards.
            loss = step(copied, make_optimizer(copied, "cpu"), pairs, device="cpu", pad_id=0,
                        use_autocast=False, backward_tokens=256, copy=weights)
            results[trees] = loss.item(), {n: p.grad.clone()
                                           for n, p in copied.named_parameters()}
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-6)
    packed, apart = results[True][1], results[False][1]
    assert packed.keys() == apart.keys()
    for name, gradient in packed.items():
        assert torch.allclose(gradient, apart[name], atol=1e-6, rtol=1e-4), name
