"""Batched reward reads: rows of token ids, grouped by length, scored at chosen positions.

A reward model for sequence classification pools the score head at a sequence's last real token.
For a causal decoder the hidden state at any position depends on the tokens up to it only, so the
same head applied at an inner position gives the reward of that prefix: one forward over a trace
reads every action that ends inside it. ``read_rows`` does both kinds of read with one mechanism.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_layers import GenericForSequenceClassification

# Padded tokens per forward. On an accelerator, large batches amortise launch overhead (and a
# 0.6B model's activations at 16 x 1024 tokens stay far within memory). On CPU the arithmetic is
# the bottleneck and activations that leave the cache cost more than batching saves: measured on
# the benchmark model, 24 windows of 1024 tokens took 1.54 s one per forward, 1.89 s two per
# forward. So a full window runs alone, and shorter rows share a forward up to one window's tokens.
ACCELERATOR_BATCH_TOKENS = 16384
CPU_BATCH_TOKENS = 1024


def default_batch_tokens(device: torch.device | str) -> int:
    return CPU_BATCH_TOKENS if torch.device(device).type == "cpu" else ACCELERATOR_BATCH_TOKENS


@dataclass(frozen=True)
class Row:
    """Token ids to run forward, and the (position, key) pairs to read a reward at."""

    ids: tuple[int, ...]
    reads: tuple[tuple[int, Hashable], ...]


def length_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped longest first so that rows x longest row stays within ``batch_tokens``.

    Sorting by length keeps padding small; a row longer than the budget gets a batch of its own.
    Ties keep input order, so the grouping is deterministic.
    """
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        # Longest first: the batch's padded width is its first row's length.
        if current and lengths[current[0]] * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def pools_last_token(model: Any) -> bool:
    """Whether the model is a decoder whose classifier is ``score`` over the last token's state.

    Only then may a reward be read at an inner position; other architectures (BERT pools its first
    token) are scored through their own forward, one read per row at its end.
    """
    return isinstance(model, GenericForSequenceClassification) and isinstance(
        getattr(model, "score", None), torch.nn.Linear
    )


def read_rows(model: Any, rows: Sequence[Row], *, pad_id: int | None,
              batch_tokens: int | None = None) -> dict[Hashable, float]:
    """The raw reward at every read of every row, batched by length, without gradients.

    ``batch_tokens`` bounds rows x longest row per forward (default: by the model's device).
    """
    if pad_id is None:
        raise ValueError("batched scoring needs a pad token: load the tokenizer with load_tokenizer")
    inner_reads = pools_last_token(model)
    for row in rows:
        if not row.ids:
            raise ValueError(f"cannot score an empty token sequence (reads {row.reads})")
        if not inner_reads and [p for p, _ in row.reads] != [len(row.ids) - 1]:
            raise ValueError(f"{type(model).__name__} can only be read at a row's last token")
    rewards: dict[Hashable, float] = {}
    device = next(model.parameters()).device
    batch_tokens = batch_tokens or default_batch_tokens(device)
    with torch.inference_mode():
        for batch in length_batches([len(row.ids) for row in rows], batch_tokens):
            chosen = [rows[i] for i in batch]
            width = len(chosen[0].ids)
            # Right padding: real tokens keep positions 0..n-1, exactly as when scored alone.
            ids = torch.full((len(chosen), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chosen), width), dtype=torch.long)
            for r, row in enumerate(chosen):
                ids[r, : len(row.ids)] = torch.tensor(row.ids, dtype=torch.long)
                mask[r, : len(row.ids)] = 1
            ids, mask = ids.to(device), mask.to(device)
            if inner_reads:
                values = _read_hidden(model, ids, chosen)
            else:
                values = model(input_ids=ids, attention_mask=mask).logits[:, 0].float().tolist()
            keys = [key for row in chosen for _, key in row.reads]
            rewards.update(zip(keys, values))
    return rewards


def _read_hidden(model: Any, ids: torch.Tensor, rows: Sequence[Row]) -> list[float]:
    """The classifier's own pooling (score head on a token's final hidden state), at chosen tokens."""
    base = getattr(model, model.base_model_prefix)
    # No padding mask: rows are right-padded and attention is causal, so a real token never sees a
    # pad; pads' own states are never read. A plain causal mask takes the fast attention kernel.
    hidden = base(input_ids=ids).last_hidden_state
    row_index = torch.tensor([r for r, row in enumerate(rows) for _ in row.reads], device=ids.device)
    position = torch.tensor([p for row in rows for p, _ in row.reads], device=ids.device)
    return model.score(hidden[row_index, position])[:, 0].float().tolist()
