"""Rewards read at chosen tokens of right-padded rows: the one place a reward model runs forward.

A reward model for sequence classification pools its score head at a row's last real token. For a
causal decoder the state at any token depends on the tokens up to it only, so the same head at an
inner token gives the reward of that prefix (``pools_last_token``): one forward over a trace reads
every action that ends inside it. Other models (BERT pools its first token) are read at row ends.

Since a reward is the score head on one token's final state, the last decoder layer matters only
at read tokens: the other tokens feed it keys and values, nothing more. For the decoders below,
``read_rewards`` runs the model up to its last layer as usual, takes that layer's keys and values
for every token, and runs the rest of the layer (attention, MLP) for the read tokens only, each
attending to the tokens up to itself. The result equals the model's own forward to float rounding;
the saving is that layer's work at every other token: about a quarter of the arithmetic on a
4-layer model, 1/28 on Qwen3-0.6B. Other models run whole.

A row may also be a tree (``batching.pack_rows``): a shared prompt once, then several
continuations of it. ``tree_attention`` gives such rows their position ids (each continuation's
restart where the prompt ends) and a 4D boolean mask (each token attends to its own sequence's
earlier tokens only, never to another continuation). Transformers' ``create_causal_mask`` passes a
4D mask through unchanged (and so never reads the restarted positions as packed sequences), SDPA
takes a boolean mask as "may attend", and the last-layer read takes the same mask rows and
position embeddings at its read tokens: each continuation gets exactly the states it has alone.
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

# Decoders whose last layer is checked (tests/worker) to give the model's own states this way:
# pre-norm layers whose attention stores keys and values through ``cache.update``.
READ_ONLY_LAST_LAYER = frozenset({"llama", "qwen2", "qwen3"})
# Off: every model runs whole. Benchmarks switch it to measure what the read gains (issue 11 keeps
# it only if it gains at least 5% on Qwen3-0.6B's shape on a GPU; see docs/worker.md).
LAST_LAYER_AT_READS_ONLY = True
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


class _KeysAndValues(Exception):
    """Raised by ``_CaptureCache`` to stop the last layer once its keys and values exist."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__("keys and values captured")
        self.keys, self.values = keys, values


class _CaptureCache:
    """Takes the last layer's keys and values for all tokens and stops the layer there."""

    def update(self, keys: torch.Tensor, values: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        raise _KeysAndValues(keys, values)


class _FixedCache:
    """Hands the layer every token's keys and values while it computes the read tokens only."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values

    def update(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys, self.values


class _LastLayerInputs(Exception):
    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]):
        super().__init__("last decoder layer reached")
        self.args, self.kwargs = args, kwargs


def reads_last_layer_partly(model: Any) -> bool:
    """Whether ``read_rewards`` may skip the last layer's work at unread tokens for this model."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (LAST_LAYER_AT_READS_ONLY and config.model_type in READ_ONLY_LAST_LAYER
            and config._attn_implementation == "sdpa"
            and layer_types[-1] == "full_attention")


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
    return tensor.to(device)


def long_tensor(values: Sequence[Any], device: torch.device | str) -> torch.Tensor:
    return to_device(torch.tensor(values, dtype=torch.long), device)


def right_padded(sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, padded on the right: real tokens keep positions 0..n-1,
    exactly the positions they have when run alone."""
    width = max(len(sequence) for sequence in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = 1
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
    if reads_last_layer_partly(model):
        return score_head(model, _last_layer_at_reads(base, ids, list(rows), list(positions), tree))
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


def _last_layer_at_reads(base: Any, ids: torch.Tensor, rows: list[int], positions: list[int],
                         tree: Tree | None = None) -> torch.Tensor:
    """Final (normed) hidden states at the reads, the last layer run at the read tokens only."""
    device = ids.device
    hidden, kwargs = _last_layer_inputs(base, ids, tree_inputs(tree))
    layer = base.layers[-1]
    try:
        layer(hidden, **{**kwargs, "cache": _CaptureCache()})
    except _KeysAndValues as captured:
        keys, values = captured.keys, captured.values
    else:
        raise RuntimeError(f"{type(layer).__name__} did not store keys and values through its "
                           "cache")

    # Each row's distinct reads, padded to the most a row has (a pad slot reads token 0, unused).
    per_row = [sorted({p for r, p in zip(rows, positions) if r == b}) for b in range(ids.shape[0])]
    width = max(len(reads) for reads in per_row)
    slots = long_tensor([reads + [0] * (width - len(reads)) for reads in per_row], device)
    cos, sin = kwargs["position_embeddings"]
    at_slots = slots.unsqueeze(-1)
    read_embeddings = tuple(t.expand(ids.shape[0], -1, -1)
                            .gather(1, at_slots.expand(-1, -1, t.shape[-1]))
                            for t in (cos, sin))
    if tree is None:
        # A read attends to the keys of its own row up to and including its own token.
        allowed = torch.arange(ids.shape[1], device=device) <= at_slots
        slot_positions = slots
    else:  # the tree mask's rows and the positions of the read tokens
        allowed = tree.allowed[:, 0].gather(1, at_slots.expand(-1, -1, ids.shape[1]))
        slot_positions = tree.position_ids.gather(1, slots)
    out = layer(
        hidden.gather(1, at_slots.expand(-1, -1, hidden.shape[-1])),
        **{**kwargs, "attention_mask": allowed.unsqueeze(1), "position_ids": slot_positions,
           "position_embeddings": read_embeddings, "cache": _FixedCache(keys, values)},
    )
    slot_of = long_tensor([per_row[r].index(p) for r, p in zip(rows, positions)], device)
    return base.norm(out[long_tensor(rows, device), slot_of])


def _last_layer_inputs(base: Any, ids: torch.Tensor, inputs: dict[str, torch.Tensor]
                       ) -> tuple[torch.Tensor, dict[str, Any]]:
    """Run ``base`` up to its last decoder layer: that layer's input states and other arguments."""
    def stop(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise _LastLayerInputs(args, dict(kwargs))

    handle = base.layers[-1].register_forward_pre_hook(stop, with_kwargs=True)
    try:
        base(input_ids=ids, use_cache=False, **inputs)
    except _LastLayerInputs as reached:
        args, kwargs = reached.args, reached.kwargs
    else:
        raise RuntimeError(f"{type(base).__name__} never called its last decoder layer")
    finally:
        handle.remove()
    if len(args) > 1:
        raise RuntimeError(f"{type(base).__name__} passes its layers unexpected positional "
                           "arguments")
    return (args[0] if args else kwargs.pop("hidden_states")), kwargs
