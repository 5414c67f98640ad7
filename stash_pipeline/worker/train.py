"""Bradley-Terry training of a one-output reward model (the seed's "The model" and settings).

Speed on a GPU comes from fewer and larger kernels (the step was launch-bound, docs/worker.md):
- a Llama-family decoder (``decoder.runs_fast``) runs its layers as plain tensor functions over a
  compute copy of the weights in bf16, refreshed from the fp32 master weights with one cast a
  step (``decoder.TrainingCopy``): autocast's arithmetic without a cast per use, fused q/k/v and
  gate/up products, each layer one autograd function with its backward written out;
- a step's pairs run forward and backward together up to ``backward_tokens`` (on an accelerator
  two pairs of full windows, a whole batch of shorter pairs), their rows in forwards of the
  device's token budget (``batching.forward_rows``);
- each distinct side of a batch is computed once (``batching.pack_rows``): identical sides run
  once; a side whose tokens begin another side's is read inside that longer sequence, and sides
  that share a prompt and then diverge run as one tree row, the prompt once;
- the rewards of a group are gathered with one index and the loss is one expression (through the
  fast decoder one autograd function, ``_BradleyTerry``); AdamW and clipping step the copy's
  master buffer as one tensor.
Batches themselves are drawn at random with seed 0, as TRL draws them (see ``shuffled_batches``).

What the model learns is unchanged: fp32 master weights and AdamW states (bf16 weights would not
learn at 1e-5: updates underflow), matrix products in bf16 as under autocast, the same losses and
gradients as the model's own forward (tested).

Memory: a step holds the activations of at most ``backward_tokens`` tokens at a time. The
Bradley-Terry loss is a sum over pairs, so pairs beyond the budget run forward and backward in
groups (``backward_groups``) whose gradients add up: exactly the gradient of the whole batch.

Host syncs: on an accelerator the losses stay on the device and are read every ``SYNC_EVERY``
steps (progress lines then catch up), and index tensors reach the device through pinned memory;
a step never waits for the device.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from stash_pipeline.core.training_settings import BATCH_SIZE, LEARNING_RATE, MAX_LENGTH, SEED
from stash_pipeline.worker.batching import forward_rows, pack_rows, rows_for
from stash_pipeline.worker.decoder import DecoderWeights, TrainingCopy, training_copy
from stash_pipeline.worker.modeling import autocast, supports_bf16
from stash_pipeline.worker.progress import LogProgress, Progress
from stash_pipeline.worker.readout import long_tensor, pools_last_token, reads_tree_rows

# As Hugging Face's Trainer (and so TRL's RewardTrainer) does by default.
MAX_GRAD_NORM = 1.0
WEIGHT_DECAY = 0.0
FUSED_ADAMW_DEVICES = ("cpu", "cuda")
# Tokens whose activations one forward-and-backward holds. On an accelerator: two pairs of full
# windows (a whole batch of shorter or prompt-sharing pairs), which at Qwen3-0.6B's shape keeps a
# step within 18 GiB (docs/worker.md, "Memory"; the whole batch of 8 full windows would need
# about 27). On CPU one pair of two full windows: there a forward holds one window anyway
# (batching.CPU_BATCH_TOKENS), and the arithmetic is the bottleneck.
ACCELERATOR_BACKWARD_TOKENS = 2 * 2 * MAX_LENGTH
CPU_BACKWARD_TOKENS = 2 * MAX_LENGTH
BY_DEVICE = "by device"


def default_backward_tokens(device: torch.device | str) -> int:
    return (CPU_BACKWARD_TOKENS if torch.device(device).type == "cpu"
            else ACCELERATOR_BACKWARD_TOKENS)
# On an accelerator, losses are read back (a host sync) once per this many steps.
SYNC_EVERY = 10


@dataclass(frozen=True)
class EncodedPair:
    """A pair's two sides as token ids, already rendered and left-truncated."""

    chosen_ids: list[int]
    rejected_ids: list[int]

    @property
    def cost(self) -> int:
        """Tokens a forward reads for this pair: one sequence when one side extends the other, the
        shared prompt once when the sides diverge after it (``pack_rows``, as a decoder runs it)."""
        return packed_tokens([self.chosen_ids, self.rejected_ids], share_prefixes=True)


