"""Scoring with a reward model: raw rewards of texts, whole traces, and every action of a trace.

An action's reward is defined as the reward of its own rendering (its context plus the action, left
truncated to the training window) scored alone. ``score_trace_actions`` gives exactly that number
without one forward per action: the project's template is prefix-stable, so where an action's own
rendering fits the window and its tokens are the first tokens of the whole trace's rendering, the
action is read inside one forward over the trace. Every other action gets its own window.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from stash_pipeline.core.calibration import action_credit, calibrated_score
from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.core.traces import Trace
from stash_pipeline.worker.batching import Row, read_rows
from stash_pipeline.worker.checkpoint import ACTION_REWARD_STATS_FILE, open_checkpoint
from stash_pipeline.worker.modeling import (
    pick_device,
    scoring_precision,
    tokenize,
    tokenize_counted,
)
from stash_pipeline.worker.progress import PhaseProgress
from stash_pipeline.worker.readout import pools_last_token
from stash_pipeline.worker.render import Audience, action_end_offsets, render_trace


def score_texts(model: Any, tokenizer: Any, texts: Sequence[str], *,
                batch_tokens: int | None = None) -> list[float]:
    """Raw rewards of rendered texts, each left-truncated to the training window, in input order."""
    if not texts:
        return []  # the tokenizer rejects an empty batch
    rows = []
    for index, ids in enumerate(tokenize(tokenizer, list(texts))):
        if not ids:
            raise ValueError(f"text {index} has no tokens: there is nothing to score")
        rows.append(Row(tuple(ids), ((len(ids) - 1, index),)))
    rewards = read_rows(model, rows, pad_id=tokenizer.pad_token_id, batch_tokens=batch_tokens)
    return [rewards[i] for i in range(len(rows))]


def plan_action_rows(tokenizer: Any, trace: Trace, audience: Audience, *,
                     one_pass: bool = True, lengths: dict[str, int] | None = None,
                     tokens: TraceTokens | None = None) -> tuple[list[Row], list[Row]]:
    """The forwards that score a trace's actions: (the one-pass row, if any; the window rows).

    Read keys are action ids. An action is read in the one-pass row only when the read is exact:
    its own rendering is at most ``tokenizer.model_max_length`` tokens (so nothing of it is cut),
    and tokenising that rendering alone gives the same tokens as the start of the whole trace's
    tokens (byte-pair merges across the cut could differ). Otherwise it gets a window: its own
    tokens, cut from the left to the training window, read at the end. ``lengths`` gains each
    action's own rendering's length before that cut. ``tokens``: the trace's rendering and its
    one tokenisation, already made (``trace_tokens``, which ``plan_trace_rows`` runs for many
    traces at once).
    """
    lengths = {} if lengths is None else lengths
    max_length = tokenizer.model_max_length
    if tokens is None:
        full, ends = action_end_offsets(tokenizer, trace, audience)
    else:
        full, ends = tokens.text, tokens.ends
    action_ids = list(ends)
    if not action_ids:
        return [], []
    if not one_pass:
        # A model read at row ends only (BERT): each action's own rendering, tokenised as
        # training tokenises a text (its special tokens, left truncation), one window each.
        own, counts = tokenize_counted(tokenizer, [full[: ends[a]] for a in action_ids])
        lengths.update(zip(action_ids, counts))
        return [], [Row(tuple(ids), ((len(ids) - 1, a),)) for a, ids in zip(action_ids, own)]
    if tokens is None:
        full_ids, counts = _tokens_up_to(tokenizer, full, [ends[a] for a in action_ids])
    else:
        full_ids, counts = tokens.ids, tokens.counts
    unsure = [i for i, count in enumerate(counts) if count is None]
    alone = dict(zip(unsure, _token_ids(tokenizer, [full[: ends[action_ids[i]]] for i in unsure])))
    head_reads: list[tuple[int, Hashable]] = []
    windows: list[Row] = []
    for index, (action_id, count) in enumerate(zip(action_ids, counts)):
        # An action's own tokens are the trace's first ``count`` (no copy is made: a long trace
        # has hundreds of actions, and a copy of each one's prefix would hold them all at once),
        # or, where that is not certain, its rendering tokenised alone.
        ids = full_ids if count is not None else alone[index]
        length = count if count is not None else len(ids)
        lengths[action_id] = length
        if not length:
            raise ValueError(f"trace {trace.id}: action {action_id} renders to no tokens")
        if length <= max_length and (count is not None or full_ids[:length] == ids):
            head_reads.append((length - 1, action_id))
        else:
            # The same tokens modeling.tokenize gives this text: left truncation keeps the end.
            window = ids[max(0, length - max_length):length]
            windows.append(Row(tuple(window), ((len(window) - 1, action_id),)))
    heads = []
    if head_reads:
        # Tokens after the last read action change no read: the causal model never looks ahead.
        last = max(position for position, _ in head_reads)
        heads.append(Row(tuple(full_ids[: last + 1]), tuple(head_reads)))
    return heads, windows


def score_trace_actions(model: Any, tokenizer: Any, traces: Sequence[Trace], audience: Audience, *,
                        batch_tokens: int | None = None) -> dict[str, float]:
    """Raw reward of every assistant action and tool call, each from its preceding context only.

    Equal (to float rounding) to scoring each action's own rendering alone; see
    ``plan_action_rows``. All traces' forwards are batched together by length.
    """
    one_pass = pools_last_token(model)
    rows: list[Row] = []
    for trace in traces:
        heads, windows = plan_action_rows(tokenizer, trace, audience, one_pass=one_pass)
        rows.extend(heads)
        rows.extend(windows)
    rewards = read_rows(model, rows, pad_id=tokenizer.pad_token_id, batch_tokens=batch_tokens)
    return {str(key): value for key, value in rewards.items()}


TRACE = "trace"  # read keys of whole-trace rewards: (TRACE, trace id); action reads are action ids


def score_traces_and_actions(model: Any, tokenizer: Any, traces: Sequence[Trace],
                             audience: Audience, *, whole: bool = True, actions: bool = True,
                             known: Mapping[tuple[int, ...], float] | None = None,
                             progress: PhaseProgress | None = None,
                             batch_tokens: int | None = None,
                             lengths: dict[str, int] | None = None,
                             ) -> tuple[dict[str, float], dict[str, float]]:
    """({trace id: whole-trace raw reward}, {action id: raw reward}), with no more forwards than
    needed, all batched together by length (``plan_trace_rows`` says which).

    Every number equals scoring the trace's, or the action's, own rendering alone (see
    ``plan_action_rows``). ``progress`` counts traces and actions as forwards finish.
    ``lengths`` gains each trace's (by id) and action's rendering length before the window cut.
    """
    plan = plan_trace_rows(tokenizer, traces, audience, whole=whole, actions=actions,
                           one_pass=pools_last_token(model), known=known, lengths=lengths)

    def counted(keys: Sequence[Hashable], tokens: int) -> None:
        if progress is not None:
            traces_read = sum(isinstance(k, tuple) for k in keys)
            progress.add(tokens, traces=traces_read, actions=len(keys) - traces_read)

    if progress is not None:
        progress.totals.update(traces=len(traces) if whole else 0, actions=plan.action_count)
        progress.done.update(traces=len(plan.known_whole), actions=0)
        progress.work = max(sum(len(row.ids) for row in plan.rows), 1)
    rewards = read_rows(model, plan.rows, pad_id=tokenizer.pad_token_id,
                        batch_tokens=batch_tokens, on_batch=counted)
    return plan.rewards(rewards)


@dataclass(frozen=True)
class WorkBudget:
    """A scoring job's work budget (``JobSettings.work_seconds``): ``seconds`` from ``started``,
    read on ``clock``."""

    seconds: float
    started: float
    clock: Callable[[], float] = time.monotonic

    def left(self) -> float:
        return self.seconds - (self.clock() - self.started)


# Traces in a budgeted job's first group, before its speed is measured; each later group takes
# about 1/GROUPS_PER_BUDGET of the budget at the speed measured so far, so a group that runs
# slower than its estimate overruns the budget by a fraction of it at most.
FIRST_GROUP = 4
GROUPS_PER_BUDGET = 8


@dataclass(frozen=True)
class BudgetedScores:
    """What ``score_within_budget`` scored: the traces it finished (a prefix of those given, in
    their order) and their rewards (``score_traces_and_actions``'s two maps)."""

    finished: list[Trace]
    whole: dict[str, float]
    actions: dict[str, float]


def score_within_budget(model: Any, tokenizer: Any, traces: Sequence[Trace], audience: Audience,
                        budget: WorkBudget, *, whole: bool = True, actions: bool = True,
                        progress: PhaseProgress | None = None,
                        lengths: dict[str, int] | None = None) -> BudgetedScores:
    """``score_traces_and_actions`` in groups of traces, stopping before a group once the
    budget is spent or the group, at the speed measured so far, would not fit in what is left;
    the first group (FIRST_GROUP traces) always runs, so every job progresses. A trace is
    finished whole: its score and its actions' come from the same group."""
    finished: list[Trace] = []
    rewards: dict[str, float] = {}
    raw: dict[str, float] = {}
    if progress is not None:
        progress.totals.update(traces=len(traces) if whole else 0,
                               actions=sum(len(t.actions()) for t in traces) if actions else 0)
        progress.work = 1  # the time left from the share of traces done (tokens unknown)
    began = budget.clock()
    while len(finished) < len(traces):
        size = FIRST_GROUP
        if finished:
            rate = len(finished) / max(budget.clock() - began, 1e-9)  # traces a second
            size = min(int(rate * budget.left()),
                       max(1, int(rate * budget.seconds / GROUPS_PER_BUDGET)))
            if size < 1:
                break
        group = traces[len(finished):len(finished) + size]
        group_rewards, group_raw = score_traces_and_actions(
            model, tokenizer, group, audience, whole=whole, actions=actions, lengths=lengths)
        rewards.update(group_rewards)
        raw.update(group_raw)
        finished.extend(group)
        if progress is not None:
            progress.add(traces=len(group) if whole else 0,
                         actions=sum(len(t.actions()) for t in group) if actions else 0)
    return BudgetedScores(finished, rewards, raw)


@dataclass(frozen=True)
class TracePlan:
    """The forwards that score some traces and their actions (``plan_trace_rows``): ``rows``
    to run (read keys: ``(TRACE, trace id)`` for a whole trace, action ids for actions), the
    whole-trace rewards already ``known``, and how many action reads the rows hold."""

    rows: list[Row]
    known_whole: dict[str, float]
    action_count: int

    def rewards(self, read: Mapping[Hashable, float]) -> tuple[dict[str, float], dict[str, float]]:
        """({trace id: whole-trace raw reward}, {action id: raw reward}) from the rows' reads."""
        whole = dict(self.known_whole)
        whole.update((key[1], value) for key, value in read.items() if isinstance(key, tuple))
        return whole, {str(k): v for k, v in read.items() if not isinstance(k, tuple)}


def plan_trace_rows(tokenizer: Any, traces: Sequence[Trace], audience: Audience, *,
                    whole: bool = True, actions: bool = True, one_pass: bool = True,
                    known: Mapping[tuple[int, ...], float] | None = None,
                    lengths: dict[str, int] | None = None) -> TracePlan:
    """The rows that score ``traces`` (whole, their actions, or both) with no more forwards
    than needed (``one_pass``: the model is read at inner tokens, ``pools_last_token``):

    - a whole trace whose tokens are in ``known`` (rewards already read under these weights, e.g.
      the training job's evaluation of whole-trace pair sides) is not forwarded again;
    - a whole trace that fits the window is read at its last token inside the one-pass row that
      reads its actions (the causal model never looks ahead: the action reads do not change).

    ``lengths`` gains each trace's (by id) and action's rendering length before the window cut.
    """
    lengths = {} if lengths is None else lengths
    known = known or {}
    known_whole: dict[str, float] = {}
    rows: list[Row] = []
    window = tokenizer.model_max_length
    planned: list[TraceTokens | None] = [None] * len(traces)
    if actions and one_pass and not getattr(tokenizer, "reward_add_special_tokens", False):
        # One rendering and one tokenisation of each trace serve its actions and the whole trace
        # (without special tokens the whole trace's ids are those, cut to the window), and all
        # traces are tokenised in one batch.
        tokenised = trace_tokens(tokenizer, traces, audience)
        planned = list(tokenised)
        whole_lengths = [len(t.ids) for t in tokenised] if whole else []
        whole_ids = [t.ids[-window:] if len(t.ids) > window else t.ids for t in tokenised]
    else:
        texts = [render_trace(tokenizer, t, audience) for t in traces] if whole else []
        whole_ids, whole_lengths = tokenize_counted(tokenizer, texts)
    lengths.update((t.id, n) for t, n in zip(traces, whole_lengths))
    whole_ids = whole_ids or [[] for _ in traces]
    action_count = 0
    for trace, ids, tokens in zip(traces, whole_ids, planned):
        heads, windows = (plan_action_rows(tokenizer, trace, audience, one_pass=one_pass,
                                           lengths=lengths, tokens=tokens)
                          if actions else ([], []))
        action_count += sum(len(row.reads) for row in (*heads, *windows))
        if whole:
            if not ids:
                raise ValueError(f"trace {trace.id} has no tokens: there is nothing to score")
            read = (len(ids) - 1, (TRACE, trace.id))
            if tuple(ids) in known:
                known_whole[trace.id] = known[tuple(ids)]
            elif (heads and len(ids) < tokenizer.model_max_length
                  and tuple(ids[: len(heads[0].ids)]) == heads[0].ids):
                heads = [Row(tuple(ids), (*heads[0].reads, read))]
            else:
                rows.append(Row(tuple(ids), (read,)))
        rows.extend(heads)
        rows.extend(windows)
    return TracePlan(rows, known_whole, action_count)


@dataclass(frozen=True)
class TraceTokens:
    """A trace's whole rendering (``text``), where each action's own rendering ends in it
    (``ends``, by action id), its untruncated token ids without special tokens (``ids``) and,
    per action, how many of them its own rendering's tokens are (``counts``: ``None`` where it
    must be tokenised alone), as ``_tokens_up_to`` gives them."""

    text: str
    ends: dict[str, int]
    ids: list[int]
    counts: list[int | None]


def trace_tokens(tokenizer: Any, traces: Sequence[Trace], audience: Audience
                 ) -> list[TraceTokens]:
    """``TraceTokens`` of each trace: each rendered with its actions' ends
    (``action_end_offsets``), all tokenised in one batch."""
    rendered = [action_end_offsets(tokenizer, trace, audience) for trace in traces]
    tokenised = _tokens_up_to_each(tokenizer, [text for text, _ in rendered],
                                   [list(ends.values()) for _, ends in rendered])
    return [TraceTokens(text, ends, ids, counts)
            for (text, ends), (ids, counts) in zip(rendered, tokenised)]


def _tokens_up_to(tokenizer: Any, text: str, cuts: list[int]) -> tuple[list[int], list[int | None]]:
    """``text``'s token ids and, per character cut, how many of them tokenising ``text[:cut]``
    alone gives (``None`` where that is not certain, so the cut must be tokenised alone).

    A fast tokenizer splits text at (unnormalised) added tokens (``<tool_call>``, ``<|im_end|>``)
    before anything else and tokenises the pieces between them independently. So a cut right
    before an added token (that strips no space on its left) or right after one (that strips none
    on its right) leaves every piece before the cut whole: ``text[:cut]`` gives exactly the tokens
    of ``text`` up to the cut. Every action of the project's template ends at such a cut, so one
    tokenisation of the trace replaces one per action.
    """
    return _tokens_up_to_each(tokenizer, [text], [cuts])[0]


def _tokens_up_to_each(tokenizer: Any, texts: list[str], cuts: list[list[int]]
                       ) -> list[tuple[list[int], list[int | None]]]:
    """``_tokens_up_to`` of each text with its own cuts, the texts tokenised in one batch."""
    if not texts:
        return []  # the tokenizer rejects an empty batch
    if not getattr(tokenizer, "is_fast", False):
        return [(ids, [None] * len(c)) for ids, c in zip(_token_ids(tokenizer, texts), cuts)]
    encoded = tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False,
                        return_offsets_mapping=True)
    added = tokenizer.added_tokens_decoder
    cut_before = {t for t, a in added.items() if not a.normalized and not a.lstrip}
    cut_after = {t for t, a in added.items() if not a.normalized and not a.rstrip}
    out = []
    for text, text_cuts, text_ids, offsets in zip(texts, cuts, encoded["input_ids"],
                                                  encoded["offset_mapping"]):
        ids = list(text_ids)
        tokens_at: dict[int, int] = {len(text): len(ids)}
        for index, (token, (start, end)) in enumerate(zip(ids, offsets)):
            if token in cut_before:
                tokens_at.setdefault(start, index)
            if token in cut_after:
                tokens_at.setdefault(end, index + 1)
        out.append((ids, [tokens_at.get(cut) for cut in text_cuts]))
    return out


