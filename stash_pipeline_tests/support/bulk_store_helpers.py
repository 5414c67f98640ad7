"""Fill a PostgreSQL store with many users, models and traces in a few statements (generate_series):
the sensor benchmark (benchmarks/sensor_ticks.py) and the query-plan test read the same shape.

Each user owns ``traces_per_user`` traces (minimal content) and one succeeded personal model that
has scored all of them; the release has marked every trace scored. On top: a share of traces
waiting for their user's model and for the release (``pending``), queued models, Score again
requests, requests to score chosen traces and shared training requests.
"""

from __future__ import annotations

import sqlalchemy as sa

# (table, statement) in order; :users, :traces (per user), :pending (a fraction of traces),
# :queued, :asked, :requests are bound.
_FILL = [
    ("accounts", "INSERT INTO accounts (id) SELECT 'u' || g FROM generate_series(1, :users) g"),
    ("traces", """
        INSERT INTO traces (id, owner, agent, domain, metadata, tools, messages, message_count,
                            action_count, contribute, version, created_at, updated_at)
        SELECT 'u' || u || '-t' || i, 'u' || u, 'agent', 'airline', '{}', '[]', '[]', 0, 0,
               false, 1, now(), now()
        FROM generate_series(1, :users) u, generate_series(1, :traces) i"""),
    ("reward_models", """
        INSERT INTO reward_models (id, owner, name, trace_ids, base_model, epochs, max_pairs,
                                   status, metrics, checkpoint_uri, created_at, started_at,
                                   finished_at, attempt, score_generation)
        SELECT 'm' || u, 'u' || u, 'model ' || u, '[]', 'tiny', 1, 100, 'succeeded', '{}',
               'file:///m.tar.gz', now() - interval '1 day', now() - interval '1 day',
               now() - (u % 20) * interval '1 day', 1, 0
        FROM generate_series(1, :users) u"""),
    ("queued models", """
        INSERT INTO reward_models (id, owner, name, trace_ids, base_model, epochs, max_pairs,
                                   status, created_at, queued_at, attempt, score_generation)
        SELECT 'q' || u, 'u' || u, 'queued ' || u, '[]', 'tiny', 1, 100, 'queued',
               now() - u * interval '1 second', now() - u * interval '1 second', 1, 0
        FROM generate_series(1, :queued) u"""),
    ("score again", """
        UPDATE reward_models SET score_generation = 1,
               score_requested_at = now() - (id_number % 1000) * interval '1 second'
        FROM (SELECT g AS id_number FROM generate_series(1, :asked) g) asked
        WHERE reward_models.id = 'm' || asked.id_number"""),
    ("scores", """
        INSERT INTO scores (trace_id, evaluator, trace_version, raw, created_at)
        SELECT 'u' || u || '-t' || i, 'm' || u, 1, 0.5, now()
        FROM generate_series(1, :users) u, generate_series(1, :traces) i"""),
    ("releases", """
        INSERT INTO releases (version, checkpoint_uri, benchmark_report, data_snapshot,
                              created_at)
        VALUES ('r1', 'file:///r1.tar.gz', '{}', '{}', now())"""),
    ("scoring_marks", """
        INSERT INTO scoring_marks (trace_id, evaluator, trace_version, scored_at)
        SELECT 'u' || u || '-t' || i, 'r1', 1, now()
        FROM generate_series(1, :users) u, generate_series(1, :traces) i"""),
    ("pending work", """
        INSERT INTO scoring_candidates (evaluator, trace_id, trace_version, personal, queued_at)
        SELECT e.evaluator, t.id, 1, e.personal, now()
        FROM traces t
        CROSS JOIN LATERAL (VALUES ('m' || substr(t.owner, 2), true), ('r1', false))
             AS e(evaluator, personal)
        WHERE random() < :pending"""),
    ("scoring_requests", """
        INSERT INTO scoring_requests (id, owner, evaluator, traces, actions, created_at)
        SELECT gen_random_uuid()::text, 'u' || (1 + g % :users), 'm' || (1 + g % :users), '{}',
               false, now() - (g % 1000) * interval '1 second'
        FROM generate_series(1, :requests) g"""),
    ("shared_training_requests", """
        INSERT INTO shared_training_requests (created_at)
        SELECT now() FROM generate_series(1, :requests) g"""),
]


def fill(engine: sa.Engine, *, users: int, traces_per_user: int, pending: float = 0.01,
         queued: int = 1000, asked: int = 10_000, requests: int = 10_000,
         on_step=None) -> None:
    """Fill an empty, migrated PostgreSQL store; ANALYZE it so plans are those of the sizes."""
    binds = {"users": users, "traces": traces_per_user, "pending": pending,
             "queued": min(queued, users), "asked": min(asked, users), "requests": requests}
    with engine.begin() as connection:
        for name, statement in _FILL:
            text = sa.text(statement)
            connection.execute(text, {k: v for k, v in binds.items()
                                      if f":{k}" in statement})
            if on_step is not None:
                on_step(name)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(sa.text("VACUUM ANALYZE"))