@dataclass
class TrainResult:
    step_losses: list[float] = field(default_factory=list)
    epoch_losses: list[list[float]] = field(default_factory=list)
    device: str = "cpu"
    seconds: float = 0.0
    pairs_seen: int = 0

    @property
    def final_loss(self) -> float | None:
        """Mean Bradley-Terry loss over the last epoch's batches (the seed's final_loss)."""
        last = self.epoch_losses[-1] if self.epoch_losses else []
        return sum(last) / len(last) if last else None

    @property
    def epochs(self) -> int:
        return len(self.epoch_losses)

    @property
    def pairs_per_second(self) -> float:
        return self.pairs_seen / self.seconds if self.seconds > 0 else 0.0


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """``-log sigmoid(r(chosen) - r(rejected))``, averaged over the batch: the only loss."""
    return -F.logsigmoid(chosen - rejected).mean()


def shuffled_batches(count: int, rng: random.Random,
                     batch_size: int = BATCH_SIZE) -> list[list[int]]:
    """Pair indices in batches of ``batch_size``, in a seeded random order, as TRL's trainer draws
    them.

    Batches stay random on purpose. Grouping pairs that share a side (one trace's step ratings)
    would let a batch compute fewer sides, but correlated batches learn less per step: on 200
    AgentProcessBench pairs, held-out loss after one epoch was 0.52 grouped and 0.50 in pairs of
    two, against 0.48 random. Length grouping is unnecessary too: on CPU a forward holds one window.
    """
    order = list(range(count))
    rng.shuffle(order)
    return [order[i:i + batch_size] for i in range(0, count, batch_size)]


def packed_tokens(sides: list[list[int]], *, share_prefixes: bool, branches: bool = True) -> int:
    """Tokens the rows of ``pack_rows`` hold for these sides: what their forward computes."""
    rows = pack_rows(sides, share_prefixes=share_prefixes, branches=share_prefixes and branches)
    return sum(len(row.ids) for row in rows)


