"""Rewards under fixed weights, of token sequences and of pairs: held-out accuracy, the display
scale, benchmark pairs, and scoring's reuse of what evaluation already forwarded.

A cache (``known``: tokens -> reward) holds every sequence forwarded under the current weights, so
nothing is forwarded twice; the forwards themselves are ``batching.read_rows``, the loop training
shares (``batching.forward_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from stash_pipeline.worker.batching import read_rows, rows_for
from stash_pipeline.worker.progress import PhaseProgress
from stash_pipeline.worker.train import EncodedPair


def sequence_rewards(model: Any, sequences: Iterable[Sequence[int]], pad_id: int,
                     known: dict[tuple[int, ...], float] | None = None,
                     on_batch: Callable[[Sequence[Any], int], None] | None = None,
                     ) -> dict[tuple[int, ...], float]:
    """The reward of every distinct token sequence, read at its last token, under the model's
    current weights, added to ``known`` (returned). A sequence in ``known`` is not forwarded again,
    nor is a repeated one; for a decoder read by its score head, a sequence that begins a longer
    one is read inside it, and sequences that share a prompt run as one tree row
    (``batching.rows_for``).
    ``on_batch`` as ``read_rows``'s (progress reports)."""
    known = {} if known is None else known
    rows = rows_for(model, {tuple(s) for s in sequences} - known.keys())
    known.update(read_rows(model, rows, pad_id=pad_id, on_batch=on_batch))
    return known


def forward_tokens(model: Any, pairs: Sequence[EncodedPair]) -> int:
    """The tokens reading these pairs' distinct sides forwards (``rows_for``): a progress
    estimate that matches what ``on_batch`` counts, whatever rows the model can share."""
    sides = {tuple(s) for p in pairs for s in (p.chosen_ids, p.rejected_ids)}
    return sum(len(row.ids) for row in rows_for(model, sides)) if sides else 0


def pair_rewards_from(model: Any, pairs: Sequence[EncodedPair], pad_id: int,
                      known: dict[tuple[int, ...], float] | None = None,
                      progress: PhaseProgress | None = None) -> list[tuple[float, float]]:
    """(r(chosen), r(rejected)) per pair through ``sequence_rewards``: each distinct side once,
    none of those in ``known`` (which gains the rest).
    ``progress`` counts the pairs whose sides are all read, as forwards finish."""
    known = {} if known is None else known
    on_batch = None
    if progress is not None:
        waiting = {}
        for pair in pairs:
            for side in {tuple(pair.chosen_ids), tuple(pair.rejected_ids)} - known.keys():
                waiting.setdefault(side, []).append(pair)
        unread = {id(pair): len({tuple(pair.chosen_ids), tuple(pair.rejected_ids)} - known.keys())
                  for pair in pairs}
        progress.add(pairs=sum(1 for pair in pairs if not unread[id(pair)]))

        def on_batch(keys: Sequence[Any], tokens: int) -> None:
            done = 0
            for key in keys:
                for pair in waiting.pop(key, ()):
                    unread[id(pair)] -= 1
                    done += unread[id(pair)] == 0
            progress.add(tokens, pairs=done)

    sequence_rewards(model, (s for p in pairs for s in (p.chosen_ids, p.rejected_ids)), pad_id,
                     known, on_batch)
    return [(known[tuple(p.chosen_ids)], known[tuple(p.rejected_ids)]) for p in pairs]
