"""Rewards read at chosen tokens of right-padded rows through the model's own modules.

A reward model for sequence classification pools its score head at a row's last real token. For a
causal decoder the state at any token depends on the tokens up to it only, so the same head at an
inner token gives the reward of that prefix (``pools_last_token``): one forward over a trace reads
every action that ends inside it. Other models (BERT pools its first token) are read at row ends.
Llama-family decoders run through ``decoder.decoder_rewards`` instead (the same rewards, fewer
kernels); this module reads every other model, and is the reference the fast path is tested
against.

A row may also be a tree (``batching.pack_rows``): a shared prompt once, then several
continuations of it. ``tree_attention`` gives such rows their position ids (each continuation's
restart where the prompt ends) and a 4D boolean mask (each token attends to its own sequence's
earlier tokens only, never to another continuation). Transformers' ``create_causal_mask`` passes a
4D mask through unchanged (and so never reads the restarted positions as packed sequences), and
SDPA takes a boolean mask as "may attend": each continuation gets exactly the states it has alone.
``reads_tree_rows`` says for which models this is checked (tests/worker); plain rows still run
without a mask, on the causal kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
import transformers
from transformers.modeling_layers import GenericForSequenceClassification
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

# Decoders checked (tests/worker) to give a tree row's continuations the rewards and gradients they
# have alone: their layers take the mask and positions as given. Off: sequences that share a
# prompt run apart (benchmarks switch it to measure what packing saves).
TREE_ROW_MODELS = frozenset({"llama", "qwen2", "qwen3"})
TREE_ROWS = True


class Tree(NamedTuple):
    """A batch of tree rows' position ids ``[rows, width]`` and attention mask ``[rows, 1, width,
    width]`` (True: may attend)."""

    position_ids: torch.Tensor
    allowed: torch.Tensor


def reads_tree_rows(model: Any) -> bool:
    """Whether sequences that share a prompt may run as one tree row (``tree_attention``) for this
    model: a checked decoder read by its score head, on SDPA (which reads a boolean mask as
    "may attend"; eager attention adds the mask), every layer full attention (a 4D mask passes
    through unchanged, so a sliding window would be lost)."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (TREE_ROWS and pools_last_token(model) and config.model_type in TREE_ROW_MODELS
            and config._attn_implementation == "sdpa"
            and all(kind == "full_attention" for kind in layer_types))


def pools_last_token(model: Any) -> bool:
    """Whether the model is a decoder whose classifier is ``score`` over the last token's state.

    Only then may a reward be read at an inner position; other architectures (BERT pools its first
    token) are scored through their own forward, one read per row at its end.
    """
    return isinstance(model, GenericForSequenceClassification) and isinstance(
        getattr(model, "score", None), torch.nn.Linear
    )


def reads_inner_tokens(config: Any) -> bool:
    """``pools_last_token`` from a model's config, before the model is loaded: its tokenisation
    depends on it (inputs of other models get their tokenizer's special tokens, e.g. BERT's
    [CLS])."""
    name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(getattr(config, "model_type", ""))
    cls = getattr(transformers, name, None) if name else None
    return isinstance(cls, type) and issubclass(cls, GenericForSequenceClassification)


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A CPU tensor on ``device`` without waiting for the device: a plain copy to CUDA synchronises
    the host with every queued kernel, so indices go through pinned memory, asynchronously."""
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor if torch.device(device).type == "cpu" else tensor.to(device)


def long_tensor(values: Sequence[Any], device: torch.device | str) -> torch.Tensor:
    return to_device(torch.tensor(values, dtype=torch.long), device)


def right_padded(sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, padded on the right: real tokens keep positions 0..n-1,
    exactly the positions they have when run alone."""
    width = max(len(sequence) for sequence in sequences)
    # Built as lists and made tensors at once: one operation each, not a few per row.
    ids = torch.tensor([[*sequence, *[pad_id] * (width - len(sequence))] for sequence in sequences],
                       dtype=torch.long)
    mask = torch.tensor([[1] * len(sequence) + [0] * (width - len(sequence))
                         for sequence in sequences], dtype=torch.long)
    return to_device(ids, device), to_device(mask, device)


def tree_attention(forks: Sequence[Sequence[tuple[int, int]]], lengths: Sequence[int], width: int,
                   device: torch.device | str) -> Tree:
    """Position ids and attention mask of right-padded tree rows (``batching.Row.forks``).

    A row's first tokens and each fork's tokens are causal runs; a fork's run also sees every token
    its parent token sees, and its positions continue the parent's. Pads see themselves only (a
    softmax over no key at all would be NaN, and NaN times a zero weight spreads in the backward).
    """
    positions = torch.zeros((len(lengths), width), dtype=torch.long)
    allowed = torch.zeros((len(lengths), width, width), dtype=torch.bool)
    for row, (row_forks, length) in enumerate(zip(forks, lengths)):
        starts = [0, *(start for start, _ in row_forks), length]
        parents = [None, *(parent for _, parent in row_forks)]
        for start, end, parent in zip(starts, starts[1:], parents):
            if parent is not None and not 0 <= parent < start < end:
                raise ValueError(f"row {row}: fork at {start} continues token {parent}; forks must "
                                 "continue an earlier token and run in order")
            count = end - start
            first = 0 if parent is None else int(positions[row, parent]) + 1
            positions[row, start:end] = torch.arange(first, first + count)
            if parent is not None:
                allowed[row, start:end] = allowed[row, parent]
            allowed[row, start:end, start:end] = torch.ones(count, count, dtype=torch.bool).tril()
        pads = torch.arange(length, width)
        allowed[row, pads, pads] = True
    return Tree(to_device(positions, device), to_device(allowed.unsqueeze(1), device))


def read_rewards(model: Any, ids: torch.Tensor, mask: torch.Tensor, rows: Sequence[int],
                 positions: Sequence[int], tree: Tree | None = None) -> torch.Tensor:
    """The reward at token ``positions[i]`` of row ``rows[i]`` of right-padded ``ids``.

    A decoder read by its score head (``pools_last_token``) runs without the padding mask: its
    attention is causal, so a real token never sees a pad, and a plain causal mask takes the fast
    attention kernel. Tree rows (``reads_tree_rows`` models only) run with ``tree``'s positions and
    mask instead. Any other model runs whole with ``mask``; read it at row ends only.
    """
    device = ids.device
    if not pools_last_token(model):  # callers read such a model at row ends only (read_rows checks)
        return model(input_ids=ids, attention_mask=mask).logits[long_tensor(rows, device), 0]
    base = getattr(model, model.base_model_prefix)
    hidden = base(input_ids=ids, use_cache=False, **tree_inputs(tree)).last_hidden_state
    return score_head(model, hidden[long_tensor(rows, device), long_tensor(positions, device)])


def tree_inputs(tree: Tree | None) -> dict[str, torch.Tensor]:
    """The base model's keyword arguments for tree rows; none for plain rows."""
    return {} if tree is None else {"position_ids": tree.position_ids,
                                    "attention_mask": tree.allowed}


def score_head(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The score head on final states, in the weights' own precision even under autocast: a
    reward rounded to bf16 (3 significant digits) would tie close rewards and blur rankings and
    the loss, for a matrix-vector product that costs nothing."""
    with torch.autocast(hidden.device.type, enabled=False):
        return model.score(hidden.to(model.score.weight.dtype))[:, 0]
