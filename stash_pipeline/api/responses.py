"""Typed responses (the FastAPI template's response models): each route names its model as its
return type, so OpenAPI documents every field and FastAPI checks what the route returns against
it. Every JSON route has one; a key present only sometimes is a field with a default that the
route leaves out when unset (``response_model_exclude_unset``), so the JSON is what the services
build. Shapes documented in docs/api.md and docs/trust.md."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: Literal["ok"]


class AccountView(BaseModel):
    """Whose key this is."""

    id: str
    name: str | None
    reward_models_enabled: bool
    created_at: str = Field(description="ISO 8601.")
    has_api_key: bool


class ContributionChanged(BaseModel):
    """Traces opted in or out of shared-evaluator training."""

    traces: int = Field(description="How many traces changed.")
    contribute: bool


class CommentsAdded(BaseModel):
    comments: int = Field(description="How many traces got the comment.")


class ScoringRequestView(BaseModel):
    """A Score again request, queued for the pipeline."""

    request_id: str = Field(description="A UUID.")
    evaluator: str
    trace_ids: list[str]
    actions: bool
    created_at: str = Field(description="ISO 8601.")


class ScoringQueued(BaseModel):
    requests: list[ScoringRequestView]
    traces: int = Field(description="Traces in all the requests together.")


class SavedFilter(BaseModel):
    id: str = Field(description="A UUID.")
    name: str
    match: dict[str, Any] = Field(description="The search, as `match` takes it.")
    created_at: str = Field(description="ISO 8601.")


class SavedFilters(BaseModel):
    saved_filters: list[SavedFilter]


class ItemVersion(BaseModel):
    kind: Literal["trace", "comparison"]
    id: str
    version: int = Field(description="The item's review version after the change.")


class ReviewStatusChanged(BaseModel):
    items: int = Field(description="How many items changed.")
    status: Literal["reviewed", "skipped", "pending"]
    versions: list[ItemVersion] = Field(description="Each item's new review version.")


class ReviewAssigned(BaseModel):
    items: int = Field(description="How many items changed.")
    assignee: str | None
    versions: list[ItemVersion] = Field(description="Each item's new review version.")


class WaitView(BaseModel):
    """What a queued request waits for: `run` (the pipeline has not made its run yet) or
    `worker` (its run waits behind `runs_ahead` runs)."""

    waiting_for: Literal["run", "worker"]
    runs_ahead: int | None
    run_id: str | None
    text: str = Field(description="The same in words.")


class ScoringRequestState(ScoringRequestView):
    """A Score again request and where its run is."""

    status: Literal["queued", "running", "succeeded", "failed"] | None = Field(
        description="None when the run queue could not be read.")
    error: str | None = Field(description="Why its run failed.")
    wait: WaitView | None = Field(
        description="While queued: what it waits for, and `runs_ahead` of it for the worker.")
    run_id: str | None


class ScoreAgainState(BaseModel):
    """A reward model's latest Score again: its number and where its run is."""

    request: int = Field(description="The model's Score again number.")
    status: Literal["queued", "running", "succeeded", "failed"]
    error: str | None = Field(description="Why its run failed.")
    wait: WaitView | None
    run_id: str | None
    queued_traces: int = Field(0, description="The owner's traces still queued for it: its run "
                                              "scores a first bounded chunk, the scoring "
                                              "queue's chunks the rest (status running until "
                                              "then).")


class HeldOut(BaseModel):
    """Held-out accuracy as people should read it."""

    pairs: int
    accuracy: float
    interval: list[float] = Field(description="The 95% Wilson interval.")
    note: str | None = Field(description="On a handful of pairs, the seed's sentence.")


class RewardModelView(BaseModel):
    """A personal reward model: its request, status, error and metrics, what it waits for in
    the run queue, and its latest Score again's state."""

    id: str
    name: str
    status: str = Field(description="queued, running, succeeded or failed.")
    error: str | None = Field(description="Why it failed: the end of its worker's log.")
    metrics: dict[str, Any] | None
    trace_ids: list[str]
    base_model: str
    epochs: int
    max_pairs: int
    attempt: int
    held_out: HeldOut | None
    created_at: str | None = Field(description="ISO 8601, like `started_at` and `finished_at`.")
    started_at: str | None
    finished_at: str | None
    wait: WaitView | None = Field(
        description="While queued: what it waits for in the run queue.")
    score_again: ScoreAgainState | None = Field(
        description="Its latest Score again request's number and state; None before one.")


