"""Bradley-Terry training: the loss, shared-prefix reads, batching, and that it learns."""

from __future__ import annotations

import random

import pytest
import torch

from stash_pipeline.core.pairs import Pair
from stash_pipeline.worker.batching import MIN_SHARED_PREFIX, common_prefix, rows_for
from stash_pipeline.worker.evaluation import pair_rewards_from
from stash_pipeline.worker.metrics import pairwise_accuracy
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, tokenize
from stash_pipeline.worker.render import cut_at_action, render_side
from stash_pipeline.worker.train import (
    EncodedPair,
    backward_groups,
    bradley_terry_loss,
    disable_dropout,
    packed_tokens,
    pair_rewards,
    shuffled_batches,
    train,
)


def encode(tokenizer, pairs: list[Pair]) -> list[EncodedPair]:
    chosen = tokenize(tokenizer, [render_side(tokenizer, p.chosen, "personal") for p in pairs])
    rejected = tokenize(tokenizer, [render_side(tokenizer, p.rejected, "personal") for p in pairs])
    return [EncodedPair(c, r) for c, r in zip(chosen, rejected)]


@pytest.fixture(scope="module")
def tokenizer(tiny_base_model):
    return load_tokenizer(str(tiny_base_model))


def fresh_model(tiny_base_model, tokenizer):
    torch.manual_seed(0)
    return load_reward_model(str(tiny_base_model), device="cpu", tokenizer=tokenizer)


def test_step_rating_pairs_nest_and_alternatives_share_their_prompt(tokenizer, synthetic_pairs):
    encoded = encode(tokenizer, synthetic_pairs(0, 2))
    alternative, step = encoded
    shared = common_prefix(alternative.chosen_ids, alternative.rejected_ids)
    # The generated alternative diverges after the user's turn: a prompt counted once.
    assert MIN_SHARED_PREFIX <= shared < min(len(alternative.chosen_ids),
                                             len(alternative.rejected_ids))
    assert alternative.cost == len(alternative.chosen_ids) + len(alternative.rejected_ids) - shared
    # The step rating's earlier action is read inside the later one.
    assert common_prefix(step.chosen_ids, step.rejected_ids) == len(step.chosen_ids)
    assert step.cost == max(len(step.chosen_ids), len(step.rejected_ids))


