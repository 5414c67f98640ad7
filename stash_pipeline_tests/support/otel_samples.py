"""OTLP export samples (spans and their attributes) for the OpenTelemetry importer's tests."""

from __future__ import annotations

import json

TRACE = "5b8efff798038103d269b633813fc60c"


def attribute(key, value):
    return {"key": key, "value": {"stringValue": value if isinstance(value, str)
                                  else json.dumps(value)}}


SYSTEM = [{"type": "text", "content": "You are a weather agent."}]


QUESTION = {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}


CALL = {"role": "assistant", "parts": [
    {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}]}


RESULT = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "18C"}]}


ANSWER = {"role": "assistant", "parts": [{"type": "text", "content": "18C in Paris."}],
          "finish_reason": "stop"}


def span(span_id, start, end, *, trace=TRACE, parent="", conversation="conv-1", agent=None,
         operation="chat", inputs=None, outputs=None, system=None):
    attributes = [attribute("gen_ai.operation.name", operation),
                  attribute("gen_ai.request.model", "gpt-test")]
    for key, value in (("gen_ai.conversation.id", conversation), ("gen_ai.agent.name", agent),
                       ("gen_ai.input.messages", inputs), ("gen_ai.output.messages", outputs),
                       ("gen_ai.system_instructions", system)):
        if value is not None:
            attributes.append(attribute(key, value))
    return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": operation,
            "kind": 3, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": attributes}


def export(*spans):
    return {"resourceSpans": [{"resource": {"attributes": [attribute("service.name", "svc")]},
                               "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}]}]}
