"""Model loading: one output, a pad id that never ends a rendering, batched = single scores."""

from __future__ import annotations

import pytest
import torch

from stash_pipeline.core.training_settings import MAX_LENGTH
from stash_pipeline.worker.modeling import load_reward_model, load_tokenizer, pick_device, tokenize


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
