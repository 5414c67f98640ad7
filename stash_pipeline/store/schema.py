"""The SQL schema (DESIGN §3) as SQLAlchemy Core tables, shared by SQLite and PostgreSQL.

Portable types only (JSON, not JSONB): PostgreSQL's JSON keeps the text as written, so key order of
tool arguments (which the renderer sees) survives a round trip on both databases. The migrations
under ``migrations/versions`` create exactly these tables; a test compares the two.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from stash_pipeline.core.record_ids import new_record_id

metadata = sa.MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
})

ID = sa.String(64)  # trace UUIDs, feedback uuid5s, model ids
ACTION_ID = sa.String(160)  # "<trace id>/m<i>.call<k>"
# A record an account makes and names in URLs: a random UUID's text (core.record_ids).
RECORD_ID = sa.String(36)
NOW = sa.func.current_timestamp()


def utcnow() -> datetime:
    """Client-side timestamps: microseconds on SQLite too, so 'newest' orders within a second."""
    return datetime.now(timezone.utc)


def _created() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
                     server_default=NOW)


accounts = sa.Table(
    "accounts", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("name", sa.String(256), nullable=True),  # display name; null for import-made accounts
    # SHA-256 (hex) of the account's API key; the key itself is shown once and never stored.
    sa.Column("api_key_hash", sa.String(128), nullable=True, unique=True),
    _created(),
    # False for accounts that existed before the reward-model rollout: their RM routes answer 404.
    sa.Column("reward_models_enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    # Raised by the viewer's Log out: every session cookie issued before it stops working.
    sa.Column("session_epoch", sa.Integer, nullable=False, server_default="0"),
)

traces = sa.Table(
    "traces", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False, index=True),
    sa.Column("agent", sa.String(256)),
    sa.Column("domain", sa.String(256)),
    sa.Column("task_id", sa.String(256), index=True),
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("tools", sa.JSON, nullable=False),
    # One JSON document per trace (core.serialize's message form): a trace is always read whole,
    # and one row per trace keeps imports to a few statements per chunk.
    sa.Column("messages", sa.JSON, nullable=False),
    sa.Column("message_count", sa.Integer, nullable=False),
    sa.Column("action_count", sa.Integer, nullable=False),
    sa.Column("contribute", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("version", sa.Integer, nullable=False),
    _created(),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
    # core.digests.trace_digest of the stored content: an identical reimport changes nothing.
    # Null for traces stored before digests existed (their next reimport counts as a change).
    sa.Column("content_digest", sa.String(64)),
    # core.trace_search: the first user message as the list shows it, and the casefolded text
    # a search matches (not JSON: a substring search must not match keys or escapes).
    sa.Column("preview", sa.String(256)),
    sa.Column("search_text", sa.Text),
)

actions = sa.Table(
    "actions", metadata,
    sa.Column("id", ACTION_ID, primary_key=True),
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("message_index", sa.Integer, nullable=False),
    sa.Column("call_index", sa.Integer),
    sa.Column("tool_name", sa.String(256)),
    # core.digests.action_digests: the action and what its rendering reads before it.
    sa.Column("content_digest", sa.String(64)),
    # The tool filter (the traces calling a tool) and the tool menu read only this index.
    sa.Index("ix_actions_tool_name_trace_id", "tool_name", "trace_id"),
)

# Which trace version each evaluator has scored: a trace whose current version has no row here for
# the shared evaluator is pending (the database is the queue the scoring sensor reads).
scoring_marks = sa.Table(
    "scoring_marks", metadata,
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), primary_key=True),
    sa.Column("evaluator", sa.String(128), primary_key=True),
    sa.Column("trace_version", sa.Integer, nullable=False),
    sa.Column("scored_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
)

# The scoring queue: each (evaluator, trace) whose current version that evaluator has yet to score,
# for the current shared release and every kept-current personal model (store.scoring_work). Rows
# come with imports and reimports, a release and a model that becomes kept current; a scoring run's
# stored results remove them. The scoring sensors read it a page at a time through its indexes.
scoring_candidates = sa.Table(
    "scoring_candidates", metadata,
    sa.Column("evaluator", sa.String(128), primary_key=True),  # a release or a personal model
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), primary_key=True),
    sa.Column("trace_version", sa.Integer, nullable=False),
    sa.Column("personal", sa.Boolean, nullable=False),  # a personal model's, else the release's
    sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
    # Queued by a Score again of the owner's every trace (`rm score`): it stays until scored,
    # whether or not the model is kept current.
    sa.Column("requested", sa.Boolean, nullable=False, default=False,
              server_default=sa.false()),
    sa.Index("ix_scoring_candidates_personal_queued_at", "personal", "queued_at", "evaluator",
             "trace_id"),
    sa.Index("ix_scoring_candidates_evaluator_queued_at", "evaluator", "queued_at", "trace_id"),
    sa.Index("ix_scoring_candidates_trace_id", "trace_id"),
)

# Leases on the worker's steps (store.leases): a step of a run is worked by the one process that
# holds its lease; a second start of it finds the lease held (or finished) and does nothing.
step_leases = sa.Table(
    "step_leases", metadata,
    sa.Column("name", sa.String(256), primary_key=True),  # step:<run id>:<step key>
    sa.Column("run_id", sa.String(64), nullable=False, index=True),
    sa.Column("holder", sa.String(256), nullable=False),  # host:pid:start of the process
    sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), index=True),
)

comments = sa.Table(
    "comments", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("action_id", ACTION_ID),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("author", sa.String(256)),
    _created(),
    # The content digest of the action when the feedback was given: when the action's content
    # changes, the feedback is orphaned (store.feedback). Null: on a trace, or given before digests.
    sa.Column("action_digest", sa.String(64)),
)

ratings = sa.Table(
    "ratings", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("action_id", ACTION_ID),  # set: a step rating; null: a trace rating
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("author", sa.String(256)),
    _created(),
    sa.Column("action_digest", sa.String(64)),  # as comments.action_digest
)

reviewed_comparisons = sa.Table(
    "reviewed_comparisons", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("chosen_trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("rejected_trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("chosen_action_id", ACTION_ID),
    sa.Column("rejected_action_id", ACTION_ID),
    sa.Column("reviewer", sa.String(256)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("rationale", sa.Text),
    _created(),
    # Who made the comparison: the shared evaluator takes it only when someone else reviewed it.
    sa.Column("author", sa.String(256)),
    sa.Column("chosen_action_digest", sa.String(64)),  # as comments.action_digest, per side
    sa.Column("rejected_action_digest", sa.String(64)),
)

verified_outcomes = sa.Table(
    "verified_outcomes", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("reward", sa.Float, nullable=False),
    sa.Column("source", sa.String(256)),
    _created(),
)

reward_models = sa.Table(
    "reward_models", metadata,
    sa.Column("id", ID, primary_key=True),
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False, index=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("trace_ids", sa.JSON, nullable=False),
    sa.Column("base_model", sa.String(512), nullable=False),
    sa.Column("epochs", sa.Integer, nullable=False),
    sa.Column("max_pairs", sa.Integer, nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("error", sa.Text),
    sa.Column("metrics", sa.JSON),
    sa.Column("checkpoint_uri", sa.String(1024)),
    _created(),
    sa.Column("started_at", sa.DateTime(timezone=True)),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    # Times queued (1, plus one a retry): the sensor's run key and the job directory name it.
    sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
    # The orchestrator's run of the current attempt: a failure of any other run leaves it alone.
    sa.Column("run_id", sa.String(64)),
    # "Score again" requests made; the sensor launches one scoring run for each.
    sa.Column("score_generation", sa.Integer, nullable=False, server_default="0"),
    # When the current attempt was queued (created, or retried): the queued-models sensor reads
    # the models queued since its cursor through the index on (status, queued_at).
    sa.Column("queued_at", sa.DateTime(timezone=True)),
    # When the latest Score again was asked: the request sensor reads the models asked since its
    # cursor through this column's index, never every succeeded model.
    sa.Column("score_requested_at", sa.DateTime(timezone=True)),
    # When the model's Dagster partition was deleted (defs/personal/retirement.py): the model, its
    # metrics, scores and checkpoint stay; a retry adds the partition again and clears this.
    sa.Column("partition_retired_at", sa.DateTime(timezone=True)),
    sa.Index("ix_reward_models_status_queued_at", "status", "queued_at", "id"),
    sa.Index("ix_reward_models_score_requested_at", "score_requested_at", "id"),
    sa.Index("ix_reward_models_partition_retired_at", "partition_retired_at", "finished_at",
             "id"),
)

# Every pair a model trained on, with its provenance. A pair belongs to exactly one user: a
# personal reward model or a shared-evaluator candidate; the same pair id may recur across users.
pairs = sa.Table(
    "pairs", metadata,
    sa.Column("row_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", ID, nullable=False),
    sa.Column("reward_model_id", ID, sa.ForeignKey("reward_models.id"), index=True),
    sa.Column("candidate", sa.String(128), index=True),
    sa.Column("position", sa.Integer, nullable=False),
    # "train", "eval" or "excluded" (crossing the split) once split; null before. A candidate's
    # benchmark pairs are "benchmark": scored to gate its release, never trained on.
    sa.Column("split", sa.String(16)),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("source_kind", sa.String(32), nullable=False),
    sa.Column("source_id", sa.String(256), nullable=False),
    sa.Column("source_trace_ids", sa.JSON, nullable=False),
    sa.Column("is_tool_call", sa.Boolean, nullable=False),
    sa.Column("tool_name", sa.String(256)),
    sa.Column("evidence_quote", sa.Text),
    sa.Column("rationale", sa.Text),
    sa.Column("slices", sa.JSON, nullable=False),
    sa.Column("generated", sa.Boolean, nullable=False),
    sa.Column("chosen", sa.JSON, nullable=False),
    sa.Column("rejected", sa.JSON, nullable=False),
    _created(),
    sa.CheckConstraint("(reward_model_id IS NULL) <> (candidate IS NULL)", name="one_user"),
)

scores = sa.Table(
    "scores", metadata,
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), primary_key=True),
    sa.Column("evaluator", sa.String(128), primary_key=True),
    sa.Column("trace_version", sa.Integer, nullable=False),
    sa.Column("raw", sa.Float, nullable=False),
    sa.Column("calibrated", sa.Float),
    _created(),
    # Tokens of the trace's rendering before the evaluator's window cut (longer: it lost its
    # beginning); null for scores written before the worker counted them.
    sa.Column("input_tokens", sa.Integer),
)

# The trust report's untrained baseline (docs/trust.md): a personal model's base with its fresh
# score head, before any training step, scored once when the model trained, on the traces the
# model scored then. Score again leaves it as it was.
untrained_scores = sa.Table(
    "untrained_scores", metadata,
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), primary_key=True),
    sa.Column("evaluator", sa.String(128), primary_key=True),  # the trained model's id
    sa.Column("trace_version", sa.Integer, nullable=False),
    sa.Column("raw", sa.Float, nullable=False),
)

action_scores = sa.Table(
    "action_scores", metadata,
    sa.Column("action_id", ACTION_ID, primary_key=True),
    sa.Column("evaluator", sa.String(128), primary_key=True),
    sa.Column("trace_id", ID, sa.ForeignKey("traces.id"), nullable=False, index=True),
    sa.Column("trace_version", sa.Integer, nullable=False),
    sa.Column("raw", sa.Float, nullable=False),
    sa.Column("credit", sa.Float),
    _created(),
    sa.Column("input_tokens", sa.Integer),  # the action's own rendering, as scores.input_tokens
    # One evaluator's credit per trace version, read without the table (the trace list's and the
    # review queue's aggregates).
    sa.Index("ix_action_scores_evaluator_trace_id", "evaluator", "trace_id", "trace_version",
             "credit"),
)

releases = sa.Table(
    "releases", metadata,
    sa.Column("version", sa.String(128), primary_key=True),
    sa.Column("checkpoint_uri", sa.String(1024), nullable=False),
    sa.Column("benchmark_report", sa.JSON, nullable=False),
    sa.Column("data_snapshot", sa.JSON, nullable=False),  # trace ids and versions trained on
    _created(),
    # The release's queueing, in batches (store.scoring_work.settle_release_queue): the latest
    # release queues every trace in id order, ``queued_through`` the last id queued so far; a
    # replaced release drops its queue rows. ``queue_settled`` once that is done.
    sa.Column("queued_through", ID),
    sa.Column("queue_settled", sa.Boolean, nullable=False, server_default=sa.true()),
)

# A candidate evaluated against the incumbent on the separate benchmark: the release gate's record.
benchmark_comparisons = sa.Table(
    "benchmark_comparisons", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("candidate", sa.String(128), nullable=False, index=True),
    sa.Column("incumbent", sa.String(128)),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("report", sa.JSON, nullable=False),
    _created(),
)

# `stash-pipeline evaluator train` without --wait: a request the shared-evaluator sensor turns into
# one run of the chain (run key = the request's id), as queued personal models are.
shared_training_requests = sa.Table(
    "shared_training_requests", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("base_model", sa.String(512)),  # null: the deployment's default
    sa.Column("epochs", sa.Integer),
    _created(),
)

# Score again for chosen traces (`traces score`, POST /api/v1/traces/score): one request the
# scoring sensor turns into one run (run key = the request's id), with the release or a model.
scoring_requests = sa.Table(
    "scoring_requests", metadata,
    sa.Column("id", RECORD_ID, primary_key=True, default=new_record_id),
    sa.Column("legacy_id", sa.Integer, unique=True),  # its id before 0012 (core.record_ids)
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False),
    sa.Column("evaluator", sa.String(128), nullable=False),  # a release version or a model id
    sa.Column("traces", sa.JSON, nullable=False),  # {trace id: version} when asked
    sa.Column("actions", sa.Boolean, nullable=False),  # Score actions too
    _created(),
    # The request sensor's page: requests oldest first, past its cursor (created at, id).
    sa.Index("ix_scoring_requests_created_at", "created_at", "id"),
)

# The review queue's state of an item (a trace, or a comparison waiting for review) that is not
# feedback itself: reviewed without a comment (at which trace version), skipped, assigned.
review_items = sa.Table(
    "review_items", metadata,
    sa.Column("kind", sa.String(16), primary_key=True),  # "trace" or "comparison"
    sa.Column("item_id", ID, primary_key=True),
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False, index=True),
    sa.Column("status", sa.String(16)),  # "reviewed", "skipped" or null (only assigned)
    sa.Column("trace_version", sa.Integer),  # a trace reviewed at this version
    sa.Column("assignee", sa.String(256)),
    sa.Column("reviewer", sa.String(256)),  # who set the status
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
    # Raised by every change (status, assignment, a comparison's verdict); no row: version 0. A
    # change that names an older version is refused (ReviewConflict), so reviewers notice each
    # other.
    sa.Column("version", sa.Integer, nullable=False, default=0, server_default="0"),
)

# A search of the trace list kept under a name (its parameters, core.trace_search.filter_params).
saved_filters = sa.Table(
    "saved_filters", metadata,
    sa.Column("id", RECORD_ID, primary_key=True, default=new_record_id),
    sa.Column("legacy_id", sa.Integer, unique=True),  # its id before 0012 (core.record_ids)
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    _created(),
    sa.UniqueConstraint("owner", "name"),
)

# How far to trust an evaluator (core.trust, docs/trust.md): its report on one account's traces it
# did not train on, as last computed, whole (the API and the viewer) and as flat figures (the SQL
# endpoint's ``trust_figures`` view). ``inputs_digest`` tells whether the facts changed since.
trust_reports = sa.Table(
    "trust_reports", metadata,
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), primary_key=True),
    sa.Column("evaluator", sa.String(128), primary_key=True),  # a release version or a model id
    sa.Column("kind", sa.String(16), nullable=False),  # "shared" or "personal"
    sa.Column("report", sa.JSON, nullable=False),
    sa.Column("inputs_digest", sa.String(64), nullable=False),
    sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
)

trust_figures = sa.Table(
    "trust_figures", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner", ID, sa.ForeignKey("accounts.id"), nullable=False),
    sa.Column("evaluator", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("metric", sa.String(64), nullable=False),
    sa.Column("slice_kind", sa.String(16), nullable=False),  # all, tool, domain, agent, bin
    sa.Column("slice", sa.String(256), nullable=False),  # "" for all
    sa.Column("value", sa.Float),
    sa.Column("low", sa.Float),  # the 95% interval
    sa.Column("high", sa.Float),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False, default=utcnow,
              server_default=NOW),
    sa.Index(None, "owner", "evaluator"),
)