def pair_rewards(model: Any, pairs: list[EncodedPair], device: str, *, pad_id: int,
                 share_prefixes: bool = True, batch_tokens: int | None = None,
                 weights: DecoderWeights | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """r(chosen) and r(rejected) for each pair, computing each distinct side once (``rows_for``).

    The rows run in forwards of at most ``batch_tokens`` padded tokens, grouped by length as
    the scorer does (``batching.forward_rows``; default by device: on CPU one full window a
    forward is fastest).

    Scores are the classification head on the base model's hidden state at each side's last token,
    which is what the sequence-classification forward computes (it pools at the last non-pad token).
    ``weights``: the compute copy of a ``decoder.runs_fast`` model (``TrainingCopy.weights``).
    All sides' rewards are gathered with one index into the forwards' reads.
    """
    reads, index = side_reads(model, pairs, device, pad_id=pad_id, share_prefixes=share_prefixes,
                              batch_tokens=batch_tokens, weights=weights)
    rewards = reads[index].float()
    return rewards[: len(pairs)], rewards[len(pairs):]


def side_reads(model: Any, pairs: list[EncodedPair], device: str, *, pad_id: int,
               share_prefixes: bool, batch_tokens: int | None, weights: DecoderWeights | None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every forward's reads in one tensor, and the index of each pair's chosen sides, then each
    pair's rejected sides, into it (each distinct side computed once)."""
    sides = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    rows = rows_for(model, sides, share_prefixes=share_prefixes)
    read_at: dict[Hashable, int] = {}  # a side's index among all forwards' reads
    values = []
    for keys, read, _ in forward_rows(model, rows, pad_id=pad_id, device=device,
                                      batch_tokens=batch_tokens, weights=weights):
        offset = sum(len(v) for v in values)
        read_at.update((key, offset + i) for i, key in enumerate(keys))
        values.append(read)
    reads = values[0] if len(values) == 1 else torch.cat(values)
    return reads, long_tensor([read_at[tuple(side)] for side in sides], reads.device)


def pair_loss(model: Any, pairs: list[EncodedPair], device: str, *, pad_id: int,
              share_prefixes: bool, batch_tokens: int | None, weights: DecoderWeights,
              weight: float) -> torch.Tensor:
    """``bradley_terry_loss`` of ``pair_rewards`` times ``weight``, the rewards gathered and the
    loss taken in one operation each way (``_BradleyTerry``)."""
    reads, index = side_reads(model, pairs, device, pad_id=pad_id, share_prefixes=share_prefixes,
                              batch_tokens=batch_tokens, weights=weights)
    return _BradleyTerry.apply(reads, index, weight / len(pairs))


class _BradleyTerry(torch.autograd.Function):
    """``-log sigmoid(r(chosen) - r(rejected))`` summed over pairs times ``weight`` (a mean's
    ``1 / pairs`` included), from all sides' rewards and their index (chosen sides first)."""

    @staticmethod
    def forward(ctx: Any, reads: torch.Tensor, index: torch.Tensor, weight: float
                ) -> torch.Tensor:
        chosen, rejected = reads.float().index_select(0, index).view(2, -1)
        gap = chosen - rejected
        ctx.save_for_backward(index, gap)
        ctx.weight, ctx.count = weight, reads.shape[0]
        return F.logsigmoid(gap).sum() * -weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        index, gap = ctx.saved_tensors
        # d/dgap of -log sigmoid(gap) is -sigmoid(-gap)
        grad_gap = torch.sigmoid(-gap) * (grad * -ctx.weight)
        grad_reads = torch.zeros(ctx.count, dtype=gap.dtype, device=gap.device)
        grad_reads.index_add_(0, index, torch.cat([grad_gap, -grad_gap]))
        return grad_reads, None, None


def backward_groups(pairs: list[EncodedPair], budget: int | None, *, share_prefixes: bool,
                    branches: bool = True) -> list[list[int]]:
    """The batch's pairs in groups that each run forward and backward alone (indices into
    ``pairs``).

    A group's rows (``packed_tokens``: a shared prompt counted once) hold at most ``budget``
    tokens, or one pair when that pair alone holds more. Pairs join the first group they fit,
    trying first a group they share a side with, so a shared side is computed once where the
    budget allows. ``None``: one group, the whole batch.
    """
    if budget is None:
        return [list(range(len(pairs)))]

    def cost(indices: list[int]) -> int:
        sides = [pairs[i].chosen_ids for i in indices] + [pairs[i].rejected_ids for i in indices]
        return packed_tokens(sides, share_prefixes=share_prefixes, branches=branches)

    groups: list[list[int]] = []
    for index in range(len(pairs)):
        sides = {tuple(pairs[index].chosen_ids), tuple(pairs[index].rejected_ids)}
        sharing = [g for g in groups
                   if sides & {tuple(s) for i in g
                               for s in (pairs[i].chosen_ids, pairs[i].rejected_ids)}]
        others = [g for g in groups if g not in sharing]
        home = next((g for g in sharing + others if cost(g + [index]) <= budget), None)
        if home is None:
            groups.append([index])
        else:
            home.append(index)
    return groups


def disable_dropout(model: Any) -> None:
    """Dropout off in every module, as TRL's RewardTrainer does by default (``disable_dropout``):
    the reward of a text must not depend on a random mask while the model learns from it. Covers
    ``nn.Dropout`` modules (BERT's hidden and attention dropout) and the float
    ``attention_dropout`` that decoder attention passes to its kernel (Llama, Qwen)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def make_optimizer(model: Any, device: str, copy: TrainingCopy | None = None
                   ) -> torch.optim.Optimizer:
    """AdamW at the seed's 1e-5, with the fused kernel, as Hugging Face's Trainer (and so TRL)
    uses by default where it exists. With a ``decoder.TrainingCopy``: over its flat master
    buffer and the model's other parameters (``TrainingCopy.parameters``; AdamW is elementwise,
    so the update is the same)."""
    parameters = copy.parameters() if copy is not None else model.parameters()
    return torch.optim.AdamW(parameters, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                             fused=torch.device(device).type in FUSED_ADAMW_DEVICES or None)


def train_step(model: Any, optimizer: torch.optim.Optimizer, batch: list[EncodedPair], *,
               device: str, pad_id: int, use_autocast: bool = True, share_prefixes: bool = True,
               backward_tokens: int | None | str = BY_DEVICE,
               batch_tokens: int | None = None, copy: TrainingCopy | None = None
               ) -> torch.Tensor:
    """One optimizer step on one batch; its mean Bradley-Terry loss, still on the device.

    ``copy``: a ``decoder.TrainingCopy`` of the model (``train`` makes one for the models
    ``decoder.runs_fast`` accepts), whose compute precision replaces autocast; None: the model's
    own modules under autocast.
    """
    share_prefixes = share_prefixes and pools_last_token(model)
    if backward_tokens == BY_DEVICE:
        backward_tokens = default_backward_tokens(device)
    if copy is None:
        optimizer.zero_grad(set_to_none=True)
    else:
        copy.start_step()
    loss = torch.zeros((), device=device)
    for group in backward_groups(batch, backward_tokens, share_prefixes=share_prefixes,
                                 branches=reads_tree_rows(model)):
        # The batch's mean loss is the sum of its groups' parts: each group's gradient adds up in
        # .grad, which is exactly the batch's gradient.
        if copy is not None:
            part = pair_loss(model, [batch[i] for i in group], device, pad_id=pad_id,
                             share_prefixes=share_prefixes, batch_tokens=batch_tokens,
                             weights=copy.weights, weight=len(group) / len(batch))
        else:
            with autocast(device, use_autocast):
                chosen, rejected = pair_rewards(model, [batch[i] for i in group], device,
                                                pad_id=pad_id, share_prefixes=share_prefixes,
                                                batch_tokens=batch_tokens)
            part = bradley_terry_loss(chosen, rejected) * (len(group) / len(batch))
        part.backward()
        loss = loss + part.detach()
    # The norm over every gradient; a copy's master gradients measured as one tensor.
    torch.nn.utils.clip_grad_norm_(copy.parameters() if copy is not None else model.parameters(),
                                   MAX_GRAD_NORM)
    optimizer.step()
    return loss


def compute_dtype(model: Any, device: str, use_autocast: bool) -> torch.dtype:
    """The precision of the matrix products: bf16 where autocast would use it, else the weights'
    own."""
    if use_autocast and supports_bf16(torch.device(device).type):
        return torch.bfloat16
    return next(model.parameters()).dtype


def train(model: Any, pairs: list[EncodedPair], *, epochs: int, device: str, pad_id: int,
          seed: int = SEED, progress: Progress | None = None, use_autocast: bool = True,
          share_prefixes: bool = True, backward_tokens: int | None | str = BY_DEVICE,
          batch_tokens: int | None = None) -> TrainResult:
    """Train ``model`` in place: AdamW at 1e-5, 4 pairs a batch, ``epochs`` passes, seed 0,
    dropout off (``disable_dropout``).

    Any sequence-classification model trains; one whose head is not a linear map of the last
    token's state (BERT) is read through its own forward at each sequence's end.
    ``backward_tokens``: tokens one forward-and-backward holds (``backward_groups``; default by
    device), None for the whole batch at once; the gradient is the same. ``batch_tokens``: padded
    tokens a forward holds.
    """
    # The seed's minimum of two usable pairs counts held-out pairs too (core.split checks it), so
    # a split of two pairs trains on one.
    if not pairs:
        raise ValueError("training needs at least one pair")
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    progress = progress or LogProgress()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model.to(device)
    model.train()
    disable_dropout(model)
    result = TrainResult(device=device)
    total_steps = epochs * math.ceil(len(pairs) / BATCH_SIZE)
    sync_every = 1 if torch.device(device).type == "cpu" else SYNC_EVERY
    started = time.perf_counter()
    step = 0
    unread: list[tuple[int, int, torch.Tensor]] = []  # (step, pairs seen, loss on the device)

    def report() -> None:
        values = torch.stack([loss for _, _, loss in unread]).tolist() if unread else []
        elapsed = max(time.perf_counter() - started, 1e-9)
        for (at, seen, _), value in zip(unread, values):
            result.step_losses.append(value)
            progress.step(at, total_steps, value, seen / elapsed)
        unread.clear()

    with training_copy(model, compute_dtype(model, device, use_autocast)) as copy:
        optimizer = make_optimizer(model, device, copy)
        for _ in range(epochs):
            first_step = len(result.step_losses)  # report() read every step of the epoch before
            for batch in shuffled_batches(len(pairs), rng):
                loss = train_step(model, optimizer, [pairs[i] for i in batch], device=device,
                                  pad_id=pad_id, use_autocast=use_autocast,
                                  share_prefixes=share_prefixes, backward_tokens=backward_tokens,
                                  batch_tokens=batch_tokens, copy=copy)
                step += 1
                result.pairs_seen += len(batch)
                unread.append((step, result.pairs_seen, loss))
                if step % sync_every == 0:
                    report()
            report()
            result.epoch_losses.append(result.step_losses[first_step:])
    result.seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)  # the gradients would hold another copy of the weights
    model.eval()
    return result
