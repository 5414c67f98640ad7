"""Accounts and their API keys: created by an operator, shown once, stored hashed.

A key is ``stash_`` and 43 characters of a 256-bit random token; the database keeps its SHA-256
(hex). A token that random needs no slow hash: nobody can guess a key from its hash. The API finds
the account by the hash and compares the two hashes in constant time before trusting it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from typing import Any

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.validation import MAX_NAME_CHARS, check_text
from stash_pipeline.store import Account, Store

KEY_PREFIX = "stash_"
MAX_NAME_LENGTH = MAX_NAME_CHARS  # accounts.name
MAX_KEY_LENGTH = 200  # longer Authorization values are refused before hashing


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def create(store: Store, name: str, *, account_id: str | None = None,
           reward_models_enabled: bool = True) -> tuple[Account, str]:
    """A new account and its key (returned once, never stored). ``reward_models_enabled=False``
    makes an account as those that existed before the reward-model rollout (their RM routes 404)."""
    if not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise InputError(f"a name is 1 to {MAX_NAME_LENGTH} characters", field="name")
    check_text(name, "name", what="a name")
    key = new_key()
    account = store.create_account(account_id or str(uuid.uuid4()), name=name,
                                   api_key_hash=hash_key(key),
                                   reward_models_enabled=reward_models_enabled)
    return account, key


def issue_key(store: Store, account_id: str) -> str:
    """A new key for an existing account (e.g. ``local``, made by a CLI import); the old one stops
    working."""
    key = new_key()
    store.set_api_key_hash(account_id, hash_key(key))
    return key


def authenticate(store: Store, key: str | None) -> Account | None:
    """The account whose key this is, or None."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.startswith(KEY_PREFIX):
        return None
    digest = hash_key(key)
    account = store.account_by_key_hash(digest)
    if account is None or not hmac.compare_digest(account.api_key_hash or "", digest):
        return None
    return account


def view(account: Account) -> dict[str, Any]:
    return {"id": account.id, "name": account.name,
            "reward_models_enabled": account.reward_models_enabled,
            "created_at": account.created_at.isoformat(),
            "has_api_key": account.api_key_hash is not None}
