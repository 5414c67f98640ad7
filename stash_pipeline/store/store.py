"""The Store: one object over the SQL database; each call is one transaction."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from stash_pipeline.core.feedback import Feedback, Review, ReviewedComparison
from stash_pipeline.core.pairs import Pair
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.core.requests import RewardModelRequest
from stash_pipeline.core.traces import Trace
from stash_pipeline.core.trust import TrustFacts
from stash_pipeline.store import (
    accounts,
    engine,
    feedback,
    imports,
    leases,
    models,
    pairs,
    releases,
    review_queue,
    saved_filters,
    scores,
    scoring_requests,
    scoring_work,
    trace_pages,
    traces,
    training_requests,
    trust,
)
from stash_pipeline.store.imports import ImportSummary
from stash_pipeline.store.locks import concurrent_write_errors
from stash_pipeline.store.models import RewardModelRecord
from stash_pipeline.store.releases import BenchmarkComparison, Release
from stash_pipeline.store.scores import ActionScore, TraceScore
from stash_pipeline.store.scoring_requests import ScoringRequest
from stash_pipeline.store.scoring_work import ScoringWork
from stash_pipeline.store.trace_pages import TraceSummary
from stash_pipeline.store.training_requests import SharedTrainingRequest


class Store:
    def __init__(self, url: str):
        self.url = engine.normalize_url(url)
        self.engine = engine.create_engine(self.url)
        self._busy_timeout_s = engine.sqlite_busy_timeout_s() \
            if self.engine.dialect.name == "sqlite" else None

    @classmethod
    def from_env(cls) -> Store:
        """``DATABASE_URL``, else SQLite at ``$STASH_HOME/stash.db`` (default ``./.stash``)."""
        return cls(engine.database_url_from_env())

    def migrate(self) -> None:
        """Upgrade the schema to the newest migration; safe to call every start, from many
        processes at once (one migrates under a lock, the others find the schema at head)."""
        with concurrent_write_errors(self._busy_timeout_s):
            engine.migrate(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """A write transaction, for callers that compose several store functions into one.

        On SQLite it holds the database's write lock from its first statement (waiting for it
        up to STASH_SQLITE_BUSY_TIMEOUT_S); a lock wait that runs out, or a PostgreSQL deadlock,
        is a ConcurrentWriteError, and nothing of the transaction is stored.
        """
        with concurrent_write_errors(self._busy_timeout_s), self.engine.begin() as connection:
            yield connection

    @contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        """A read-only transaction: one consistent view, and on SQLite no write lock taken."""
        with concurrent_write_errors(self._busy_timeout_s), self.engine.connect() as connection:
            connection.execution_options(**{engine.READ_ONLY: True})
            with connection.begin():
                yield connection

    # Traces
    def import_traces(self, records: Iterable[ImportedTrace], *,
                      on_progress: Callable[[int], None] | None = None) -> ImportSummary:
        """All or nothing: any error (bad record, ownership) rolls back the whole call."""
        with self.transaction() as c:
            return imports.import_traces(c, records, on_progress=on_progress)

    def get_trace(self, trace_id: str) -> Trace:
        return self.get_traces([trace_id])[0]

    def get_traces(self, ids: Sequence[str]) -> list[Trace]:
        with self.reading() as c:
            return traces.get_traces(c, ids)

    def list_traces(self, owner: str | None = None,
                    action_evaluator: str | None = None, *, sort: str = "created",
                    where: trace_pages.TraceFilter | None = None) -> list[TraceSummary]:
        """Every trace (or the owner's), oldest first (or in ``sort``'s order), narrowed by
        ``where``; action credit and queue state are ``action_evaluator``'s, else the latest
        release's."""
        with self.reading() as c:
            latest = releases.latest_release(c) if action_evaluator is None else None
            evaluator = action_evaluator or (latest.version if latest else None)
            return trace_pages.list_traces(c, owner, shared_evaluator=evaluator, sort=sort,
                                           where=where)

    def page_traces(self, owner: str, *, shared_evaluator: str | None,
                    model_ids: Sequence[str] | None = None, sort: str = "-created",
                    limit: int = 50, offset: int = 0,
                    where: trace_pages.TraceFilter | None = None,
                    ) -> tuple[list[TraceSummary], int]:
        """One sorted page of the owner's trace list (narrowed by ``where``) and its count."""
        with self.reading() as c:
            items = trace_pages.list_traces(c, owner, shared_evaluator=shared_evaluator,
                                            model_ids=model_ids, sort=sort, limit=limit,
                                            offset=offset, where=where)
            return items, trace_pages.count_traces(c, owner, where=where,
                                                   shared_evaluator=shared_evaluator)

    def matching_trace_ids(self, owner: str, *, where: trace_pages.TraceFilter | None,
                           shared_evaluator: str | None, limit: int | None = None) -> list[str]:
        """The ids of the owner's traces that match ``where`` (a bulk action's selection)."""
        with self.reading() as c:
            return trace_pages.matching_trace_ids(c, owner, where=where,
                                                  shared_evaluator=shared_evaluator,
                                                  limit=limit)

    def trace_facets(self, owner: str) -> dict[str, list[str]]:
        """The owner's agents, domains and tools (the filter menus)."""
        with self.reading() as c:
            return trace_pages.facets(c, owner)

    def scored_version(self, trace_id: str, evaluator: str) -> int | None:
        with self.reading() as c:
            return trace_pages.scored_version(c, trace_id, evaluator)

    def trace_times(self, trace_id: str) -> tuple[datetime, datetime] | None:
        """(created_at, updated_at), or None for no such trace."""
        with self.reading() as c:
            return trace_pages.trace_times(c, trace_id)

    def trace_ids(self, owner: str | None = None, contribute: bool | None = None) -> list[str]:
        with self.reading() as c:
            return traces.trace_ids(c, owner, contribute)

    def set_contribute(self, trace_id: str, flag: bool, owner: str) -> None:
        with self.transaction() as c:
            traces.set_contribute(c, trace_id, flag, owner)

    def set_contribute_many(self, trace_ids: Sequence[str], flag: bool, owner: str) -> int:
        """All or nothing; NotFoundError names the ids that are not the owner's traces."""
        with self.transaction() as c:
            return traces.set_contribute_many(c, trace_ids, flag, owner)

    def traces_pending_scoring(self, evaluator: str,
                               limit: int | None = None) -> list[tuple[str, int]]:
        with self.reading() as c:
            return traces.traces_pending_scoring(c, evaluator, limit)

    def owned_versions(self, ids: Sequence[str], owner: str) -> dict[str, int]:
        """The current version of each of these traces the owner has."""
        with self.reading() as c:
            return traces.owned_versions(c, ids, owner)

    def request_scoring(self, *, owner: str, evaluator: str, traces: Mapping[str, int],
                        actions: bool) -> ScoringRequest:
        with self.transaction() as c:
            return scoring_requests.request_scoring(c, owner=owner, evaluator=evaluator,
                                                    traces=traces, actions=actions)

    def scoring_requests(self, after: tuple[datetime, str] | int | None = None,
                         limit: int | None = None) -> list[ScoringRequest]:
        with self.reading() as c:
            return scoring_requests.scoring_requests(c, after, limit)

    def get_scoring_request(self, request_id: str | int) -> ScoringRequest:
        with self.reading() as c:
            return scoring_requests.get_scoring_request(c, request_id)

    # Feedback
    def feedback_for(self, trace_ids: Sequence[str]) -> list[Feedback]:
        with self.reading() as c:
            return feedback.feedback_for(c, trace_ids)

    def add_feedback(self, items: Sequence[Feedback],
                     owner: str | None = None) -> dict[str, int]:
        """One transaction; NotFoundError (nothing written) for an unknown or unowned id."""
        with self.transaction() as c:
            return feedback.add_feedback(c, list(items), owner)

    def apply_feedback(self, entries: Sequence[tuple[str, Feedback | Review]],
                       owner: str | None = None) -> dict[str, int]:
        """Feedback and reviews in one transaction; errors name the entry's label."""
        with self.transaction() as c:
            return feedback.apply_feedback(c, list(entries), owner)

    def orphaned_feedback(self, owner: str | None = None) -> list[Feedback]:
        """Feedback on actions that a reimport removed (kept, left out of pairs)."""
        with self.reading() as c:
            return feedback.orphaned_feedback(c, owner)

    def remove_feedback(self, ids: Sequence[str], owner: str | None = None) -> int:
        """All or nothing; NotFoundError for an unknown id or one naming another owner's trace."""
        with self.transaction() as c:
            return feedback.remove_feedback(c, ids, owner)

    def review_comparison(self, comparison_id: str, *, reviewer: str, status: str,
                          owner: str | None = None) -> ReviewedComparison:
        with self.transaction() as c:
            return feedback.review_comparison(c, comparison_id, reviewer=reviewer, status=status,
                                              owner=owner)

    def decide_comparison(self, comparison_id: str, *, reviewer: str, status: str,
                          owner: str | None = None, version: int | None = None
                          ) -> tuple[ReviewedComparison, int]:
        """A verdict at the comparison's review ``version`` (None: whatever it is now): the
        comparison and its new version; ReviewConflict when another change came first."""
        with self.transaction() as c:
            return feedback.decide_comparison(c, comparison_id, reviewer=reviewer,
                                              status=status, owner=owner, version=version)

    # The review queue
    def review_queue(self, scope: review_queue.QueueScope, *, limit: int, offset: int = 0,
                     ) -> tuple[list[review_queue.QueueItem], review_queue.QueueCounts]:
        """One page of the queue's items not reviewed yet, and the scope's counts."""
        with self.reading() as c:
            return (review_queue.queue_page(c, scope, limit=limit, offset=offset),
                    review_queue.queue_counts(c, scope))

    def review_yield(self, owner: str, reviewer: str) -> review_queue.ReviewYield:
        with self.reading() as c:
            return review_queue.review_yield(c, owner, reviewer)

    def set_review_status(self, owner: str, items: Sequence[tuple[str, str]],
                          status: str | None, *, reviewer: str | None,
                          versions: dict[str, int] | None = None,
                          expected: Mapping[tuple[str, str], int] | None = None
                          ) -> dict[tuple[str, str], int]:
        """Each item in ``expected`` only at that review version, else ReviewConflict and
        nothing changed; returns every item's new version."""
        with self.transaction() as c:
            return review_queue.set_status(c, owner, items, status, reviewer=reviewer,
                                           versions=versions, expected=expected)

    def assign_review(self, owner: str, items: Sequence[tuple[str, str]],
                      assignee: str | None,
                      expected: Mapping[tuple[str, str], int] | None = None
                      ) -> dict[tuple[str, str], int]:
        with self.transaction() as c:
            return review_queue.assign(c, owner, items, assignee, expected=expected)

    def review_states(self, keys: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """Each (kind, id) item's review state now: version, status, assignee, reviewer."""
        with self.reading() as c:
            return review_queue.current_states(c, keys)

    def owned_comparisons(self, ids: Sequence[str], owner: str) -> set[str]:
        with self.reading() as c:
            return review_queue.owned_comparisons(c, ids, owner)

    def comparisons(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Stored comparisons by id (their columns), for the ids that exist."""
        with self.reading() as c:
            return review_queue.comparisons(c, ids)

    # Saved filters
    def save_filter(self, owner: str, name: str,
                    params: dict[str, str]) -> saved_filters.SavedFilter:
        with self.transaction() as c:
            return saved_filters.save_filter(c, owner, name, params)

    def saved_filters(self, owner: str) -> list[saved_filters.SavedFilter]:
        with self.reading() as c:
            return saved_filters.saved_filters(c, owner)

    def saved_filter(self, owner: str, *, name: str | None = None,
                     filter_id: str | int | None = None) -> saved_filters.SavedFilter:
        with self.reading() as c:
            return saved_filters.saved_filter(c, owner, name=name, filter_id=filter_id)

    def remove_filter(self, owner: str, filter_id: str | int) -> None:
        with self.transaction() as c:
            saved_filters.remove_filter(c, owner, filter_id)

    # Accounts
    def create_account(self, account_id: str, *, api_key_hash: str | None = None,
                       reward_models_enabled: bool = True,
                       name: str | None = None) -> accounts.Account:
        """InputError (field ``id``) when the id is taken."""
        with self.transaction() as c:
            return accounts.create_account(c, account_id, api_key_hash=api_key_hash,
                                           reward_models_enabled=reward_models_enabled,
                                           name=name)

    def list_accounts(self) -> list[accounts.Account]:
        with self.reading() as c:
            return accounts.list_accounts(c)

    def set_api_key_hash(self, account_id: str, api_key_hash: str) -> None:
        with self.transaction() as c:
            accounts.set_api_key_hash(c, account_id, api_key_hash)

    def end_sessions(self, account_id: str) -> None:
        with self.transaction() as c:
            accounts.end_sessions(c, account_id)

    def get_account(self, account_id: str) -> accounts.Account:
        with self.reading() as c:
            return accounts.get_account(c, account_id)

    def account_by_key_hash(self, api_key_hash: str) -> accounts.Account | None:
        with self.reading() as c:
            return accounts.account_by_key_hash(c, api_key_hash)

    # Reward models
    def create_reward_model(self, owner: str, request: RewardModelRequest, *,
                            model_id: str | None = None) -> RewardModelRecord:
        """A queued model; InputError for a trace that is not the owner's, NotFoundError for an
        account without reward models."""
        with self.transaction() as c:
            return models.create_reward_model(c, owner, request, model_id=model_id)

    def get_reward_model(self, model_id: str, owner: str | None = None) -> RewardModelRecord:
        with self.reading() as c:
            return models.get_reward_model(c, model_id, owner)

    def list_reward_models(self, owner: str | None = None,
                           status: str | None = None) -> list[RewardModelRecord]:
        with self.reading() as c:
            return models.list_reward_models(c, owner, status)

    def models_kept_current(self, per_owner: int) -> list[RewardModelRecord]:
        with self.reading() as c:
            return models.models_kept_current(c, per_owner)

    def queued_models(self, after: tuple[datetime, str] | None,
                      limit: int) -> list[RewardModelRecord]:
        """Models queued since the cursor ``after`` and queued still, oldest first."""
        with self.reading() as c:
            return models.queued_models(c, after, limit)

    def models_with_runs(self, after: tuple[datetime, str] | None,
                         limit: int) -> list[RewardModelRecord]:
        """Queued or running models a run has taken up, queued after ``after``, oldest first."""
        with self.reading() as c:
            return models.models_with_runs(c, after, limit)

    def score_again_requested(self, after: tuple[datetime, str] | None,
                              limit: int) -> list[RewardModelRecord]:
        """Succeeded models asked to Score again after the cursor ``after``, oldest first."""
        with self.reading() as c:
            return models.score_again_requested(c, after, limit)

    @contextmanager
    def retiring_partitions(self, finished_before: datetime,
                            limit: int) -> Iterator[list[RewardModelRecord]]:
        """Up to ``limit`` models finished before ``finished_before`` whose partitions are to be
        deleted, stamped retired in a transaction that commits when the block ends (and rolls
        back if it raises): a retry of one of them waits for the block
        (models.claim_partition_retirement)."""
        with self.transaction() as c:
            yield models.claim_partition_retirement(c, finished_before, limit)

    def scoring_work(self, *, personal: bool, limit: int, evaluator: str | None = None,
                     besides: Collection[str] = ()) -> list[ScoringWork]:
        """The oldest queued scoring work (store.scoring_work): one bounded, indexed query."""
        with self.reading() as c:
            return scoring_work.pending(c, personal=personal, limit=limit, evaluator=evaluator,
                                        besides=besides)

    def queue_score_again(self, model_id: str) -> int:
        """A Score again of the model over its owner's every trace, queued in the scoring queue
        (store.scoring_work.queue_score_again); how many traces."""
        with self.transaction() as c:
            owner = models.get_reward_model(c, model_id).owner
            return scoring_work.queue_score_again(c, model_id, owner)

    def score_again_queued(self, model_id: str) -> int:
        """The owner's traces a Score again of the model still has queued."""
        with self.reading() as c:
            return scoring_work.count_requested(c, model_id)

    def scoring_queue_mark(self) -> datetime | None:
        """When the newest queued scoring work was queued: what is queued at or before it is
        the work queued now (``count_queued_until``)."""
        with self.reading() as c:
            return scoring_work.newest_queued_at(c)

    def count_queued_until(self, at: datetime) -> int:
        """The scoring work still queued that was queued at or before ``at``."""
        with self.reading() as c:
            return scoring_work.count_queued_until(c, at)

    def scoring_models(self, model_ids: Sequence[str]) -> dict[str, bool]:
        """{model id: scores actions} for those of these models still succeeded."""
        with self.reading() as c:
            return scoring_work.actions_of(c, model_ids)

    def mark_running(self, model_id: str, run_id: str | None = None) -> int:
        """Start a run of a queued model; returns the attempt number."""
        with self.transaction() as c:
            return models.mark_running(c, model_id, run_id)

    def assign_run(self, model_id: str, run_id: str) -> None:
        """A queued model's run, recorded while the model waits for the worker."""
        with self.transaction() as c:
            models.assign_run(c, model_id, run_id)

    def resume(self, model_id: str, run_id: str) -> int:
        """A failed attempt running again in a re-execution of its run; the attempt number."""
        with self.transaction() as c:
            return models.resume(c, model_id, run_id)

    def requeue(self, model_id: str) -> None:
        with self.transaction() as c:
            models.requeue(c, model_id)

    def request_score_again(self, model_id: str) -> int:
        with self.transaction() as c:
            return models.request_score_again(c, model_id)

    def replace_scores(self, model_id: str, *, scores: Sequence[TraceScore],
                       scored: Mapping[str, int],
                       action_scores: Sequence[ActionScore] = ()) -> None:
        with self.transaction() as c:
            models.replace_scores(c, model_id, scores=scores, scored=dict(scored),
                                  action_scores=action_scores)

    def mark_succeeded(self, model_id: str, *, metrics: dict[str, Any], checkpoint_uri: str,
                       scored: Mapping[str, int] | None = None,
                       scores: Sequence[TraceScore] = (),
                       action_scores: Sequence[ActionScore] = (),
                       untrained: Sequence[TraceScore] = ()) -> None:
        with self.transaction() as c:
            models.mark_succeeded(c, model_id, metrics=metrics, checkpoint_uri=checkpoint_uri,
                                  scored=dict(scored or {}), scores=scores,
                                  action_scores=action_scores, untrained=untrained)

    def mark_failed(self, model_id: str, error: str) -> None:
        with self.transaction() as c:
            models.mark_failed(c, model_id, error)

    # Pairs
    def save_pairs(self, items: Sequence[Pair], *, reward_model_id: str | None = None,
                   candidate: str | None = None) -> int:
        with self.transaction() as c:
            return pairs.save_pairs(c, items, reward_model_id=reward_model_id,
                                    candidate=candidate)

    def save_split(self, splits: Mapping[str, str], *, reward_model_id: str | None = None,
                   candidate: str | None = None) -> None:
        with self.transaction() as c:
            pairs.save_split(c, splits, reward_model_id=reward_model_id, candidate=candidate)

    def save_benchmark_pairs(self, items: Sequence[Pair], *, candidate: str) -> int:
        with self.transaction() as c:
            return pairs.save_benchmark_pairs(c, items, candidate=candidate)

    def load_pairs(self, *, reward_model_id: str | None = None, candidate: str | None = None,
                   split: str | None = None) -> list[Pair]:
        with self.reading() as c:
            return pairs.load_pairs(c, reward_model_id=reward_model_id, candidate=candidate,
                                    split=split)

    # Scores
    def save_scores(self, items: Sequence[TraceScore]) -> int:
        with self.transaction() as c:
            return scores.save_scores(c, items)

    def save_action_scores(self, evaluator: str, scored: Mapping[str, int],
                           items: Sequence[ActionScore]) -> int:
        with self.transaction() as c:
            return scores.save_action_scores(c, evaluator, scored, items)

    def save_release_scores(self, evaluator: str, items: Sequence[TraceScore],
                            scored: Mapping[str, int],
                            action_scores: Sequence[ActionScore]) -> None:
        """A release's scoring run stored together: its whole-trace scores (``items``) and, for
        the traces ``scored``, its action scores and scoring marks; no trace is stored with one
        without the other."""
        with self.transaction() as c:
            scores.save_scores(c, items)
            if scored or action_scores:
                scores.save_action_scores(c, evaluator, scored, action_scores)

    def scores_for(self, trace_id: str) -> list[TraceScore]:
        with self.reading() as c:
            return scores.scores_for(c, trace_id)

    def scores_of_evaluator(self, evaluator: str) -> list[TraceScore]:
        """Highest raw reward first; only scores of the traces' current versions."""
        with self.reading() as c:
            return scores.scores_of_evaluator(c, evaluator)

    def action_scores_for(self, trace_id: str,
                          evaluator: str | None = None) -> list[ActionScore]:
        with self.reading() as c:
            return scores.action_scores_for(c, trace_id, evaluator)

    # Releases and the benchmark
    def save_release(self, release: Release) -> Release:
        """The new incumbent, committed at once; then every trace queued for it, a batch a
        transaction (``settle_release_queue``), so an import beside it waits for one batch at
        most. A queueing cut short (the process killed) is finished by the scoring sensor."""
        with self.transaction() as c:
            saved = releases.save_release(c, release)
        self.settle_release_queue()
        return saved

    # Leases on the worker's steps
    def take_lease(self, name: str, run_id: str, holder: str,
                   alive: Callable[[leases.Lease], bool], *,
                   reuse_finished: bool = False) -> leases.Lease | None:
        with self.transaction() as c:
            return leases.take(c, name, run_id, holder, alive, reuse_finished=reuse_finished)

    def renew_lease(self, name: str, holder: str) -> bool:
        with self.transaction() as c:
            return leases.renew(c, name, holder)

    def finish_lease(self, name: str, holder: str) -> None:
        with self.transaction() as c:
            leases.finish(c, name, holder)

    def unfinished_leases(self, run_id: str) -> list[leases.Lease]:
        with self.reading() as c:
            return leases.live_leases(c, run_id)

    def settle_release_queue(self, max_batches: int | None = None) -> bool:
        """The releases' queueing worked, ``max_batches`` batches at most (all without), each in
        a transaction of its own (store.scoring_work.settle_release_queue); returns whether
        work is left."""
        with self.reading() as c:  # most ticks: nothing to do, and no write lock taken for it
            if not scoring_work.release_queue_unsettled(c):
                return False
        done = 0
        while max_batches is None or done < max_batches:
            with self.transaction() as c:
                if not scoring_work.settle_release_queue(c):
                    return False
            done += 1
        return True

    def get_release(self, version: str) -> Release:
        with self.reading() as c:
            return releases.get_release(c, version)

    def latest_release(self) -> Release | None:
        with self.reading() as c:
            return releases.latest_release(c)

    def list_releases(self) -> list[Release]:
        with self.reading() as c:
            return releases.list_releases(c)

    def save_benchmark_comparison(self, *, candidate: str, incumbent: str | None,
                                  passed: bool, report: dict[str, Any]) -> BenchmarkComparison:
        with self.transaction() as c:
            return releases.save_benchmark_comparison(c, candidate=candidate,
                                                      incumbent=incumbent, passed=passed,
                                                      report=report)

    def list_benchmark_comparisons(self,
                                   candidate: str | None = None) -> list[BenchmarkComparison]:
        with self.reading() as c:
            return releases.list_benchmark_comparisons(c, candidate)

    # How far to trust an evaluator (services.trust computes the report)
    def trust_facts(self, owner: str, evaluator: str, group_by: str | None = None
                    ) -> TrustFacts:
        """What the evaluator's report on the owner's traces reads (``store.trust``)."""
        with self.reading() as c:
            return trust.trust_facts(c, owner, evaluator, group_by)

    def stored_trust_report(self, owner: str, evaluator: str
                            ) -> tuple[dict[str, Any], str, datetime] | None:
        """(report, facts digest, computed at) as last saved, or None."""
        with self.reading() as c:
            return trust.stored_report(c, owner, evaluator)

    def save_trust_report(self, owner: str, evaluator: str, report: dict[str, Any],
                          digest: str, computed_at: datetime) -> None:
        """Replace the owner's saved report of the evaluator, whole and as the view's figures
        (another process saving the report of the same facts at the same moment wins)."""
        try:
            with self.transaction() as c:
                trust.save_report(c, owner, evaluator, report, digest, computed_at)
        except sa.exc.IntegrityError:
            pass

    def trust_owners(self, trace_ids: Iterable[str]) -> list[str]:
        """The accounts owning these traces: whose trust reports a scoring run of them changes."""
        with self.reading() as c:
            return trust.owners_of(c, trace_ids)

    def request_shared_training(self, *, base_model: str | None = None,
                                epochs: int | None = None) -> SharedTrainingRequest:
        with self.transaction() as c:
            return training_requests.request_shared_training(c, base_model=base_model,
                                                             epochs=epochs)

    def shared_training_requests(self, after: int = 0,
                                 limit: int | None = None) -> list[SharedTrainingRequest]:
        with self.reading() as c:
            return training_requests.shared_training_requests(c, after, limit)
