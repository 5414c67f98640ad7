"""The SQL store (SQLAlchemy Core; SQLite by default, PostgreSQL through psycopg 3)."""

from stash_pipeline.store.accounts import Account
from stash_pipeline.store.imports import ImportSummary
from stash_pipeline.store.models import RewardModelRecord, StatusError
from stash_pipeline.store.releases import BenchmarkComparison, Release
from stash_pipeline.store.scores import ActionScore, TraceScore
from stash_pipeline.store.store import Store
from stash_pipeline.store.trace_pages import TraceSummary

__all__ = [
    "Account", "ActionScore", "BenchmarkComparison", "ImportSummary", "Release",
    "RewardModelRecord", "StatusError", "Store", "TraceScore", "TraceSummary",
]
