"""tau2-bench and AgentProcessBench edge cases on hand-written files."""

from __future__ import annotations

from stash_pipeline.core.feedback import Rating, VerifiedOutcome
from stash_pipeline.core.traces import content_trace_id
from stash_pipeline.importers import detect_format
from stash_pipeline_tests.support.importer_helpers import read_all, write_json, write_jsonl


def tau2_run(simulations, **environment):
    return {"timestamp": "t", "info": {"agent_info": {"llm": "agent-llm"},
                                       "environment_info": {"domain_name": "telecom",
                                                            "policy": "POLICY", **environment}},
            "tasks": [], "simulations": simulations}


def test_tau2_leaves_out_the_user_simulators_own_tools(tmp_path):
    messages = [
        {"role": "assistant", "content": "Hi", "tool_calls": None},
        {"role": "user", "content": "Let me check my phone", "tool_calls": [
            {"id": "u1", "name": "check_status_bar", "arguments": {}, "requestor": "user"}]},
        {"role": "tool", "id": "u1", "content": "4G", "requestor": "user", "error": False},
        {"role": "user", "content": "It shows 4G."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a1", "name": "get_line", "arguments": {"phone": "555"},
             "requestor": "assistant"}]},
        {"role": "tool", "id": "a1", "content": "{\"status\": \"active\"}",
         "requestor": "assistant", "error": True},
        {"role": "assistant", "content": None, "tool_calls": None},
    ]
    path = write_json(tmp_path, "run.json", tau2_run([
        {"id": "s1", "task_id": "t9", "trial": 2, "termination_reason": "user_stop",
         "messages": messages},
        {"id": "s2", "task_id": "t9", "messages": messages[:1], "reward_info": None},
    ]))
    assert detect_format(path) == "tau2"
    first, second = read_all(path)
    trace = first.trace
    assert [(m.role, m.content) for m in trace.messages] == [
        ("system", "POLICY"), ("assistant", "Hi"), ("user", "Let me check my phone"),
        ("user", "It shows 4G."), ("assistant", ""), ("tool", "{\"status\": \"active\"}"),
        ("assistant", "")]
    assert trace.messages[5].error and trace.messages[5].tool_call_id == "a1"
    assert [a.local_id for a in trace.actions()] == ["m1", "m4.call0"]
    assert trace.metadata == {"task_id": "t9", "trial": 2, "termination_reason": "user_stop"}
    assert (trace.agent, trace.domain) == ("agent-llm", "telecom")
    assert first.feedback == () and second.feedback == ()  # no reward recorded: no outcome


def test_tau2_uses_tool_definitions_when_the_file_has_them(tmp_path):
    schema = {"description": "Look up a line", "parameters": {"type": "object"}}
    simulation = {"id": "s1", "messages": [{"role": "user", "content": "hi"}],
                  "reward_info": {"reward": 0.0}}
    by_name = write_json(tmp_path, "a.json", tau2_run([simulation], tool_defs={"get_line": schema}))
    [record] = read_all(by_name)
    assert record.trace.tools == ({"type": "function", "function": {"name": "get_line", **schema}},)
    [outcome] = record.feedback
    assert isinstance(outcome, VerifiedOutcome) and not outcome.succeeded
    listed = write_json(tmp_path, "b.json", tau2_run([simulation], tool_defs=[
        {"type": "function", "function": {"name": "get_line", **schema}}]))
    assert read_all(listed)[0].trace.tools == record.trace.tools


def test_agentprocessbench_rows(tmp_path):
    row = {
        "total_index": 5, "query_index": 2, "sample_index": 1, "data_source": "searchR1_hotpotqa",
        "question": "q", "ground_truth": {"target": ["x"]},
        "tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}],
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "think", "tool_calls": [
                {"id": "k", "type": "function",
                 "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}}]},
            {"role": "tool", "name": "search", "tool_call_id": "k", "content": "found"},
            {"role": "assistant", "content": "<answer>x</answer>"},
        ],
        "step_labels": {"2": -1, "4": 1},
        "final_label": 1,
    }
    path = write_jsonl(tmp_path, "apb.jsonl", [row])
    [record] = read_all(path)
    trace = record.trace
    assert trace.id == content_trace_id("agentprocessbench",
                                        {"data_source": "searchR1_hotpotqa", "total_index": 5})
    assert (trace.task_id, trace.domain, trace.metadata["sample_index"]) == (
        "2", "searchR1_hotpotqa", 1)
    ratings = [(r.action_id and r.action_id.split("/")[1], r.value) for r in record.feedback
               if isinstance(r, Rating)]
    assert ratings == [("m2", -1.0), ("m2.call0", -1.0), ("m4", 1.0), (None, 1.0)]
    assert "ground_truth" not in trace.metadata  # the answer key is no input to an evaluator
