"""Reading a job directory's inputs (docs/worker.md): its settings, pairs and traces to score.

Every record is checked as it is read; bad input fails with an ``InputError`` naming the file, the
record and the field.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stash_pipeline.compute import contract
from stash_pipeline.core.errors import InputError
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.serialize import trace_from_dict
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.validation import validate_trace
from stash_pipeline.worker.modeling import tokenize_counted
from stash_pipeline.worker.progress import logger
from stash_pipeline.worker.render import Audience, render_side
from stash_pipeline.worker.train import EncodedPair

if TYPE_CHECKING:
    from datasets import Dataset


def record_window(job_dir: Path, settings: contract.JobSettings, tokenizer: Any) -> int:
    """The window the tokenizer keeps, recorded in settings.json; a warning naming the base model
    when its positions end before the window asked for (BERT: 512 of 1024)."""
    window = int(tokenizer.model_max_length)
    if window < settings.max_length:
        logger.warning(f"base model {settings.base_model} has {window} positions: inputs keep "
                       f"their last {window} tokens, not {settings.max_length}")
    if window != settings.max_length:
        contract.write_settings(job_dir, replace(settings, max_length=window))
    return window


def json_lines(path: Path) -> list[str]:
    """The non-blank lines of a JSON Lines input (none when the caller wrote no file)."""
    if not path.is_file():
        return []
    return [line for line in path.read_text().splitlines() if line.strip()]


def input_rows(job_dir: Path, name: str, column: str) -> list[str]:
    """The rows of input ``name`` as strings: its JSON Lines as the caller wrote them, or the
    column of a saved dataset. A scoring job reads its traces once, in order: the datasets
    library (0.75 CPU-s to import) and a copy on disk would buy it nothing."""
    if (job_dir / name).is_dir():
        return list(input_dataset(job_dir, name, column)[column])
    return json_lines(job_dir / f"{name}.jsonl")


def input_dataset(job_dir: Path, name: str, column: str) -> Dataset:
    """The saved dataset ``name``, made from ``name.jsonl`` first when the caller wrote JSON Lines.

    The dataset is written beside its final name and renamed into place, so a worker killed while
    writing it leaves no half-written dataset for the next attempt.
    """
    from datasets import Dataset, Features, Value, load_from_disk

    directory, lines = job_dir / name, job_dir / f"{name}.jsonl"
    if not directory.is_dir():
        rows = json_lines(lines)
        # Rows stay JSON strings: Arrow would unify tool-schema structs and add null keys
        # (ML notes).
        dataset = Dataset.from_dict({column: rows}, features=Features({column: Value("string")}))
        if not rows:
            return dataset  # datasets cannot load back a saved dataset of no rows (no shards)
        with contract.atomic_path(directory) as partial:
            dataset.save_to_disk(str(partial))
    try:
        dataset = load_from_disk(str(directory))
    except (OSError, ValueError) as error:
        raise InputError(f"not a saved dataset: {error}", file=name) from error
    if column not in dataset.column_names:
        raise InputError(f"expected a string column {column!r}", file=name, field=column)
    return dataset


def parse_pair(text: str, name: str, index: int) -> Pair:
    try:
        pair = Pair.from_dict(json.loads(text))
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error}", file=name, record=str(index),
                         field="pair") from error
    except KeyError as error:
        raise InputError("missing", file=name, record=str(index),
                         field=str(error.args[0])) from error
    for side in ("chosen", "rejected"):
        try:
            validate_trace(getattr(pair, side).trace)
        except InputError as error:
            raise InputError(error.reason, file=name, record=str(index),
                             field=f"{side}.{error.field}" if error.field else side) from error
    return pair


def encoded_pairs(job_dir: Path, name: str, tokenizer: Any, audience: Audience,
                  cut: list[int] | None = None) -> tuple[list[Pair], list[EncodedPair]]:
    """The pairs of one input, rendered and tokenised by ``Dataset.map`` (the same left truncation
    as scoring). ``cut`` gains the index of each pair with a side longer than the window."""
    def encode(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        pairs = [parse_pair(text, name, i) for text, i in zip(batch[contract.PAIR_COLUMN], indices)]
        chosen, chosen_lengths = tokenize_counted(
            tokenizer, [render_side(tokenizer, p.chosen, audience) for p in pairs])
        rejected, rejected_lengths = tokenize_counted(
            tokenizer, [render_side(tokenizer, p.rejected, audience) for p in pairs])
        window = tokenizer.model_max_length
        return {"chosen_ids": chosen, "rejected_ids": rejected,
                "cut": [max(a, b) > window for a, b in zip(chosen_lengths, rejected_lengths)]}

    dataset = input_dataset(job_dir, name, contract.PAIR_COLUMN)
    if len(dataset) == 0:
        return [], []
    dataset = dataset.map(encode, batched=True, with_indices=True, load_from_cache_file=False,
                          keep_in_memory=True, desc=f"tokenising {name}")
    if cut is not None:
        cut.extend(i for i, was_cut in enumerate(dataset["cut"]) if was_cut)
    pairs = [Pair.from_dict(json.loads(text)) for text in dataset[contract.PAIR_COLUMN]]
    return pairs, [EncodedPair(c, r)
                   for c, r in zip(dataset["chosen_ids"], dataset["rejected_ids"])]


def traces_to_score(job_dir: Path) -> list[Trace]:
    traces = []
    rows = input_rows(job_dir, contract.SCORE_TRACES, contract.TRACE_COLUMN)
    for index, text in enumerate(rows):
        try:
            trace = trace_from_dict(json.loads(text))
            validate_trace(trace)
        except (json.JSONDecodeError, KeyError) as error:
            raise InputError(f"not a trace: {error!r}", file=contract.SCORE_TRACES,
                             record=str(index), field=contract.TRACE_COLUMN) from error
        except InputError as error:
            raise error.located(file=contract.SCORE_TRACES, record=str(index)) from error
        traces.append(trace)
    return traces
