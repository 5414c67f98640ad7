"""Loading the base model and tokenizer the way training and scoring both need them."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ContextManager

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from stash_pipeline.core.training_settings import MAX_LENGTH
from stash_pipeline.worker.render import CHAT_TEMPLATE, is_project_template

# Sequence classification pools at the last token that is not the pad id, so the pad id must never
# be a token a rendering can end with (renderings end with text, </tool_call> or a newline).
PAD_TOKEN = "<|endoftext|>"
TOKENS_A_RENDERING_CAN_END_WITH = ("<|im_end|>", "</tool_call>")


def pick_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def load_tokenizer(path_or_id: str, max_length: int = MAX_LENGTH) -> Any:
    """The tokenizer with left truncation (persisted by save_pretrained) and a safe pad token.

    truncation_side and padding_side are passed to from_pretrained because setting them afterwards
    is not saved (see the ML notes).
    """
    probe = AutoTokenizer.from_pretrained(path_or_id)
    pad_token = _pad_token(probe, path_or_id)
    tokenizer = AutoTokenizer.from_pretrained(
        path_or_id, truncation_side="left", padding_side="right", model_max_length=max_length,
        pad_token=pad_token,
    )
    if not is_project_template(tokenizer.chat_template):
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _pad_token(tokenizer: Any, path_or_id: str) -> str:
    vocab = tokenizer.get_vocab()
    if PAD_TOKEN in vocab:
        return PAD_TOKEN
    for candidate in (tokenizer.pad_token, tokenizer.eos_token):
        if candidate and candidate not in TOKENS_A_RENDERING_CAN_END_WITH:
            return candidate
    raise ValueError(
        f"base model {path_or_id}: its tokenizer has no pad token distinct from the tokens a "
        f"rendering can end with {TOKENS_A_RENDERING_CAN_END_WITH}"
    )


def load_reward_model(path_or_id: str, *, dtype: torch.dtype = torch.float32, device: str | None = None,
                      tokenizer: Any = None) -> Any:
    """AutoModelForSequenceClassification with one output, its pad id set, on ``device``.

    fp32 by default: transformers 5 loads a bf16 checkpoint as bf16 otherwise, and bf16 weights do
    not learn with AdamW at 1e-5 (updates underflow); bf16 comes from autocast instead.
    """
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path_or_id)
    model = AutoModelForSequenceClassification.from_pretrained(path_or_id, num_labels=1, dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device or pick_device())
    model.eval()
    return model


def tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids, cut from the left to the tokenizer's max length: the same in training and scoring.

    No special tokens are added: the rendering already holds every one the model reads.
    """
    encoded = tokenizer(
        list(texts), add_special_tokens=False, truncation=True, max_length=tokenizer.model_max_length,
    )
    return [list(ids) for ids in encoded["input_ids"]]


def supports_bf16_autocast(device: str) -> bool:
    if device == "cuda":
        return torch.cuda.is_bf16_supported()
    if device == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False  # mps: fp32, the safe choice


def autocast(device: str, enabled: bool = True) -> ContextManager[Any]:
    """bf16 autocast over fp32 master weights where the device supports it, else a no-op."""
    if enabled and supports_bf16_autocast(device):
        return torch.autocast(device_type=device, dtype=torch.bfloat16)
    return nullcontext()
