"""tau2-bench result files: ``{info, tasks, simulations: [...]}``, one trace per simulation.

The simulation id is the trace id, the domain policy the system message, the agent's LLM the agent,
``task_id`` goes to ``metadata.task_id`` and ``reward_info.reward`` becomes a verified outcome.
Simulations are streamed one at a time, so a large run file is read in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import VerifiedOutcome, feedback_id
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.traces import Message, Trace
from stash_pipeline.importers.common import ImportOptions, finish, locating, openai_tools
from stash_pipeline.importers.fields import (
    as_text,
    expect_list,
    expect_object,
    number,
    optional_object,
    optional_str,
    required,
)
from stash_pipeline.importers.jsonio import first_value, iter_items
from stash_pipeline.importers.openai_chat import convert_message

FORMAT = "tau2"
OUTCOME_SOURCE = "tau2-bench"
# Run-level facts worth keeping on each trace; the reward stays out (it is feedback, not input).
SIMULATION_METADATA = ("trial", "termination_reason")


@dataclass(frozen=True)
class RunInfo:
    policy: str | None
    domain: str | None
    agent: str | None
    tools: tuple[dict[str, Any], ...]


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    file = str(path)
    with locating(file, "info"):
        run = run_info(first_value(path, "info", options.limits))
    count = 0
    for record in iter_items(path, "simulations.item", options.limits,
                             label=lambda i: f"simulations[{i}]"):
        with locating(file, record.label):
            trace, outcome = convert_simulation(record.data, run, options)
        count += 1
        yield finish(trace, outcome, file=file, record=record.label, number=record.number,
                     limits=options.limits, outcome_field=options.outcome_field)
    if count == 0:
        raise InputError("a tau2-bench result file needs a non-empty 'simulations' array",
                         file=file, field="simulations")


def run_info(value: Any) -> RunInfo:
    info = {} if value is None else expect_object(value, "info")
    environment = optional_object(info, "environment_info", "info.environment_info")
    agent = optional_object(info, "agent_info", "info.agent_info")
    return RunInfo(
        policy=optional_str(environment, "policy", "info.environment_info.policy"),
        domain=optional_str(environment, "domain_name", "info.environment_info.domain_name"),
        agent=optional_str(agent, "llm", "info.agent_info.llm"),
        tools=tool_definitions(environment.get("tool_defs"), "info.environment_info.tool_defs"),
    )


def tool_definitions(value: Any, field: str) -> tuple[dict[str, Any], ...]:
    """The run's tool schemas when the file records them: a list, or a map of name -> schema."""
    if isinstance(value, dict):
        named = []
        for name, schema in value.items():
            schema = expect_object(schema, f"{field}.{name}")
            named.append(schema if "function" in schema or "name" in schema
                         else {"name": name, **schema})
        value = named
    return openai_tools(value, field)


def convert_simulation(value: Any, run: RunInfo,
                       options: ImportOptions) -> tuple[Trace, tuple[VerifiedOutcome, ...]]:
    simulation = expect_object(value, "simulation")
    trace_id = optional_str(simulation, "id", "id")
    if not trace_id:
        raise InputError("a simulation needs an id", field="id")
    messages = [Message("system", run.policy)] if run.policy else []
    for i, raw in enumerate(expect_list(required(simulation, "messages", "messages"), "messages")):
        message = _as_openai_message(expect_object(raw, f"messages[{i}]"), f"messages[{i}]")
        if message is not None:
            messages.append(convert_message(message, f"messages[{i}]", len(messages)))
    metadata: dict[str, Any] = {}
    if simulation.get("task_id") is not None:
        metadata["task_id"] = optional_str(simulation, "task_id", "task_id")
    metadata.update(
        (k, simulation[k]) for k in SIMULATION_METADATA if simulation.get(k) is not None)
    trace = Trace(id=trace_id, messages=tuple(messages), owner=options.owner, agent=run.agent,
                  domain=run.domain, metadata=metadata, tools=run.tools,
                  contribute=options.contribute)
    return trace, _outcome(simulation, trace_id)


def _as_openai_message(message: dict[str, Any], where: str) -> dict[str, Any] | None:
    """tau2's message in OpenAI form, or None for what the agent never saw.

    A tool result names its call in ``id`` and flags failures in ``error``. In domains where the
    user simulator has tools of its own, the user's tool calls and their results (``requestor``
    "user") are the user's side of the conversation and are left out.
    """
    role = message.get("role")
    if role == "tool":
        if message.get("requestor") == "user":
            return None
        return {"role": "tool", "content": as_text(message.get("content"), f"{where}.content"),
                "tool_call_id": message.get("id"), "error": bool(message.get("error") or False)}
    if role == "user":
        return {**message, "tool_calls": None}
    return message


def _outcome(simulation: dict[str, Any], trace_id: str) -> tuple[VerifiedOutcome, ...]:
    reward_info = simulation.get("reward_info")
    if reward_info is None:
        return ()
    reward = expect_object(reward_info, "reward_info").get("reward")
    if reward is None:
        return ()
    return (VerifiedOutcome(feedback_id("outcome", trace_id, OUTCOME_SOURCE), trace_id,
                            number(reward, "reward_info.reward"), source=OUTCOME_SOURCE),)