class RewardModels(BaseModel):
    reward_models: list[RewardModelView]


class CommentView(BaseModel):
    """A comment, as stored."""

    id: str
    trace_id: str
    action_id: str | None
    author: str | None
    text: str


class RatingView(BaseModel):
    """A rating, as stored."""

    id: str
    trace_id: str
    action_id: str | None
    author: str | None
    value: float


class ComparisonView(BaseModel):
    """A comparison: `chosen` beats `rejected`; sides are traces, or actions of them."""

    id: str
    chosen_trace_id: str
    rejected_trace_id: str
    chosen_action_id: str | None
    rejected_action_id: str | None
    reviewer: str | None
    status: str = Field(description="pending, approved or rejected.")
    rationale: str | None
    author: str | None
    detached: bool = Field(description="An action it names changed since (a reimport).")
    independently_reviewed: bool = Field(
        description="Approved by a reviewer other than its author: what the shared evaluator "
                    "learns from.")
    version: int | None = Field(None, description="Its review version after a verdict (send it "
                                                  "with the next one).")


class OutcomeView(BaseModel):
    """A verified outcome: 1 succeeded, 0 failed."""

    id: str
    trace_id: str
    reward: float
    source: str | None


class FeedbackApplied(BaseModel):
    """A feedback batch, stored: its items' ids in order and the counts by kind."""

    items: int
    ids: list[str]
    comments: int
    ratings: int
    comparisons: int
    outcomes: int
    reviews: int


class TracesImported(BaseModel):
    """An import: what was read and stored, counts by format, owner and domain, and the ids of
    the traces imported in file order."""

    traces: int = Field(description="Records read.")
    imported: int = Field(description="New traces.")
    updated: int = Field(description="Traces already stored whose content changed.")
    unchanged: int = Field(description="Traces already stored with identical content.")
    messages: int
    actions: int
    tool_calls: int
    comments: int
    ratings: int
    comparisons: int
    outcomes: int
    reviews: int
    by_format: dict[str, int]
    by_owner: dict[str, int]
    by_domain: dict[str, int]
    outcome_field: str | None = Field(
        None, description="Only when `outcome_field` was given: the path read.")
    outcome_field_matched: int | None = Field(
        None, description="Only when `outcome_field` was given: the traces it matched.")
    skipped_invalid: int
    warnings: list[str]
    trace_ids: list[str]


class TraceListItem(BaseModel):
    """One line of the trace list."""

    id: str
    owner: str
    agent: str | None
    domain: str | None
    task_id: str | None
    version: int
    messages: int
    actions: int
    contribute: bool
    created_at: str = Field(description="ISO 8601, like `updated_at`.")
    updated_at: str
    latest_score: float | None = Field(
        description="The newest personal whole-trace score (your own models).")
    latest_score_model_id: str | None
    mean_action_credit: float | None = Field(
        description="The shared evaluator's, over the current version.")
    actions_scored: int = Field(description="By the shared evaluator.")
    scoring_state: str = Field(description="The shared evaluator's: waiting, pending or scored.")
    personal_model_id: str | None
    personal_state: str | None = Field(description="pending or scored; None without a model.")
    outcome: float | None = Field(description="The mean reward of its verified outcomes.")
    preview: str | None = Field(description="The first user message.")
    min_action_credit: float | None = Field(
        description="The shared evaluator's lowest, over the current version.")


class TracePage(BaseModel):
    traces: list[TraceListItem]
    total: int
    limit: int
    offset: int
    next_offset: int | None = Field(description="None on the last page.")
    shared_evaluator: str | None = Field(description="The release whose credit is shown.")


class ToolCallView(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any]


class MessageView(BaseModel):
    """A message; the keys after `content` are there only when set."""

    index: int
    role: str
    content: str
    tool_calls: list[ToolCallView] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    error: bool | None = None


class ActionView(BaseModel):
    id: str
    local_id: str
    message_index: int
    call_index: int | None
    tool_name: str | None


class SharedEvaluatorState(BaseModel):
    release: str | None = Field(description="None until the first release.")
    status: str


class ScoreView(BaseModel):
    evaluator: str
    kind: Literal["personal", "shared"]
    raw: float
    calibrated: float | None


class ActionScoreView(BaseModel):
    action_id: str
    evaluator: str
    kind: Literal["personal", "shared"]
    raw: float
    credit: float | None


