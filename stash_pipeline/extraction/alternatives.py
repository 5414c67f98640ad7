"""A validated preference becomes a Pair: the original action against the generated alternative,
both cut right after the action, so both sides share the action's context."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from stash_pipeline.core.pair_builders import action_side, pair_slices
from stash_pipeline.core.pairs import Pair, PairSide, pair_id
from stash_pipeline.core.traces import Action, Message, ToolCall, Trace, action_context
from stash_pipeline.extraction.validate import Alternative, Preference


def preference_pair(trace: Trace, preference: Preference) -> Pair:
    original = action_side(trace, preference.action)
    alternative = alternative_side(trace, preference.action, preference.alternative)
    if preference.preferred == "alternative":
        chosen, rejected = alternative, original
    else:
        chosen, rejected = original, alternative
    source_id = pair_source_id(trace, preference)
    digest = hashlib.sha256(json.dumps(preference.alternative.to_dict(), sort_keys=True,
                                       ensure_ascii=False).encode()).hexdigest()[:16]
    keys = (preference.action.id, f"{preference.action.id}:alternative:{digest}")
    if preference.preferred == "alternative":
        keys = keys[::-1]
    is_tool_call, tool, slices = pair_slices(chosen, rejected)
    return Pair(
        id=pair_id(preference.source_kind, f"{trace.id}:{source_id}", *keys),
        kind="action", chosen=chosen, rejected=rejected,
        source_kind=preference.source_kind, source_id=source_id,
        source_trace_ids=(trace.id,), is_tool_call=is_tool_call, tool_name=tool,
        evidence_quote=preference.evidence_quote, rationale=preference.rationale,
        slices=slices, generated=True,
    )


def pair_source_id(trace: Trace, preference: Preference) -> str:
    """The comment id; a correction's user message by its full id; or "assessment"."""
    if preference.source_kind == "correction":
        return f"{trace.id}/{preference.source_id}"
    return preference.source_id


def alternative_side(trace: Trace, action: Action, alternative: Alternative) -> PairSide:
    """The trace cut at the action with the action replaced by the alternative."""
    messages = list(action_context(trace, action))
    # action_context ends with the action's own message when earlier parts of it precede the action.
    partial = len(messages) > action.message_index
    if alternative.tool_call is not None:
        original_call = trace.tool_call(action)
        call_id = original_call.id if original_call else f"{action.local_id}-alternative"
        call = ToolCall(call_id, alternative.tool_call.name, alternative.tool_call.arguments)
        if partial:
            messages[-1] = replace(messages[-1], tool_calls=messages[-1].tool_calls + (call,))
        else:
            messages.append(Message("assistant", "", tool_calls=(call,)))
    else:
        messages.append(Message("assistant", alternative.text or ""))
    alt_trace = trace.with_messages(tuple(messages))
    return PairSide(alt_trace, alt_trace.actions()[-1].id)
