"""The viewer's login: an API key exchanged for a session cookie, and CSRF tokens for its forms.

The cookie (HttpOnly, SameSite=Strict, Secure over HTTPS) holds the account id, an expiry and an
HMAC over both, the account's current key hash and its session epoch: it never holds the key, a
new key (`accounts key`) ends every session of the old one, Log out raises the epoch and so ends
every session of the account on the server (a saved cookie replayed afterwards is no session), and
an altered cookie is no session. Every form carries a token derived from the cookie
(``csrf_token``); a POST without the matching one is refused, and so is one whose Origin is
another site. A cookie or token of any shape (non-ASCII, Unicode digits, the wrong number of
parts) is simply no session or no match: never an error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import time

from stash_pipeline.core.errors import NotFoundError
from stash_pipeline.objects.signing import SIGNING_KEY_ENV
from stash_pipeline.store import Account, Store

COOKIE = "stash_session"
SESSION_SECONDS = 12 * 3600
MAX_COOKIE_CHARS = 1000
_EXPIRES = re.compile(r"[0-9]{1,12}")  # ASCII digits: str.isdigit() also takes "²", int() not
_MAC = re.compile(r"[0-9a-f]{64}")


def session_secret() -> bytes:
    """Derived from STASH_SIGNING_KEY when set (every API process then accepts the same cookies),
    else random per process (a restart logs everyone out)."""
    configured = os.environ.get(SIGNING_KEY_ENV)
    if configured:
        return hmac.new(configured.encode(), b"stash viewer sessions", hashlib.sha256).digest()
    return secrets.token_bytes(32)


class Sessions:
    def __init__(self, secret: bytes):
        self._secret = secret

    def __repr__(self) -> str:  # never the secret
        return "Sessions()"

    def _mac(self, *parts: str) -> str:
        message = "\x1f".join(parts).encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def issue(self, account: Account, now: float | None = None) -> str:
        """A cookie value for ``account`` (which has a key), valid SESSION_SECONDS."""
        expires = str(int((time.time() if now is None else now) + SESSION_SECONDS))
        who = base64.urlsafe_b64encode(account.id.encode("utf-8")).decode().rstrip("=")
        return f"{who}.{expires}.{self._session_mac(account, expires)}"

    def _session_mac(self, account: Account, expires: str) -> str:
        return self._mac(account.id, expires, account.api_key_hash or "",
                         str(account.session_epoch))

    def account(self, store: Store, value: str | None, now: float | None = None) -> Account | None:
        """The account of a valid, unexpired cookie value whose key is still current; else None."""
        if not value or len(value) > MAX_COOKIE_CHARS or value.count(".") != 2:
            return None
        who, expires, mac = value.split(".")
        try:
            account_id = base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode("utf-8")
        except ValueError:
            return None
        if "\x00" in account_id or not _EXPIRES.fullmatch(expires) or not _MAC.fullmatch(mac):
            return None
        if int(expires) < (time.time() if now is None else now):
            return None
        try:
            account = store.get_account(account_id)
        except NotFoundError:
            return None
        if account.api_key_hash is None:
            return None
        if not hmac.compare_digest(mac, self._session_mac(account, expires)):
            return None
        return account

    def csrf_token(self, cookie: str) -> str:
        return self._mac("csrf", cookie)

    def csrf_ok(self, cookie: str | None, token: str | None) -> bool:
        """Whether ``token`` is the cookie's; a token of any other shape is no match."""
        if not cookie or not token or not _MAC.fullmatch(token):
            return False
        return hmac.compare_digest(self.csrf_token(cookie), token)
