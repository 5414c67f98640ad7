"""Batched reward reads: rows of token ids, grouped by length, scored at chosen positions.

``forward_rows`` is the one forward loop of the worker: training (``train.pair_rewards``, with
gradients), evaluation and scoring (``read_rows``, without) all run their rows through it. It runs
rows in forwards of a device's token budget (``length_batches``) and reads each row's rewards at
chosen tokens: Llama-family decoders through ``decoder.decoder_rewards`` over a compute copy of
their weights (fewer, larger kernels), other models through their own modules
(``readout.read_rewards``); for a causal decoder at any token (one forward over a trace reads
every action that ends inside it), for other models at the row's end.

``pack_rows`` puts distinct sequences into rows so that what they share is computed once: a
sequence that begins a longer one is read inside it, and (for the decoders of
``readout.reads_tree_rows``) sequences that share a prompt of at least ``MIN_SHARED_PREFIX`` tokens
and then diverge, as a preference pair's two last assistant turns do, run as one tree row: the
prompt once, then each continuation, every one attending to the prompt and to itself only, its
positions restarting where the prompt ends (``readout.tree_attention``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from stash_pipeline.worker.decoder import DecoderWeights, decoder_rewards, master_tensors, runs_fast
from stash_pipeline.worker.readout import (
    pools_last_token,
    read_rewards,
    reads_tree_rows,
    right_padded,
    tree_attention,
)

# Padded tokens per forward. On an accelerator, large batches amortise launch overhead (and a
# 0.6B model's activations at 16 x 1024 tokens stay far within memory). On CPU the arithmetic is
# the bottleneck and activations that leave the cache cost more than batching saves: measured on
# the benchmark model, 24 windows of 1024 tokens took 1.54 s one per forward, 1.89 s two per
# forward. So a full window runs alone, and shorter rows share a forward up to one window's tokens.
ACCELERATOR_BATCH_TOKENS = 16384
CPU_BATCH_TOKENS = 1024


def default_batch_tokens(device: torch.device | str) -> int:
    return CPU_BATCH_TOKENS if torch.device(device).type == "cpu" else ACCELERATOR_BATCH_TOKENS


# Sequences that share at least this many first tokens, then diverge, run as one tree row; below
# it the tokens saved are too few to be worth a masked forward. hh-rlhf pairs share 28 tokens
# or more in 9 of 10 records, under 16 in 4 of 1091 (docs/worker.md, "Shared prompts").
MIN_SHARED_PREFIX = 16
# Tokens a tree row holds at most: its attention runs over the whole row (rows x width^2 mask
# entries), so many sequences sharing a system prompt fill several rows, not one unbounded one.
MAX_TREE_TOKENS = 2048


@dataclass(frozen=True)
class Row:
    """Token ids to run forward, and the (position, key) pairs to read a reward at.

    ``forks`` makes the row a tree (``pack_rows``): each ``(start, parent)`` says that the tokens
    from ``start`` to the next fork (or the row's end) continue the sequence that ends at token
    ``parent``, not at token ``start - 1``. Empty: a plain sequence, run with the causal mask.
    """

    ids: tuple[int, ...]
    reads: tuple[tuple[int, Hashable], ...]
    forks: tuple[tuple[int, int], ...] = ()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first tokens ``a`` and ``b`` share (slice comparisons, so it runs at C speed)."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while high - low > 1:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def pack_rows(sequences: Iterable[Sequence[int]], *, share_prefixes: bool, branches: bool = False
              ) -> list[Row]:
    """Rows that read every distinct sequence once, each keyed by its tokens (a tuple).

    Without ``share_prefixes`` (a model read at row ends only) each distinct sequence is a row.
    With it, a sequence that begins a longer one is read inside it; with ``branches`` too,
    sequences that share at least ``MIN_SHARED_PREFIX`` first tokens and then diverge share one
    tree row (the shared tokens once) while it holds at most ``MAX_TREE_TOKENS``. Sorted, a
    sequence shares the most with the one before it, which is all a row needs to know.
    """
    distinct = sorted({tuple(sequence) for sequence in sequences})
    if distinct and not distinct[0]:
        raise ValueError("cannot run a sequence of no tokens (a pair side or text rendered empty)")
    if not share_prefixes:
        return [Row(sequence, ((len(sequence) - 1, sequence),)) for sequence in distinct]
    rows: list[Row] = []
    ids: list[int] = []
    reads: list[tuple[int, Hashable]] = []
    forks: list[tuple[int, int]] = []
    path: list[int] = []  # where the previous sequence's tokens are in the row
    previous: tuple[int, ...] = ()
    for sequence in distinct:
        shared = common_prefix(previous, sequence)
        nested = bool(previous) and shared == len(previous)  # it ends where this continues
        tree = bool(forks) or not nested
        joins = (nested or (branches and shared >= MIN_SHARED_PREFIX)) and (
            not tree or len(ids) + len(sequence) - shared <= MAX_TREE_TOKENS)
        if not joins:
            if ids:
                rows.append(Row(tuple(ids), tuple(reads), tuple(forks)))
            ids, reads, forks, path, shared = [], [], [], [], 0
        elif not nested:
            forks.append((len(ids), path[shared - 1]))
        path = path[:shared] + list(range(len(ids), len(ids) + len(sequence) - shared))
        ids.extend(sequence[shared:])
        reads.append((len(ids) - 1, sequence))
        previous = sequence
    if ids:
        rows.append(Row(tuple(ids), tuple(reads), tuple(forks)))
    return rows


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


def rows_for(model: Any, sequences: Iterable[Sequence[int]], *, share_prefixes: bool = True
             ) -> list[Row]:
    """``pack_rows`` as ``model`` can run them: inner reads for a decoder read by its score head
    (``pools_last_token``), tree rows where ``reads_tree_rows`` allows; else each distinct
    sequence alone. ``share_prefixes=False``: each distinct sequence alone for any model."""
    share_prefixes = share_prefixes and pools_last_token(model)
    return pack_rows(sequences, share_prefixes=share_prefixes,
                     branches=share_prefixes and reads_tree_rows(model))


def forward_rows(model: Any, rows: Sequence[Row], *, pad_id: int, device: torch.device | str,
                 batch_tokens: int | None = None, weights: DecoderWeights | None = None
                 ) -> Iterator[tuple[list[Hashable], torch.Tensor, int]]:
    """Run ``rows`` forward; per forward its read keys, their rewards (on the device, in the graph
    when autograd records) and its rows' tokens.

    Plain rows and tree rows run in forwards of their own, so plain rows keep the causal kernel
    (no mask); each kind is batched by length within ``batch_tokens`` (default: by device).
    ``weights``: the compute copy a ``decoder.runs_fast`` model runs through; None for the model's
    own modules.
    """
    budget = batch_tokens or default_batch_tokens(device)
    for trees in (False, True):
        kind = [row for row in rows if bool(row.forks) == trees]
        for batch in length_batches([len(row.ids) for row in kind], budget):
            chosen = [kind[i] for i in batch]
            ids, mask = right_padded([row.ids for row in chosen], pad_id, device)
            tree = (tree_attention([row.forks for row in chosen], [len(row.ids) for row in chosen],
                                   ids.shape[1], device) if trees else None)
            rows_index = [r for r, row in enumerate(chosen) for _ in row.reads]
            positions = [p for row in chosen for p, _ in row.reads]
            values = (decoder_rewards(model, weights, ids, rows_index, positions, tree)
                      if weights is not None
                      else read_rewards(model, ids, mask, rows_index, positions, tree))
            yield ([key for row in chosen for _, key in row.reads], values,
                   sum(len(row.ids) for row in chosen))


def read_rows(model: Any, rows: Sequence[Row], *, pad_id: int | None,
              batch_tokens: int | None = None,
              on_batch: Callable[[Sequence[Hashable], int], None] | None = None,
              ) -> dict[Hashable, float]:
    """The raw reward at every read of every row (``forward_rows``), without gradients.

    ``batch_tokens`` bounds rows x longest row per forward (default: by the model's device).
    ``on_batch(keys, tokens)`` follows each forward with the keys it read and its rows' tokens
    (progress reports).
    """
    if pad_id is None:
        raise ValueError("batched scoring needs a pad token: load the tokenizer with "
                         "load_tokenizer")
    inner_reads = pools_last_token(model)
    trees = reads_tree_rows(model)
    for row in rows:
        if not row.ids:
            raise ValueError(f"cannot score an empty token sequence (reads {row.reads})")
        if not inner_reads and [p for p, _ in row.reads] != [len(row.ids) - 1]:
            raise ValueError(f"{type(model).__name__} can only be read at a row's last token")
        if row.forks and not trees:
            raise ValueError(f"{type(model).__name__} cannot run tree rows "
                             "(readout.reads_tree_rows)")
    rewards: dict[Hashable, float] = {}
    device = next(model.parameters()).device
    with torch.inference_mode():
        weights = scoring_weights(model, device) if runs_fast(model) else None
        for keys, values, tokens in forward_rows(model, rows, pad_id=pad_id, device=device,
                                                 batch_tokens=batch_tokens, weights=weights):
            rewards.update(zip(keys, values.float().tolist()))
            if on_batch is not None:
                on_batch(keys, tokens)
    return rewards


# Per model, its last scoring copy and the state of the weights it was made from.
_SCORING_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scoring_weights(model: Any, device: torch.device) -> DecoderWeights:
    """The compute copy for reading without gradients, in the precision the surrounding context
    asks for: bf16 under bf16 autocast (as autocast would cast each weight), else the weights'
    own. Made once while the weights stay as they are (a server or a job's evaluation and scoring
    read many times): any change to a master tensor, in place or replaced, makes a new one."""
    dtype = (torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type)
             else next(model.parameters()).dtype)
    state = (dtype, tuple((p.data_ptr(), p._version) for p in master_tensors(model)))
    cached = _SCORING_COPIES.get(model)
    if cached is not None and cached[0] == state:
        return cached[1]
    _SCORING_COPIES.pop(model, None)  # the old copy's memory goes before the new one is made
    weights = DecoderWeights(model, dtype)
    _SCORING_COPIES[model] = (state, weights)
    return weights
