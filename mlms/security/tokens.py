"""Bearer tokens for the Evaluator API, kept hashed in the object store.

A token reads ``mlms_<id>_<secret>``: the id finds its entry (``auth/tokens/<id>.json``)
without a scan, the secret is 32 random bytes of which only the SHA-256 is stored. A salted
slow hash (bcrypt, argon2) protects guessable passwords; a 256-bit random secret cannot be
guessed, so a plain digest is enough and keeps the check to microseconds per call.

Every server of a fleet shares the store, so a token made once works on all of them. A server
caches what it read for ``CACHE_S`` seconds: a revocation takes effect within that time.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import threading
import time
from typing import Literal

from pydantic import BaseModel, Field

from mlms.errors import InvalidArgument, NotFound, StoreError, Unauthenticated
from mlms.store.base import ObjectStore

#: read: lists, records, spans; run: evaluations and predicts; models: add and remove models.
Role = Literal["read", "run", "models"]
ROLES: tuple[Role, ...] = ("read", "run", "models")
PREFIX = "auth/tokens/"
CACHE_S = 2.0
_TOKEN = re.compile(r"mlms_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


class TokenEntry(BaseModel):
    id: str
    name: str
    roles: list[Role]
    sha256: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class TokenListing(BaseModel):
    """What ``mlms token list`` shows: never the digest."""

    id: str
    name: str
    roles: list[Role]
    created_at: dt.datetime
    revoked_at: dt.datetime | None = Field(default=None)


def parse_roles(text: str) -> list[Role]:
    roles = [part.strip() for part in text.split(",") if part.strip()]
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise InvalidArgument(
            f"bad role {(bad or [text])[0]!r}: expected a comma-separated list of {ROLES}"
        )
    return sorted(set(roles))  # type: ignore[arg-type]


class Tokens:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._cache: dict[str, tuple[float, TokenEntry | None]] = {}
        self._lock = threading.Lock()

    def create(self, name: str, roles: list[Role]) -> tuple[TokenEntry, str]:
        """A new token; the secret is returned here and never again."""
        if not _NAME.fullmatch(name):
            raise InvalidArgument(
                f"bad token name {name!r}: expected 1-64 letters, digits, '_', '.', '@' or '-'"
            )
        token_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        entry = TokenEntry(
            id=token_id,
            name=name,
            roles=roles,
            sha256=_digest(secret),
            created_at=dt.datetime.now(dt.UTC),
        )
        self.store.put_bytes(_key(token_id), entry.model_dump_json().encode())
        return entry, f"mlms_{token_id}_{secret}"

    def list(self) -> list[TokenListing]:
        entries = [self._read(key.removeprefix(PREFIX).removesuffix(".json"))
                   for key in self.store.list(PREFIX) if key.endswith(".json")]  # fmt: skip
        return [
            TokenListing.model_validate(e.model_dump())
            for e in sorted(filter(None, entries), key=lambda e: e.created_at)
        ]

    def revoke(self, id_or_name: str) -> TokenListing:
        """Revoke the token with this id, or the only active one with this name."""
        active = [t for t in self.list() if t.revoked_at is None]
        matches = [t for t in active if t.id == id_or_name] or [
            t for t in active if t.name == id_or_name
        ]
        if not matches:
            raise NotFound(f"no active token with id or name {id_or_name!r} ('mlms token list')")
        if len(matches) > 1:
            raise InvalidArgument(
                f"{len(matches)} active tokens are named {id_or_name!r}: revoke one by id "
                f"({', '.join(t.id for t in matches)})"
            )
        entry = self._read(matches[0].id)
        assert entry is not None
        entry.revoked_at = dt.datetime.now(dt.UTC)
        self.store.put_bytes(_key(entry.id), entry.model_dump_json().encode())
        with self._lock:
            self._cache.pop(entry.id, None)
        return TokenListing.model_validate(entry.model_dump())

    def check(self, token: str) -> TokenEntry:
        """The entry of a valid, unrevoked token; ``Unauthenticated`` otherwise."""
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise Unauthenticated("malformed token: expected mlms_<12 hex>_<43 characters>")
        token_id, secret = match.groups()
        entry = self._cached(token_id)
        if entry is None or not hmac.compare_digest(entry.sha256, _digest(secret)):
            raise Unauthenticated(f"unknown token {token_id}")
        if not entry.active:
            raise Unauthenticated(f"token {token_id} ({entry.name}) was revoked")
        return entry

    def _cached(self, token_id: str) -> TokenEntry | None:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(token_id)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        entry = self._read(token_id)
        with self._lock:
            self._cache[token_id] = (now, entry)
        return entry

    def _read(self, token_id: str) -> TokenEntry | None:
        try:
            data = self.store.get_bytes(_key(token_id))
        except StoreError:
            if self.store.exists(_key(token_id)):
                raise
            return None
        return TokenEntry.model_validate_json(data)


def _key(token_id: str) -> str:
    return f"{PREFIX}{token_id}.json"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
