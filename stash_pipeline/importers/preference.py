"""Preference data sets: one record, one conversation with two alternative last assistant turns.

Read: hh-rlhf's text format
(``{"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": ...}``) and TRL's preference
formats, standard (strings) and conversational (message lists), with an explicit ``prompt`` or an
implicit one (the turns both sides share). JSONL or JSON, plain or gzip.

A record becomes two traces that hold the same context (the prompt, stored message for message) and
differ only in their last assistant turn, plus one reviewed comparison of those two final actions:
a pair in one context, which the pair builder turns into an action comparison whose shared context
is the prompt (``core.pairs.pair_context``). Ids derive from the owner and the content, so importing
the same file again maps every record onto the traces it made the first time (a no-op).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.feedback import ReviewedComparison, feedback_id
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.serialize import message_to_dict
from stash_pipeline.core.traces import Message, Trace, content_trace_id
from stash_pipeline.importers.common import ImportOptions, finish, locating
from stash_pipeline.importers.fields import expect_object, json_type, optional_str
from stash_pipeline.importers.jsonio import iter_records
from stash_pipeline.importers.openai_chat import convert_messages

FORMAT = "preference"
SIDES = ("chosen", "rejected")
# hh-rlhf's turn markers; a record's text starts with the first one.
_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ ]?")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}
# The fields a record's id may be in (TRL data sets and exports name it differently).
ID_KEYS = ("id", "prompt_id")


def looks_like_preference(record: Any) -> bool:
    return isinstance(record, dict) and "chosen" in record and "rejected" in record \
        and "messages" not in record


class NoComparison(InputError):
    """A well-formed record whose two sides are no comparison of two replies: an empty reply,
    the same reply twice, sides that differ before their last turn. Public data sets hold a few
    (hh-rlhf's harmless-base dev file: 5 of 1,096); each is skipped, counted and named, never
    refused."""


SKIP_HINT = "--skip-invalid (the API's skip_invalid=true) skips such records and counts them"


def read(path: Path, options: ImportOptions) -> Iterator[ImportedTrace]:
    """The records' traces. A record that is no comparison is skipped (``on_skipped``); any other
    bad record refuses the import, saying which option skips it, unless ``skip_invalid``."""
    file = str(path)
    for record in iter_records(path, options.limits):
        try:
            with locating(file, record.label):
                pair = convert_record(record.data, options)
            imported = [finish(trace, feedback, file=file, record=record.label,
                               number=record.number, limits=options.limits)
                        for trace, feedback in pair]
        except InputError as error:
            if not (options.skip_invalid or isinstance(error, NoComparison)):
                raise InputError(f"{error.reason} ({SKIP_HINT})", file=error.file,
                                 record=error.record, field=error.field) from None
            if options.on_skipped is not None:
                options.on_skipped(error)
            continue
        yield from imported


def convert_record(value: Any, options: ImportOptions
                   ) -> tuple[tuple[Trace, tuple], tuple[Trace, tuple[ReviewedComparison]]]:
    """(chosen trace, no feedback), (rejected trace, the comparison of the two last turns).

    The record's id, when it has one, is kept as provenance in ``metadata.preference``. Nothing
    stored depends on where the record is in its file: the same record at another line, in
    another shard or repeated is the same content, so its reimport is ``unchanged``.
    """
    record = expect_object(value, "record")
    for side in SIDES:
        if record.get(side) is None:
            raise InputError(f"a preference record needs {side!r}", field=side)
    prompt = _prompt(record.get("prompt"))
    sides = {side: prompt + _turns(record[side], side) for side in SIDES}
    context = _shared_context(sides["chosen"], sides["rejected"])
    record_id = next((optional_str(record, k, k) for k in ID_KEYS if record.get(k) is not None),
                     None)
    conversation = content_trace_id(FORMAT, {
        "owner": options.owner, "context": [message_to_dict(m) for m in context],
        **{side: message_to_dict(sides[side][-1]) for side in SIDES}})
    traces = {}
    for side in SIDES:
        metadata = {"task_id": conversation,
                    "preference": {"conversation": conversation, "side": side,
                                   **({"id": record_id} if record_id else {})}}
        trace_id = content_trace_id(FORMAT, {"conversation": conversation, "side": side})
        traces[side] = Trace(id=trace_id, messages=sides[side], owner=options.owner,
                             metadata=metadata, contribute=options.contribute)
    chosen, rejected = traces["chosen"], traces["rejected"]
    chosen_action, rejected_action = final_action(chosen), final_action(rejected)
    comparison = ReviewedComparison(
        feedback_id("comparison", FORMAT, chosen_action, rejected_action), chosen.id, rejected.id,
        chosen_action_id=chosen_action, rejected_action_id=rejected_action,
        reviewer=options.reviewer, status="approved", author=options.author)
    return (chosen, ()), (rejected, (comparison,))


def _prompt(value: Any) -> tuple[Message, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return _text_turns(value, "prompt", default_role="user")
    return convert_messages(value, "prompt")


def _turns(value: Any, field: str) -> tuple[Message, ...]:
    """A side: a string (hh-rlhf turns, or a bare completion) or a list of messages."""
    if isinstance(value, str):
        return _text_turns(value, field, default_role="assistant")
    if isinstance(value, list):
        return convert_messages(value, field)
    raise InputError(f"expected a string or a list of messages, got {json_type(value)}",
                     field=field)


def _text_turns(text: str, field: str, *, default_role: str) -> tuple[Message, ...]:
    """hh-rlhf's ``\\n\\nHuman: ...\\n\\nAssistant: ...`` turns; text without them is one turn."""
    parts = _HH_TURN.split(text)
    if len(parts) == 1:
        return (Message(default_role, text),)  # type: ignore[arg-type]
    if parts[0].strip():
        raise InputError("text before the first 'Human:' or 'Assistant:' turn", field=field)
    return tuple(Message(_HH_ROLES[marker], body)  # type: ignore[arg-type]
                 for marker, body in zip(parts[1::2], parts[2::2]))


def _shared_context(chosen: tuple[Message, ...],
                    rejected: tuple[Message, ...]) -> tuple[Message, ...]:
    """The prompt both sides share: everything but each side's last turn, which must be an
    assistant turn (else InputError) with text, different from the other side's (else
    NoComparison)."""
    for side, messages in (("chosen", chosen), ("rejected", rejected)):
        if not messages or messages[-1].role != "assistant":
            role = messages[-1].role if messages else "nothing"
            raise InputError(f"the last turn of {side!r} must be an assistant turn, not {role}",
                             field=side)
        last = messages[-1]
        if not last.content.strip() and not last.tool_calls:
            # An empty reply has no action to compare (core.traces.trace_actions).
            raise NoComparison(f"the last assistant turn of {side!r} is empty", field=side)
    if chosen[:-1] != rejected[:-1]:
        at = next((i for i, (a, b) in enumerate(zip(chosen, rejected)) if a != b),
                  min(len(chosen), len(rejected)) - 1)
        raise NoComparison(f"'chosen' and 'rejected' do not share a prompt: they differ at turn "
                           f"{at} ({len(chosen)} and {len(rejected)} turns), not only in the "
                           "last assistant turn", field="rejected")
    if chosen[-1] == rejected[-1]:
        raise NoComparison("'chosen' and 'rejected' end with the same assistant turn: nothing "
                           "to compare", field="rejected")
    return chosen[:-1]


def final_action(trace: Trace) -> str:
    """The last action of the trace's last turn: its side reads that whole turn (text and calls)."""
    return trace.actions()[-1].id
