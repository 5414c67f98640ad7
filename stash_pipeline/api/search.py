"""The trace search as the API takes it: query parameters of the list and the review queue, and
the ``match`` object of bulk actions and saved filters. Both are read by core.trace_search's
one parser, so a bad value is the same 422 naming the parameter everywhere."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from stash_pipeline.core.trace_search import (
    MAX_QUERY_CHARS,
    OUTCOMES,
    STATES,
    TraceFilter,
    parse_filter,
)

_NAME = 256
_DATE = ("A date (YYYY-MM-DD, the whole day in UTC) or an ISO 8601 time; created at or after "
         "it.")


def search_filter(
        q: str | None = Query(None, max_length=MAX_QUERY_CHARS,
                              description="Text the trace's user, assistant or tool messages or "
                                          "tool calls contain (case-insensitive)."),
        agent: str | None = Query(None, max_length=_NAME, description="Only this agent."),
        domain: str | None = Query(None, max_length=_NAME, description="Only this domain."),
        tool: str | None = Query(None, max_length=_NAME,
                                 description="Only traces that call this tool."),
        task_id: str | None = Query(None, max_length=_NAME,
                                    description="Only traces of this `metadata.task_id`."),
        outcome: str | None = Query(None, description=f"Verified outcome: one of "
                                                      f"{', '.join(OUTCOMES)}."),
        state: str | None = Query(None, description="The shared evaluator's scoring state: one "
                                                    f"of {', '.join(STATES)}."),
        credit_min: str | None = Query(None, description="Mean action credit (the release's) "
                                                         "at least this (-1 to 1)."),
        credit_max: str | None = Query(None, description="Mean action credit at most this."),
        created_from: str | None = Query(None, description=_DATE),
        created_to: str | None = Query(None, description="A date (the whole day included) or "
                                                         "a time; created before it."),
) -> TraceFilter:
    """The search named by the request's query parameters (none: every trace)."""
    return parse_filter(dict(q=q, agent=agent, domain=domain, tool=tool, task_id=task_id,
                             outcome=outcome, state=state, credit_min=credit_min,
                             credit_max=credit_max, created_from=created_from,
                             created_to=created_to))


class TraceSearch(BaseModel):
    """A search of your traces, as the list's query parameters are (every field optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    q: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    agent: str | None = Field(None, max_length=_NAME)
    domain: str | None = Field(None, max_length=_NAME)
    tool: str | None = Field(None, max_length=_NAME)
    task_id: str | None = Field(None, max_length=_NAME)
    outcome: str | None = Field(None, description=f"One of {', '.join(OUTCOMES)}.")
    state: str | None = Field(None, description=f"One of {', '.join(STATES)}.")
    credit_min: float | None = Field(None, ge=-1, le=1)
    credit_max: float | None = Field(None, ge=-1, le=1)
    created_from: str | None = Field(None, max_length=40, description=_DATE)
    created_to: str | None = Field(None, max_length=40)

    def params(self) -> dict[str, str]:
        """As text parameters (what saved filters keep and links carry)."""
        return {name: str(value) for name, value in self.model_dump().items()
                if value is not None}

    def trace_filter(self) -> TraceFilter:
        return parse_filter(self.params())


# The trust report's grouping rule, as a query parameter (docs/trust.md, Groups).
GroupBy = Annotated[str | None, Query(
    max_length=_NAME, description="The metadata field whose value says which traces share a "
                                  "task (default: task_id, else evaluation_context, else the "
                                  "first user message; docs/trust.md)")]
