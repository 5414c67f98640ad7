"""The tool the model must call (tool_choice forces it): preferences, or skips with reasons."""

from __future__ import annotations

TOOL_NAME = "record_preferences"

_ALTERNATIVE = {
    "type": "object",
    "description": "The action the agent should have taken instead (or that it rightly avoided).",
    "properties": {
        "type": {"type": "string", "enum": ["text", "tool_call"]},
        "text": {"type": "string", "description": "For type text: the assistant's reply."},
        "tool_call": {
            "type": "object",
            "description": "For type tool_call: the call, with arguments as a JSON object.",
            "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
        },
    },
    "required": ["type"],
}

_PREFERENCE = {
    "type": "object",
    "properties": {
        "action_id": {"type": "string",
                      "description": "An assistant action id, e.g. m3 or m3.call0."},
        "source_id": {
            "type": "string",
            "description": "The comment id, the later user message id (e.g. m7), or 'assessment'.",
        },
        "alternative": _ALTERNATIVE,
        "preferred": {"type": "string", "enum": ["original", "alternative"]},
        "evidence_quote": {
            "type": "string",
            "description": "Copied verbatim from the source: the comment, the user message, or "
                           "for assessment the trace text that shows the problem.",
        },
        "rationale": {"type": "string"},
    },
    "required": ["action_id", "source_id", "alternative", "preferred", "evidence_quote",
                 "rationale"],
}

RECORD_PREFERENCES_TOOL = {
    "name": TOOL_NAME,
    "description": "Record the preferences the feedback supports, and the feedback you skip.",
    "input_schema": {
        "type": "object",
        "properties": {
            "preferences": {"type": "array", "items": _PREFERENCE},
            "skipped": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"source_id": {"type": "string"}, "reason": {"type": "string"}},
                    "required": ["source_id", "reason"],
                },
            },
        },
        "required": ["preferences", "skipped"],
    },
}
