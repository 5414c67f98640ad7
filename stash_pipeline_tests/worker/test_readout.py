"""Reading rewards at chosen tokens through the model's own modules equals its own pooling."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from stash_pipeline.worker.readout import read_rewards, right_padded
from stash_pipeline_tests.support.tiny_models import SMALL_DECODER_TYPES, small_decoder_classifier

# Rows of different lengths, several reads in one row, one read at a row's first token.
SEQUENCES = [[5 + (7 * i) % 90 for i in range(120)], [3 + (11 * i) % 90 for i in range(75)], [9, 4]]
READS = [(0, 119), (0, 40), (0, 0), (1, 74), (1, 30), (2, 1), (0, 40)]



def reference(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The model's own pooling: its full forward, the score head at each read token."""
    base = getattr(model, model.base_model_prefix)
    hidden = base(input_ids=ids).last_hidden_state
    rows, positions = zip(*READS)
    return model.score(hidden[list(rows), list(positions)])[:, 0]


@pytest.mark.parametrize("model_type", SMALL_DECODER_TYPES)
def test_rewards_equal_the_full_forward(model_type: str) -> None:
    model = small_decoder_classifier(model_type).eval()
    ids, mask = right_padded(SEQUENCES, 0, "cpu")
    rows, positions = zip(*READS)
    with torch.no_grad():
        ours = read_rewards(model, ids, mask, rows, positions)
        theirs = reference(model, ids)
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    # A row read alone gives the same rewards as inside a padded batch.
    with torch.no_grad():
        alone = read_rewards(model, torch.tensor([SEQUENCES[1]]), torch.ones(1, 75), [0, 0],
                             [74, 30])
    assert torch.allclose(alone, ours[3:5], atol=1e-5)


@pytest.mark.parametrize("model_type", ["qwen3", "llama"])
def test_gradients_equal_the_full_forward(model_type: str) -> None:
    model = small_decoder_classifier(model_type).train()
    ids, mask = right_padded(SEQUENCES, 0, "cpu")
    rows, positions = zip(*READS)
    read_rewards(model, ids, mask, rows, positions).sum().backward()
    ours = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    reference(model, ids).sum().backward()
    theirs = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert ours.keys() == theirs.keys()
    for name, gradient in ours.items():
        assert torch.allclose(gradient, theirs[name], atol=1e-5, rtol=1e-4), name


def test_other_attention_and_encoders_run_whole() -> None:
    eager = small_decoder_classifier("qwen3", "eager").eval()
    ids, mask = right_padded(SEQUENCES, 0, "cpu")
    rows, positions = zip(*READS)
    with torch.no_grad():
        assert torch.allclose(read_rewards(eager, ids, mask, rows, positions),
                              reference(eager, ids), atol=1e-6)
    bert = AutoModelForSequenceClassification.from_config(BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=1)).eval()
    with torch.no_grad():
        ends = read_rewards(bert, ids, mask, [0, 1, 2], [119, 74, 1])
        whole = bert(input_ids=ids, attention_mask=mask).logits[:, 0]
    assert torch.equal(ends, whole)