def _token_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Untruncated token ids, tokenised exactly as ``modeling.tokenize`` does before it
    truncates."""
    if not texts:
        return []  # the tokenizer rejects an empty batch
    # verbose=False: the "longer than the maximum" warning is wrong here, we truncate ourselves.
    encoded = tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)
    return [list(ids) for ids in encoded["input_ids"]]


class RewardModel:
    """A downloaded checkpoint, loaded for scoring exactly as it was trained.

    ``path`` is the ``reward-model/`` directory or the ``reward-model.tar.gz`` archive. The
    tokenizer keeps the checkpoint's left truncation to 1024 tokens and its saved
    ``chat_template.jinja``; ``credit`` and ``calibrated`` use the checkpoint's own reward
    statistics (scores are comparable only within one model).
    """

    def __init__(self, path: str | os.PathLike[str], *, audience: Audience | None = None,
                 device: str | None = None, dtype: torch.dtype = torch.float32,
                 score_dtype: str = "auto", batch_tokens: int | None = None):
        """``audience`` overrides the one training recorded in reward_stats.json (default
        "personal" when none is recorded); ``device`` defaults to cuda, mps or cpu; ``dtype`` is
        the weights' (fp32 holds a bf16 checkpoint exactly); ``score_dtype`` as in the job
        settings: "auto" scores under bf16 autocast on an accelerator, "float32" never."""
        self.device = device or pick_device()
        with open_checkpoint(path) as saved:
            self.model, self.tokenizer = saved.load_model(device=self.device, dtype=dtype)
        self.reward_stats = saved.reward_stats
        self.action_reward_stats = saved.action_reward_stats
        self.audience: Audience = audience or saved.audience
        self.score_dtype = score_dtype
        self.batch_tokens = batch_tokens

    def score(self, rendered: Sequence[str]) -> list[float]:
        """Raw rewards of rendered texts (render them with ``render``)."""
        with scoring_precision(self.score_dtype, self.device):
            return score_texts(self.model, self.tokenizer, rendered, batch_tokens=self.batch_tokens)

    def render(self, trace: Trace, audience: Audience | None = None) -> str:
        return render_trace(self.tokenizer, trace, audience or self.audience)

    def score_traces(self, traces: Sequence[Trace]) -> list[float]:
        """Whole-trace raw rewards, in input order."""
        return self.score([self.render(trace) for trace in traces])

    def score_actions(self, traces: Sequence[Trace]) -> dict[str, float]:
        """Raw reward of every action of these traces, by action id, each from its context only."""
        with scoring_precision(self.score_dtype, self.device):
            return score_trace_actions(self.model, self.tokenizer, traces, self.audience,
                                       batch_tokens=self.batch_tokens)

    def credit(self, raw: float) -> float:
        """Action credit in -1..+1 against the checkpoint's action training statistics."""
        if self.action_reward_stats is None:
            raise NotFoundError(
                f"this checkpoint has no {ACTION_REWARD_STATS_FILE}: it was not trained on action "
                "comparisons, so it gives no action credit; train a new model with action "
                "comparisons"
            )
        return action_credit(raw, self.action_reward_stats)

    def calibrated(self, raw: float) -> float:
        """The (0, 1) score with 0.5 at the calibration mean of ``reward_stats.json``."""
        return calibrated_score(raw, self.reward_stats)
