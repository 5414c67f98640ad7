"""Every importer on the real files of ../shared/data, with counts computed from the source JSON."""

from __future__ import annotations

import ast
import json

import pytest

from stash_pipeline.core.feedback import Rating, VerifiedOutcome
from stash_pipeline.core.traces import summarize
from stash_pipeline.importers import detect_format
from stash_pipeline.importers.fields import UNPARSED_ARGUMENTS_KEY
from stash_pipeline_tests.support.importer_helpers import read_all, shared_data

TAU2_RUNS = sorted(shared_data("tau2-bench", "runs").glob("*.json"))
HOTPOTQA = shared_data("agentprocessbench", "hotpotqa.jsonl")


def _actions_of(role: str, content: str | None, tool_calls: list | None) -> int:
    """What the product calls actions, counted straight from a source message."""
    if role != "assistant":
        return 0
    return (1 if (content or "").strip() else 0) + len(tool_calls or [])


def test_the_shared_data_has_the_expected_files():
    assert len(TAU2_RUNS) == 12


@pytest.mark.parametrize("run", TAU2_RUNS, ids=lambda p: p.stem)
def test_tau2_run_counts_and_mapping(run):
    source = json.loads(run.read_text())
    simulations = source["simulations"]
    info = source["info"]
    records = read_all(run)

    expected = {"traces": len(simulations), "messages": 0, "actions": 0, "tool_calls": 0}
    for simulation in simulations:
        expected["messages"] += 1 + len(simulation["messages"])  # the policy is the system message
        for m in simulation["messages"]:
            expected["actions"] += _actions_of(m["role"], m.get("content"), m.get("tool_calls"))
            expected["tool_calls"] += (len(m.get("tool_calls") or []) if m["role"] == "assistant"
                                       else 0)
    assert summarize([r.trace for r in records]) == expected

    assert detect_format(run) == "tau2"
    for simulation, record in zip(simulations, records, strict=True):
        trace = record.trace
        assert trace.id == simulation["id"]
        assert trace.agent == info["agent_info"]["llm"]
        assert trace.domain == info["environment_info"]["domain_name"]
        assert trace.task_id == str(simulation["task_id"])
        assert trace.messages[0].role == "system"
        assert trace.messages[0].content == info["environment_info"]["policy"]
        outcomes = [f for f in record.feedback if isinstance(f, VerifiedOutcome)]
        assert [o.reward for o in outcomes] == [simulation["reward_info"]["reward"]]
        assert outcomes[0].trace_id == trace.id
        source_errors = [bool(m.get("error")) for m in simulation["messages"]
                         if m["role"] == "tool"]
        assert [m.error for m in trace.messages if m.role == "tool"] == source_errors
        source_results = [m["id"] for m in simulation["messages"] if m["role"] == "tool"]
        assert [m.tool_call_id for m in trace.messages if m.role == "tool"] == source_results


def test_tau2_keeps_tool_error_flags_across_all_runs():
    flagged = sum(
        1 for run in TAU2_RUNS for s in json.loads(run.read_text())["simulations"]
        for m in s["messages"] if m["role"] == "tool" and m.get("error")
    )
    imported = sum(1 for run in TAU2_RUNS for r in read_all(run)
                   for m in r.trace.messages if m.role == "tool" and m.error)
    assert flagged > 0
    assert imported == flagged


def test_agentprocessbench_counts_and_labels():
    source = [json.loads(line) for line in HOTPOTQA.read_text().splitlines() if line.strip()]
    records = read_all(HOTPOTQA)
    assert detect_format(HOTPOTQA) == "agentprocessbench"

    expected = {"traces": len(source), "messages": 0, "actions": 0, "tool_calls": 0}
    expected_step_ratings = 0
    for row in source:
        expected["messages"] += len(row["messages"])
        for i, m in enumerate(row["messages"]):
            n = _actions_of(m["role"], m.get("content"), m.get("tool_calls"))
            expected["actions"] += n
            expected["tool_calls"] += len(m.get("tool_calls") or [])
            if str(i) in row["step_labels"]:
                expected_step_ratings += n
    assert summarize([r.trace for r in records]) == expected

    step = [f for r in records for f in r.feedback if isinstance(f, Rating) and f.is_step_rating]
    whole = [f for r in records for f in r.feedback
             if isinstance(f, Rating) and not f.is_step_rating]
    assert len(step) == expected_step_ratings
    assert [w.value for w in whole] == [row["final_label"] for row in source]
    for row, record in zip(source, records, strict=True):
        trace = record.trace
        assert trace.task_id == str(row["query_index"])
        tools = ast.literal_eval(row["tools"]) if isinstance(row["tools"], str) else row["tools"]
        assert [t["function"]["name"] for t in trace.tools] == \
            [t["function"]["name"] for t in tools]
        by_action = {f.action_id: f.value for f in record.feedback
                     if isinstance(f, Rating) and f.is_step_rating}
        for index, label in row["step_labels"].items():
            actions = [a for a in trace.actions() if a.message_index == int(index)]
            assert actions and all(by_action[a.id] == label for a in actions)


def test_agentprocessbench_keeps_broken_arguments_the_labels_judge():
    source = [json.loads(line) for line in HOTPOTQA.read_text().splitlines() if line.strip()]
    broken = []
    for row_index, row in enumerate(source):
        for i, m in enumerate(row["messages"]):
            for k, call in enumerate(m.get("tool_calls") or []):
                try:
                    parsed = json.loads(call["function"]["arguments"])
                except ValueError:
                    parsed = None
                if not isinstance(parsed, dict):
                    broken.append((row_index, i, k, call["function"]["arguments"]))
    assert broken, "the dataset has agent calls with malformed arguments"
    records = read_all(HOTPOTQA)
    for row_index, i, k, raw in broken:
        call = records[row_index].trace.messages[i].tool_calls[k]
        assert call.arguments == {UNPARSED_ARGUMENTS_KEY: raw}


def test_reimporting_gives_identical_trace_and_action_ids():
    for path in (TAU2_RUNS[0], HOTPOTQA):
        first, second = read_all(path), read_all(path)
        assert [r.trace.id for r in first] == [r.trace.id for r in second]
        assert [a.id for r in first for a in r.trace.actions()] == \
            [a.id for r in second for a in r.trace.actions()]
        assert [f.id for r in first for f in r.feedback] == \
            [f.id for r in second for f in r.feedback]
        assert len({r.trace.id for r in first}) == len(first)


def test_a_directory_imports_every_file_sorted():
    records = read_all(shared_data("tau2-bench", "runs"))
    files = [r.source.rsplit(":", 1)[0] for r in records]
    assert sorted(set(files)) == [str(p) for p in TAU2_RUNS]
    assert files == sorted(files)
    assert len(records) == sum(len(json.loads(p.read_text())["simulations"]) for p in TAU2_RUNS)


def test_owner_and_contribution_apply_to_every_trace():
    records = read_all(HOTPOTQA, owner="alice", contribute=True)
    assert {(r.trace.owner, r.trace.contribute) for r in records} == {("alice", True)}
