"""Builders on real data, with expected counts computed independently from the raw files."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter, defaultdict
from itertools import product
from pathlib import Path

import pytest

from stash_pipeline.core.pair_builders import build_feedback_pairs
from stash_pipeline.core.pairs import Pair, PairSide
from stash_pipeline.core.split import split_pairs
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.importers import read_path

# The shared data lives beside the repository: <folder>/shared/data next to <folder>/<clone>.
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
HOTPOTQA = DATA / "agentprocessbench" / "hotpotqa.jsonl"
TAU2_RUNS = DATA / "tau2-bench" / "runs"
HH_RLHF = DATA / "hh-rlhf" / "harmless-base-dev.jsonl.gz"


@pytest.fixture(scope="module")
def hotpotqa():
    assert HOTPOTQA.is_file(), f"real data missing: {HOTPOTQA} (see shared/data/README.md)"
    records = list(read_path(HOTPOTQA))
    traces = [r.trace for r in records]
    return traces, [f for r in records for f in r.feedback], build_feedback_pairs(
        traces, [f for r in records for f in r.feedback])


def expected_hotpotqa_counts() -> tuple[int, int, int]:
    """(step pairs, tool-call step pairs, trace pairs) straight from the raw JSON labels."""
    step = tool = 0
    final_by_task: dict[str, list[float]] = defaultdict(list)
    for line in HOTPOTQA.read_text().splitlines():
        record = json.loads(line)
        labelled = []  # (value, is tool call) per action: the text and each tool call
        for index, value in record["step_labels"].items():
            message = record["messages"][int(index)]
            if (message.get("content") or "").strip():
                labelled.append((value, False))
            labelled += [(value, True)] * len(message.get("tool_calls") or [])
        for (a, a_tool), (b, b_tool) in product(labelled, labelled):
            if a > b:
                step += 1
                tool += a_tool or b_tool
        final_by_task[str(record["query_index"])].append(record["final_label"])
    trace = sum(a > b for values in final_by_task.values() for a, b in product(values, values))
    return step, tool, trace


def test_agentprocessbench_step_labels_give_the_expected_step_pairs(hotpotqa):
    traces, feedback, pairs = hotpotqa
    step, tool, trace = expected_hotpotqa_counts()
    kinds = Counter(p.source_kind for p in pairs)
    assert kinds["step_rating"] == step and step > 500
    assert sum(p.is_tool_call for p in pairs if p.source_kind == "step_rating") == tool
    assert kinds["trace_rating"] == trace
    for pair in pairs:
        if pair.source_kind == "step_rating":
            (trace_id,) = pair.source_trace_ids
            assert pair.chosen.action_id.startswith(trace_id + "/")
            assert pair.rejected.action_id.startswith(trace_id + "/")


def test_agentprocessbench_split_keeps_each_trace_on_one_side(hotpotqa):
    _, _, pairs = hotpotqa
    steps = [p for p in pairs if p.source_kind == "step_rating"]
    split = split_pairs(steps)
    traces = {p.source_trace_ids[0] for p in steps}
    assert len(split.eval_trace_ids) == len(traces) // 10
    assert split.excluded_cross_trace_pairs == 0  # step pairs never span traces
    assert len(split.train) + len(split.eval) == len(steps)


def expected_tau2_outcome_pairs() -> dict[str, int]:
    """Success x failure per (domain, task) over every run file, from the raw JSON."""
    outcomes: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for path in sorted(TAU2_RUNS.glob("*.json")):
        run = json.loads(path.read_text())
        domain = run["info"]["environment_info"]["domain_name"]
        for simulation in run["simulations"]:
            outcomes[(domain, str(simulation["task_id"]))].append(
                simulation["reward_info"]["reward"] >= 1.0)
    counts: Counter[str] = Counter()
    for (domain, _), results in outcomes.items():
        counts[domain] += results.count(True) * results.count(False)
    return dict(counts)


def test_tau2_verified_outcomes_pair_success_and_failure_of_the_same_task():
    assert TAU2_RUNS.is_dir(), f"real data missing: {TAU2_RUNS}"
    records = list(read_path(TAU2_RUNS))
    traces = {r.trace.id: r.trace for r in records}
    pairs = build_feedback_pairs(list(traces.values()), [f for r in records for f in r.feedback])
    expected = expected_tau2_outcome_pairs()
    assert Counter(p.slices["domain"] for p in pairs) == expected
    assert expected["retail"] == 12 and expected["airline"] > 500
    for pair in pairs:
        chosen, rejected = pair.chosen.trace, pair.rejected.trace
        assert pair.source_kind == "verified_outcome" and pair.kind == "trace"
        assert (chosen.domain, chosen.task_id) == (rejected.domain, rejected.task_id)
        assert chosen.id != rejected.id


def test_tau2_outcome_pairs_get_an_evaluation_on_whole_tasks():
    records = list(read_path(TAU2_RUNS))
    traces = {r.trace.id: r.trace for r in records}
    pairs = build_feedback_pairs(list(traces.values()), [f for r in records for f in r.feedback])
    split = split_pairs(pairs)
    assert split.eval_available and split.excluded_cross_trace_pairs == 0
    task_of = {t.id: (t.domain, t.task_id) for t in traces.values()}
    held_tasks = {task_of[t] for t in split.eval_trace_ids}
    assert not held_tasks & {task_of[t] for t in split.train_trace_ids}


def _hh_trace(text: str) -> Trace:
    """One side of an hh-rlhf pair as a trace: its Human/Assistant turns, id from its text."""
    parts = re.split(r"\n\n(Human|Assistant): ", text)
    messages = tuple(Message("user" if role == "Human" else "assistant", content)
                     for role, content in zip(parts[1::2], parts[2::2]))
    return Trace("hh-" + hashlib.sha256(text.encode()).hexdigest()[:16], messages)


def test_hh_rlhf_comparisons_hold_out_about_ten_percent_and_lose_almost_none():
    pairs = []
    with gzip.open(HH_RLHF, "rt") as lines:
        for index, line in enumerate(lines):
            row = json.loads(line)
            chosen, rejected = _hh_trace(row["chosen"]), _hh_trace(row["rejected"])
            pairs.append(Pair(
                id=f"hh{index:05d}", kind="trace", chosen=PairSide(chosen),
                rejected=PairSide(rejected), source_kind="reviewed_comparison",
                source_id=f"hh{index}", source_trace_ids=tuple(sorted({chosen.id, rejected.id}))))
    assert len(pairs) == 1096
    split = split_pairs(pairs)
    assert 0.08 <= len(split.eval) / len(pairs) <= 0.12
    assert split.excluded_cross_trace_pairs / len(pairs) < 0.01
