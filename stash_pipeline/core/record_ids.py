"""Ids of the records an account makes and names in URLs (Score again requests, saved filters):
random UUIDs, so that one account's ids say nothing of how many other accounts made. Records made
before migration 0012 had sequential integers, and those still name them."""

from __future__ import annotations

import re
import uuid

from stash_pipeline.core.errors import InputError

# A record made before migration 0012: its integer id (a positive 32-bit integer, as PostgreSQL's
# ``integer`` column held it).
MAX_LEGACY_ID = 2**31 - 1
_LEGACY = re.compile(r"[1-9][0-9]{0,9}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                   r"[0-9a-fA-F]{12}")


def new_record_id() -> str:
    """A fresh id: a random UUID in its canonical text (lowercase, with hyphens)."""
    return str(uuid.uuid4())


def parse_record_id(value: str | int, *, field: str, what: str) -> str | int:
    """The record ``value`` names: its canonical UUID text, or the integer id of a record made
    before 0012. InputError (naming ``field``) for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LEGACY_ID:
        return value
    text = value if isinstance(value, str) else ""
    if _UUID.fullmatch(text):
        return str(uuid.UUID(text))
    if _LEGACY.fullmatch(text) and int(text) <= MAX_LEGACY_ID:
        return int(text)
    raise InputError(f"{what} id is a UUID (or, for one made before UUIDs, a positive 32-bit "
                     f"integer), got {str(value)[:60]!r}", field=field)
