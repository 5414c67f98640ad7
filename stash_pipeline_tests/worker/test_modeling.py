"""Model loading: one output, a pad id that never ends a rendering, batched = single scores."""

from __future__ import annotations

import logging

import pytest
import torch

from stash_pipeline.core.training_settings import MAX_LENGTH
from stash_pipeline.worker.modeling import (
    load_reward_model,
    load_tokenizer,
    pick_device,
    report_loading,
    tokenize,
)


@pytest.mark.slow
def test_reward_model_has_one_output_and_a_pad_id_distinct_from_turn_ends(tiny_base_model):
    tokenizer = load_tokenizer(str(tiny_base_model))
    model = load_reward_model(str(tiny_base_model), device="cpu", tokenizer=tokenizer)
    assert model.config.num_labels == 1
    assert model.config.pad_token_id == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert model.config.pad_token_id != tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tokenizer.model_max_length == MAX_LENGTH


@pytest.mark.slow
def test_batched_scores_equal_single_scores(tiny_base_model):
    tokenizer = load_tokenizer(str(tiny_base_model))
    model = load_reward_model(str(tiny_base_model), device="cpu", tokenizer=tokenizer)
    texts = ["<|im_start|>user\nhello<|im_end|>\n",
             "<|im_start|>user\na much longer message about a refund<|im_end|>\n"]
    ids = tokenize(tokenizer, texts)
    with torch.no_grad():
        single = [model(input_ids=torch.tensor([i])).logits[0, 0].item() for i in ids]
        batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        batched = model(**batch).logits[:, 0].tolist()
    assert batched == pytest.approx(single, abs=1e-5)


def test_pick_device_names_a_known_device():
    assert pick_device() in ("cuda", "mps", "cpu")


@pytest.mark.slow
def test_a_new_score_head_is_said_in_the_log_not_as_a_load_report(tiny_base_model, capfd,
                                                                   caplog):
    """A base model lacks the score head, as every reward model's base does: transformers'
    LOAD REPORT table (a warning on stderr) is not printed, and worker.log says it in words."""
    with caplog.at_level(logging.INFO, logger="stash_pipeline.worker"):
        model = load_reward_model(str(tiny_base_model), device="cpu")
    assert "LOAD REPORT" not in capfd.readouterr().err
    assert f"model {tiny_base_model}: a new score head (score.weight), randomly initialised " \
           "for training" in caplog.messages
    assert logging.getLogger("transformers.modeling_utils").filters == []  # as it was
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="stash_pipeline.worker"):
        report_loading(model, {"missing_keys": {"score.weight", "model.norm.weight"},
                               "unexpected_keys": {"lm_head.weight"}}, "m")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "model m: a new score head (score.weight), randomly initialised for training"),
        ("WARNING", "model m: weights newly initialised, not from its checkpoint: "
                    "model.norm.weight"),
        ("INFO", "model m: checkpoint weights a reward model does not use: lm_head.weight")]