@pytest.mark.slow
def test_one_forward_for_a_shared_prefix_reads_the_same_rewards_as_two(tiny_base_model, tokenizer,
                                                                       synthetic_pairs):
    model = fresh_model(tiny_base_model, tokenizer)
    encoded = encode(tokenizer, synthetic_pairs(0, 6))
    # Half the pairs nest, half share their prompt: three tree rows among the rows run.
    rows = rows_for(model, [s for p in encoded for s in (p.chosen_ids, p.rejected_ids)])
    assert sum(bool(row.forks) for row in rows) == 3
    with torch.no_grad():
        shared = pair_rewards(model, encoded, "cpu", pad_id=tokenizer.pad_token_id)
        separate = pair_rewards(model, encoded, "cpu", pad_id=tokenizer.pad_token_id,
                                share_prefixes=False, batch_tokens=1 << 20)
        # And both equal the model's own sequence-classification forward, one text at a time.
        alone = [[model(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in side]
                 for side in ([p.chosen_ids for p in encoded], [p.rejected_ids for p in encoded])]
    for ours, reference in zip(shared, separate):
        assert ours.tolist() == pytest.approx(reference.tolist(), abs=1e-5)
    assert shared[0].tolist() == pytest.approx(alone[0], abs=1e-5)
    assert shared[1].tolist() == pytest.approx(alone[1], abs=1e-5)


def test_shuffled_batches_cover_every_pair_once_in_a_seeded_order():
    first = shuffled_batches(37, random.Random(0))
    assert sorted(i for batch in first for i in batch) == list(range(37))
    assert [len(batch) for batch in first] == [4] * 9 + [1]
    assert first == shuffled_batches(37, random.Random(0))
    assert first != shuffled_batches(37, random.Random(1))


@pytest.mark.slow
def test_repeated_sides_read_the_same_rewards_as_separate_forwards(tiny_base_model, tokenizer,
                                                                   synthetic_pairs):
    model = fresh_model(tiny_base_model, tokenizer)
    encoded = encode(tokenizer, synthetic_pairs(0, 4))
    # Sides repeated across pairs, in both roles, as one trace's step ratings give.
    encoded += [EncodedPair(p.rejected_ids, encoded[0].chosen_ids) for p in encoded[1:]]
    with torch.no_grad():
        shared = pair_rewards(model, encoded, "cpu", pad_id=tokenizer.pad_token_id)
        alone = [[model(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in side]
                 for side in ([p.chosen_ids for p in encoded], [p.rejected_ids for p in encoded])]
    assert shared[0].tolist() == pytest.approx(alone[0], abs=1e-5)
    assert shared[1].tolist() == pytest.approx(alone[1], abs=1e-5)


def test_bradley_terry_loss_is_minus_log_sigmoid_of_the_gap():
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 1.0])
    expected = -torch.log(torch.sigmoid(chosen - rejected)).mean()
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.slow
def test_bradley_terry_loss_equals_trl_reward_trainer_loss(tiny_base_model, tokenizer,
                                                           synthetic_pairs, tmp_path):
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    model = fresh_model(tiny_base_model, tokenizer)
    encoded = encode(tokenizer, synthetic_pairs(0, 4))
    dataset = Dataset.from_dict({"chosen_ids": [p.chosen_ids for p in encoded],
                                 "rejected_ids": [p.rejected_ids for p in encoded]})
    args = RewardConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, report_to=[],
                        use_cpu=True, max_length=None, center_rewards_coefficient=None)
    trainer = RewardTrainer(model=model, args=args, train_dataset=dataset,
                            processing_class=tokenizer)
    batch = trainer.data_collator([dataset[i] for i in range(4)])
    model.eval()
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, dict(batch)).item()
        chosen, rejected = pair_rewards(model, encoded, "cpu", pad_id=tokenizer.pad_token_id)
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(trl_loss, abs=1e-5)


@pytest.mark.slow
def test_training_learns_a_synthetic_preference_that_holds_out(tiny_base_model, tokenizer,
                                                               synthetic_pairs):
    model = fresh_model(tiny_base_model, tokenizer)
    train_pairs, eval_pairs = (encode(tokenizer, synthetic_pairs(0, 96)),
                               encode(tokenizer, synthetic_pairs(500, 24)))
    before = pairwise_accuracy(pair_rewards_from(model, eval_pairs, tokenizer.pad_token_id))
    result = train(model, train_pairs, epochs=3, device="cpu", pad_id=tokenizer.pad_token_id)
    after = pairwise_accuracy(pair_rewards_from(model, eval_pairs, tokenizer.pad_token_id))
    assert before < 0.9  # the untrained head does not already agree (seeded: 0.625)
    assert after > 0.9, (before, after, result.final_loss)
    assert result.epochs == 3 and len(result.step_losses) == 3 * 24
    assert result.final_loss == pytest.approx(sum(result.epoch_losses[-1]) / 24)
    assert result.final_loss < sum(result.epoch_losses[0]) / 24


@pytest.mark.slow
def test_training_needs_a_pair_and_trains_on_one(tiny_base_model, tokenizer, synthetic_pairs):
    model = fresh_model(tiny_base_model, tokenizer)
    with pytest.raises(ValueError, match="at least one pair"):
        train(model, [], epochs=1, device="cpu", pad_id=tokenizer.pad_token_id)
    # Two usable pairs split one and one (the seed counts held-out pairs): one pair trains.
    result = train(model, encode(tokenizer, synthetic_pairs(0, 1)), epochs=1, device="cpu",
                   pad_id=tokenizer.pad_token_id)
    assert len(result.step_losses) == 1 and result.final_loss == result.step_losses[0]


def long_pairs(tokenizer, tau2_sample, count: int) -> list[EncodedPair]:
    """Pairs of real tau2 traces, cut at different points: sides of a few hundred tokens, some
    sharing a side with another pair, so that grouping by tokens has something to split."""
    from stash_pipeline.core.pairs import PairSide

    sides = []
    for trace in tau2_sample:
        for action in trace.actions()[: count]:
            sides.append(PairSide(cut_at_action(trace, action.id), action.id))
    ids = tokenize(tokenizer, [render_side(tokenizer, side, "personal") for side in sides])
    rng = random.Random(3)
    return [EncodedPair(*rng.sample(ids, 2)) for _ in range(count)]


