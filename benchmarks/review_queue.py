"""The review queue and the trace search at scale: a page costs a fixed number of statements and
is sorted in SQL, against a baseline that reads every score into Python and sorts there.

The tau2-bench runs (../shared/data/tau2-bench/runs, 514 traces) are imported again under fresh
ids until the caller owns ``--traces`` traces (and another account as many), each scored by a
release (every action) and a personal model (whole traces), with the runs' verified outcomes.
Then, ROUNDS times each: one page of the queue with its progress (services.review.queue), the
next item with its focus action, a search page (text, tool and outcome: services.traces.page),
and the baseline: the same order computed in Python (core.review_order) from every action score
and whole-trace score of the caller's, read in one query each. Prints each median in ms with
its spread, the statements one queue page runs, and last ``queue_page_ms: N``.

    .venv/bin/python benchmarks/review_queue.py [--traces 5000] [--rounds 5] \
        [--database postgresql://...] [--data DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from zlib import crc32

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stash_pipeline.core.review_order import (
    Verdicts,
    personal_verdict,
    reason,
    reason_rank,
    sort_key,
)
from stash_pipeline.core.trace_search import parse_filter
from stash_pipeline.importers import read_path
from stash_pipeline.services import review, traces
from stash_pipeline.store import ActionScore, Release, Store, TraceScore, schema

from import_throughput import with_fresh_ids

RELEASE = "20260101-000000-benchmark"
MODEL = "benchmark-model"


def build(store: Store, records: list, count: int) -> None:
    for owner in ("caller", "other"):
        made = 0
        copy = 0
        while made < count:
            batch = [replace(r, trace=replace(r.trace, owner=owner))
                     for r in (with_fresh_ids(r, f"{owner}-{copy}") for r in records)]
            batch = batch[:count - made]
            store.import_traces(batch)
            made += len(batch)
            copy += 1
    store.save_release(Release(RELEASE, "file:///nowhere", {}, {}))
    with store.transaction() as c:
        c.execute(schema.reward_models.insert().values(
            id=MODEL, owner="caller", name="m", trace_ids=[], base_model="b", epochs=1,
            max_pairs=1, status="succeeded", finished_at=schema.utcnow()))
    ids = store.trace_ids()
    for start in range(0, len(ids), 500):
        chunk = store.get_traces(ids[start:start + 500])
        store.save_action_scores(RELEASE, {t.id: t.version for t in chunk}, [
            ActionScore(a.id, t.id, t.version, RELEASE, raw=0.0,
                        credit=math.tanh(math.sin(crc32(a.id.encode()) % 1000)))
            for t in chunk for a in t.actions()])
        wave = {t.id: math.cos(crc32(t.id.encode()) % 1000) for t in chunk}
        store.save_scores([TraceScore(t.id, t.version, MODEL, raw=wave[t.id],
                                      calibrated=0.5 + 0.4 * wave[t.id])
                           for t in chunk if t.owner == "caller"])


BASELINE_ROWS: list[int] = []  # rows the last baseline read into Python


def baseline(store: Store) -> list[str]:
    """The queue's order computed in Python from every score of the caller's."""
    t, a, s, o = schema.traces, schema.action_scores, schema.scores, schema.verified_outcomes
    with store.reading() as c:
        owned = sa.select(t.c.id).where(t.c.owner == "caller")
        credits: dict[str, list[float]] = defaultdict(list)
        for trace_id, credit in c.execute(sa.select(a.c.trace_id, a.c.credit).where(
                a.c.evaluator == RELEASE, a.c.trace_id.in_(owned))):
            credits[trace_id].append(credit)
        calibrated = dict(c.execute(sa.select(s.c.trace_id, s.c.calibrated).where(
            s.c.evaluator == MODEL)).all())
        outcomes: dict[str, list[float]] = defaultdict(list)
        for trace_id, reward in c.execute(sa.select(o.c.trace_id, o.c.reward)
                                          .where(o.c.trace_id.in_(owned))):
            outcomes[trace_id].append(reward)
        ids = list(c.scalars(owned))
    BASELINE_ROWS[:] = [sum(map(len, credits.values())) + len(calibrated)
                        + sum(map(len, outcomes.values())) + len(ids)]
    verdicts = {i: Verdicts(
        shared=sum(credits[i]) / len(credits[i]) if credits[i] else None,
        personal=personal_verdict(None, calibrated.get(i)),
        outcome_succeeded=all(r >= 1 for r in outcomes[i]) if outcomes[i] else None,
        nearest=min(map(abs, credits[i])) if credits[i] else None) for i in ids}
    return sorted(ids, key=lambda i: (reason_rank(reason(verdicts[i])), sort_key(verdicts[i]),
                                      i))[:50]


def timed(rounds: int, work: Callable[[], object]) -> tuple[float, float, float]:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return (statistics.median(seconds) * 1000, min(seconds) * 1000, max(seconds) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", help="a PostgreSQL URL (default: a fresh SQLite file)")
    parser.add_argument("--data", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    records = list(read_path(args.data / "tau2-bench" / "runs", format="tau2"))
    with tempfile.TemporaryDirectory() as folder:
        store = Store(args.database or f"sqlite:///{folder}/stash.db")
        store.migrate()
        started = time.perf_counter()
        build(store, records, args.traces)
        print(f"{args.traces} traces per account, 2 accounts, {store.engine.dialect.name}; "
              f"built in {time.perf_counter() - started:.0f} s")
        scope = review.scope(store, "caller", reviewer="caller")
        statements = []

        def count(*event: object) -> None:
            statements.append(1)

        sa.event.listen(store.engine, "before_cursor_execute", count)
        page = review.queue(store, scope, limit=50)
        sa.event.remove(store.engine, "before_cursor_execute", count)
        per_page = len(statements)
        page_rows = len(page["items"]) + 1  # the items and the counts' one row
        search = parse_filter({"q": "cancel", "tool": "get_reservation_details",
                               "outcome": "failed"})
        results = {
            "queue_page": timed(args.rounds, lambda: review.queue(store, scope, limit=50)),
            "next_item": timed(args.rounds, lambda: review.next_item(store, scope)),
            "search_page": timed(args.rounds, lambda: traces.page(store, "caller", where=search)),
            "baseline_in_python": timed(args.rounds, lambda: baseline(store)),
        }
        ours = [i["id"] for i in review.queue(store, replace(scope, kinds=("trace",)),
                                              limit=50)["items"]]
        assert ours == baseline(store), "the SQL order and core.review_order's disagree"
        for name, (median, low, high) in results.items():
            print(f"{name}: {median:.0f} ms (min {low:.0f}, max {high:.0f})")
        print(f"statements_per_queue_page: {per_page}")
        print(f"rows_into_python: queue page {page_rows}, baseline {BASELINE_ROWS[0]}")
        print(f"baseline_over_queue_page: "
              f"{results['baseline_in_python'][0] / results['queue_page'][0]:.1f}")
        if args.database:
            with store.transaction() as c:
                for table in reversed(schema.metadata.sorted_tables):
                    c.execute(table.delete())
        store.dispose()
    print(f"queue_page_ms: {results['queue_page'][0]:.0f}")


if __name__ == "__main__":
    main()