class CommentItem(BaseModel):
    type: Literal["Comment"]
    id: str
    trace_id: str
    text: str
    action_id: str | None
    author: str | None
    detached: bool


class RatingItem(BaseModel):
    type: Literal["Rating"]
    id: str
    trace_id: str
    value: float
    action_id: str | None
    author: str | None
    detached: bool


class ComparisonItem(BaseModel):
    type: Literal["ReviewedComparison"]
    id: str
    chosen_trace_id: str
    rejected_trace_id: str
    chosen_action_id: str | None
    rejected_action_id: str | None
    reviewer: str | None
    status: str
    rationale: str | None
    author: str | None
    detached: bool


class OutcomeItem(BaseModel):
    type: Literal["VerifiedOutcome"]
    id: str
    trace_id: str
    reward: float
    source: str | None


class TraceDetail(BaseModel):
    """One trace: messages, actions, each evaluator's scores and its feedback."""

    id: str
    agent: str | None
    domain: str | None
    task_id: str | None
    metadata: dict[str, Any] = Field(description="As imported.")
    tools: list[Any]
    contribute: bool
    version: int
    created_at: str = Field(description="ISO 8601, like `updated_at`.")
    updated_at: str
    messages: list[MessageView]
    actions: list[ActionView]
    shared_evaluator: SharedEvaluatorState
    scores: list[ScoreView]
    action_scores: list[ActionScoreView]
    feedback: list[Annotated[CommentItem | RatingItem | ComparisonItem | OutcomeItem,
                             Field(discriminator="type")]]


class TraceContribution(BaseModel):
    id: str
    contribute: bool


class QueueItemView(BaseModel):
    """An item of the review queue. A trace's carries the evaluators' verdicts, a comparison's
    its sides; keys of the other kind are absent."""

    kind: Literal["trace", "comparison"]
    id: str = Field(description="The trace id or the comparison id.")
    trace_id: str = Field(description="The trace (a comparison's chosen side).")
    reason: str
    reason_text: str
    agent: str | None
    domain: str | None
    task_id: str | None
    preview: str | None = Field(description="The trace's first user message.")
    assignee: str | None
    status: str = Field(description="pending or skipped.")
    version: int = Field(description="The item's review version: send it back with a verdict, "
                                     "status or assignment (a change made since answers 409).")
    created_at: str = Field(description="ISO 8601.")
    shared_credit: float | None = Field(None, description="A trace's: the release's mean action "
                                                          "credit.")
    personal_verdict: float | None = Field(None, description="A trace's: the personal model's "
                                                             "verdict, -1..+1.")
    nearest_credit: float | None = Field(None, description="A trace's: the smallest |credit| of "
                                                           "an action.")
    outcome_succeeded: bool | None = None
    chosen_trace_id: str | None = None
    rejected_trace_id: str | None = None
    chosen_action_id: str | None = None
    rejected_action_id: str | None = None
    author: str | None = None
    rationale: str | None = None


class ReasonView(BaseModel):
    reason: str
    text: str


class ReviewYield(BaseModel):
    action: str
    becomes_pairs: bool = Field(description="Whether it becomes training pairs here.")
    so_far: int = Field(description="How many of the reviewer's on these traces so far.")
    text: str


class ReviewYields(BaseModel):
    """What a review yields, said before a reviewer starts (docs/viewer.md)."""

    reviewer: str
    extraction_configured: bool
    actions: list[ReviewYield]


class ReviewQueuePage(BaseModel):
    """A page of the queue's items not reviewed yet, in order, and the progress."""

    items: list[QueueItemView]
    total: int = Field(description="Items in scope, reviewed or not.")
    reviewed: int
    pending: int
    limit: int
    offset: int
    next_offset: int | None
    release: str | None
    model_id: str | None = Field(description="The personal model whose verdicts order it.")
    model_set_aside: str | None = Field(
        description="A personal model it does not read, and why: it does not beat its "
                    "baselines (docs/trust.md).")
    order: list[ReasonView] = Field(description="The reasons, in the queue's order.")
    yields: ReviewYields


class NextQueueItem(QueueItemView):
    focus_action: str | None = Field(None, description="A trace's: the action to look at first.")


class ReviewNext(BaseModel):
    item: NextQueueItem | None = Field(description="None when nothing is left to review.")
    total: int
    reviewed: int
    pending: int
    release: str | None
    model_id: str | None
    model_set_aside: str | None
    yields: ReviewYields


