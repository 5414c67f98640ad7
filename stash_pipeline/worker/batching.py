"""Batched reward reads: rows of token ids, grouped by length, scored at chosen positions.

``read_rows`` runs rows in forwards of a device's token budget (``length_batches``) and reads each
row's rewards with ``readout.read_rewards``: for a causal decoder at any token (one forward over a
trace reads every action that ends inside it), for other models at the row's end.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from stash_pipeline.worker.readout import pools_last_token, read_rewards, right_padded

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


def read_rows(model: Any, rows: Sequence[Row], *, pad_id: int | None,
              batch_tokens: int | None = None,
              on_batch: Callable[[Sequence[Hashable], int], None] | None = None,
              ) -> dict[Hashable, float]:
    """The raw reward at every read of every row, batched by length, without gradients.

    ``batch_tokens`` bounds rows x longest row per forward (default: by the model's device).
    ``on_batch(keys, tokens)`` follows each forward with the keys it read and its rows' tokens
    (progress reports).
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
            ids, mask = right_padded([row.ids for row in chosen], pad_id, device)
            rows_index = [r for r, row in enumerate(chosen) for _ in row.reads]
            positions = [p for row in chosen for p, _ in row.reads]
            values = read_rewards(model, ids, mask, rows_index, positions).float().tolist()
            keys = [key for row in chosen for _, key in row.reads]
            rewards.update(zip(keys, values))
            if on_batch is not None:
                on_batch(keys, sum(len(row.ids) for row in chosen))
    return rewards