def test_backward_groups_hold_at_most_the_budget_and_every_pair_once(tokenizer, tau2_sample):
    pairs = long_pairs(tokenizer, tau2_sample, 4)
    costs = [p.cost for p in pairs]
    for budget in (1, max(costs), 2 * max(costs), None):
        groups = backward_groups(pairs, budget, share_prefixes=True)
        assert sorted(i for g in groups for i in g) == [0, 1, 2, 3]
        for group in groups:
            sides = [s for i in group for s in (pairs[i].chosen_ids, pairs[i].rejected_ids)]
            held = packed_tokens(sides, share_prefixes=True)
            assert len(group) == 1 or budget is None or held <= budget
    assert len(backward_groups(pairs, 1, share_prefixes=True)) == 4
    assert backward_groups(pairs, None, share_prefixes=True) == [[0, 1, 2, 3]]
    # Two pairs that share a side go together when they fit, so the side runs once.
    a, b, c = [5] * 300, [6] * 300, [7] * 300
    shared = [EncodedPair(a, b), EncodedPair(c, [8] * 300), EncodedPair(b, c)]
    assert backward_groups(shared, 900, share_prefixes=True) == [[0, 2], [1]]


@pytest.mark.slow
@pytest.mark.parametrize("use_autocast, tolerance", [(False, 1e-5), (True, 2e-3)])
def test_group_by_group_backward_gives_the_same_losses(tiny_base_model, tokenizer, tau2_sample,
                                                      synthetic_pairs, use_autocast, tolerance):
    """The memory change: the same training, whole batches or one pair at a time."""
    pairs = long_pairs(tokenizer, tau2_sample, 12) + encode(tokenizer, synthetic_pairs(0, 12))
    runs = {}
    for budget in (None, 1, 2048):
        model = fresh_model(tiny_base_model, tokenizer)
        runs[budget] = train(model, pairs, epochs=1, device="cpu", pad_id=tokenizer.pad_token_id,
                             use_autocast=use_autocast, backward_tokens=budget)
        runs[budget].weights = model.score.weight.detach().clone()
    assert max(len(backward_groups(pairs[i:i + 4], 2048, share_prefixes=True))
               for i in range(0, 24, 4)) > 1
    for budget in (1, 2048):
        assert runs[budget].step_losses == pytest.approx(runs[None].step_losses, abs=tolerance)
        assert torch.allclose(runs[budget].weights, runs[None].weights, atol=tolerance)


def _dropout_bert():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, num_labels=1,
        hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5))


def _dropout_qwen3():
    from transformers import AutoModelForSequenceClassification, Qwen3Config

    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(Qwen3Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, attention_dropout=0.5,
        num_labels=1, pad_token_id=0))


@pytest.mark.parametrize("build", [_dropout_bert, _dropout_qwen3])
def test_dropout_off_gives_training_forwards_the_evaluation_forward(build):
    model = build()
    ids = torch.randint(1, 64, (2, 12))
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    model.train()
    with torch.no_grad():
        noisy = model(input_ids=ids).logits
    assert not torch.allclose(noisy, expected)  # the config's dropout is really on
    disable_dropout(model)
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, expected, atol=1e-6)
        assert torch.allclose(model(input_ids=ids).logits, expected, atol=1e-6)


def test_training_runs_with_dropout_off(tiny_base_model, tokenizer, synthetic_pairs):
    model = fresh_model(tiny_base_model, tokenizer)
    model.config.attention_dropout = 0.5
    for module in model.modules():
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.5
    train(model, encode(tokenizer, synthetic_pairs(0, 4)), epochs=1, device="cpu",
          pad_id=tokenizer.pad_token_id)
    attention = [m.attention_dropout for m in model.modules()
                 if isinstance(getattr(m, "attention_dropout", None), float)]
    assert attention and set(attention) == {0.0}
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