class SqlResult(BaseModel):
    """A read-only query's result: at most `max_rows` rows, each a list in `columns`' order."""

    columns: list[str]
    rows: list[list[Any]] = Field(
        description="JSON values: numbers, strings (times ISO 8601, bytes base64, a float that "
                    "is not finite as its name), booleans, nulls, lists and objects.")
    row_count: int
    truncated: bool = Field(description="There were more rows than `max_rows`.")
    max_rows: int


class TrustTraces(BaseModel):
    """The traces the report read: yours that the evaluator did not train on."""

    considered: int
    trained_on_left_out: int = Field(description="Yours it trained on, left out.")
    with_outcome: int
    with_rating: int
    with_score: int
    with_action_credit: int
    rated_actions: int


class TrustHeldOut(BaseModel):
    source: str = Field(description="Held-out pairs, or the release's separate benchmark.")
    pairs: int
    accuracy: float | None
    interval: list[float] | None = Field(description="The 95% Wilson interval.")
    handful: bool = Field(description="Too few pairs to read much into.")
    note: str | None
    unavailable: str | None = Field(description="Why there are no pairs.")


class Separation(BaseModel):
    """How far apart the raw rewards are, read as the evaluator's own preference."""

    raw_spread: float
    preference_at_extremes: float
    barely_separates: bool
    threshold: float
    scores: int


class TrainingPairs(BaseModel):
    pairs: int | None
    truncated: int | None = Field(description="Pairs cut to the window.")


class TrustFigure(BaseModel):
    """One figure: a metric on a slice, with its 95% interval and n."""

    metric: str
    slice_kind: str = Field(description="all, tool, domain or agent; bin for the reliability "
                                        "curve.")
    slice: str = Field(description="Empty for all.")
    value: float | None
    low: float | None
    high: float | None
    n: int
    detail: dict[str, Any] = Field(description="The metric's own counts (docs/trust.md).")


class TrustMethods(BaseModel):
    confidence: float
    proportion: str
    auc: str
    spearman: str
    clustered: str = Field(description="Which intervals are task-clustered, and how.")
    verdict: str = Field(description="When a figure draws a verdict.")


class TrustGrouping(BaseModel):
    rule: str = Field(description="Which traces share a task (the metadata field named, or the "
                                  "default rule).")
    groups: int = Field(description="Tasks among the traces considered.")
    traces_alone: int = Field(description="Traces in no task: each is its own group.")


class TrustBaseline(BaseModel):
    metric: str
    baseline: str = Field(description="What it is, e.g. the trace-length rule.")
    value: float | None
    low: float | None
    high: float | None
    difference: float = Field(description="The model's figure minus the baseline's, on the "
                                          "same traces.")
    difference_low: float | None = Field(description="Its paired, task-clustered 95% interval.")
    difference_high: float | None


class TrustVerdict(BaseModel):
    """What the report may claim: its overall outcome AUC against its baselines."""

    metric: str
    value: float
    low: float
    high: float
    label: str = Field(description="e.g. 'no better than the trace-length rule (shorter "
                                   "succeeded)', 'too few tasks (4) to judge'.")
    judged: bool = Field(description="False on fewer than 10 tasks.")
    beats_baselines: bool
    baselines: list[TrustBaseline]


class TrustReport(BaseModel):
    """How far to trust an evaluator on your traces it did not train on (docs/trust.md)."""

    evaluator: str
    kind: Literal["shared", "personal"]
    traces: TrustTraces
    held_out: TrustHeldOut
    separation: Separation | None = Field(description="Of whole-trace scores; None under two.")
    action_separation: Separation | None = Field(description="Of action rewards.")
    window: int | None = Field(description="Tokens each input keeps, from the end.")
    training_pairs: TrainingPairs
    figures: list[TrustFigure]
    methods: TrustMethods
    grouping: TrustGrouping
    verdict: TrustVerdict | None = Field(description="None without verified outcomes.")
    notes: list[str] = Field(description="The sentences a page shows.")
    computed_at: str = Field(description="ISO 8601.")


class ModelTrustReport(TrustReport):
    name: str = Field(description="The reward model's.")


class WeightsUrl(BaseModel):
    url: str = Field(description="`reward-model.tar.gz`, for five minutes, without your API key.")
