"""API tokens: who may touch which lock names, and whether they may write.

The configuration lists tokens by the SHA-256 of their secret, never the secret, so the file is not itself a
credential (it can sit in a ConfigMap or a repository). A fast hash is enough because the secrets are random
256-bit strings (``schedlock-server new-token``): slow hashes (bcrypt, argon2) exist to make guessing
*low-entropy passwords* expensive, and nobody enumerates 2**256 candidates however cheap each one is. A slow
hash would only cost every request milliseconds. ``hash-token`` refuses short secrets for that reason.

A request costs one SHA-256 of the presented secret, one dict lookup by the digest's first 8 bytes and one
constant-time comparison of the whole digest (the selector/verifier pattern). The lookup's timing can only
reveal how the digest of the caller's own guess compares with stored digests, which does not help find a
secret that hashes to them.

Without any token configured the service is open (every caller may do everything); ``app.exposure`` keeps
that to loopback addresses unless explicitly allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import tomllib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from app.errors import Forbidden, Unauthorized
from app.models import NAME_MAX
from app.settings import Settings

logger = logging.getLogger("schedlock.auth")

ALL_NAMES = "*"
_BAD_PREFIX_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f/]")
#: Secrets shorter than this are refused by ``hash-token``: a fast hash is only safe for high-entropy secrets.
MIN_SECRET_LENGTH = 32


class TokenConfigError(ValueError):
    """The token configuration cannot be used; the message says where and why (never a secret)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name and what it may do. ``name`` None means the server has no tokens."""

    name: str | None
    prefixes: tuple[str, ...] | None  # None: every name
    can_write: bool

    def may_use(self, lock_name: str) -> bool:
        return self.prefixes is None or lock_name.startswith(self.prefixes)

    def require(self, lock_name: str, *, write: bool) -> None:
        """Raise Forbidden unless this caller may read (or write) ``lock_name``."""
        if not self.may_use(lock_name):
            allowed = ", ".join(repr(p) for p in self.prefixes or ())
            raise Forbidden(
                f"token {self.name!r} may not use lock {lock_name!r}; its names start with {allowed}",
                name=lock_name,
            )
        if write and not self.can_write:
            raise Forbidden(f"token {self.name!r} is read-only", name=lock_name)


#: The caller when the server runs without tokens.
OPEN = Principal(name=None, prefixes=None, can_write=True)

TokenName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]


class TokenEntry(BaseModel):
    """One ``[[tokens]]`` entry of the configuration (see README, "Authentication")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TokenName = Field(description="Recorded in locked_by; letters, digits, . _ : @ -")
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]
    prefixes: list[str] = Field(min_length=1)
    access: Literal["read", "read-write"]

    @field_validator("prefixes")
    @classmethod
    def _check_prefixes(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            if prefix == ALL_NAMES:
                continue
            if not prefix:
                raise ValueError('an empty prefix is not allowed; write "*" for every name')
            if prefix.endswith("*"):
                raise ValueError(f'prefixes are literal, not globs: write {prefix.rstrip("*")!r}, or "*" alone')
            if len(prefix) > NAME_MAX or _BAD_PREFIX_CHARS.search(prefix):
                raise ValueError(f"{prefix!r} can never match a lock name (1-64 characters, no control chars, no /)")
        return prefixes


class _TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[TokenEntry] = Field(default_factory=list)


def _principal(entry: TokenEntry) -> Principal:
    if ALL_NAMES in entry.prefixes:
        prefixes = None
    else:
        # Drop prefixes another one already covers ("billing." covers "billing.eu."): fewer ranges in SQL.
        ordered = sorted(set(entry.prefixes))
        kept: list[str] = []
        for prefix in ordered:
            if not any(prefix.startswith(k) for k in kept):
                kept.append(prefix)
        prefixes = tuple(kept)
    return Principal(name=entry.name, prefixes=prefixes, can_write=entry.access == "read-write")


def parse_tokens(text: str, source: str) -> list[TokenEntry]:
    """Parse one configuration text (JSON if it starts with '{', TOML otherwise)."""
    try:
        raw = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TokenConfigError(f"{source}: not valid JSON or TOML ({exc})") from None
    try:
        return _TokenFile.model_validate(raw).tokens
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors(include_input=False)
        )
        raise TokenConfigError(f"{source}: {problems}") from None


_SELECTOR = 8

#: First bytes of the digest -> (whole digest, principal).
TokenTable = dict[bytes, tuple[bytes, Principal]]


def build_table(entries: Iterable[TokenEntry]) -> TokenTable:
    """The lookup table; token names and secrets must be unique."""
    table: TokenTable = {}
    names: set[str] = set()
    for entry in entries:
        full = bytes.fromhex(entry.sha256)
        if entry.name in names:
            raise TokenConfigError(f"token name {entry.name!r} is configured twice")
        if full[:_SELECTOR] in table:
            other = table[full[:_SELECTOR]][1].name
            raise TokenConfigError(f"tokens {other!r} and {entry.name!r} have the same secret")
        names.add(entry.name)
        table[full[:_SELECTOR]] = (full, _principal(entry))
    return table


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def hash_secret(secret: str) -> str:
    """What goes into the configuration's ``sha256`` field for this secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Authenticator:
    """Turns an ``Authorization`` header into a Principal. Holds the current token table; reloads the file."""

    def __init__(self, settings: Settings) -> None:
        self._file = settings.tokens_file
        self._inline = settings.tokens
        self._interval = settings.tokens_reload_interval
        self._file_state: tuple[int, int, int] | None = None
        self._table: TokenTable | None = self._load() if self.enabled else None

    @property
    def enabled(self) -> bool:
        """Whether tokens are required at all (a tokens file or inline tokens are configured)."""
        return self._file is not None or self._inline is not None

    @property
    def token_count(self) -> int:
        return len(self._table or {})

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller behind an ``Authorization`` header value; raises Unauthorized. Never logs the secret."""
        table = self._table
        if table is None:
            return OPEN
        if not authorization:
            raise Unauthorized("missing credentials: send 'Authorization: Bearer <token>'")
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
        presented = digest(secret)
        found = table.get(presented[:_SELECTOR])
        if found is None or not hmac.compare_digest(found[0], presented):
            raise Unauthorized("unknown token")
        return found[1]

    def _load(self) -> TokenTable:
        entries: list[TokenEntry] = []
        if self._inline is not None:
            entries += parse_tokens(self._inline, "SCHEDLOCK_TOKENS")
        if self._file is not None:
            try:
                self._file_state = _stat(self._file)
                text = self._file.read_text()
            except OSError as exc:
                raise TokenConfigError(f"{self._file}: cannot read ({exc.strerror})") from None
            entries += parse_tokens(text, str(self._file))
        table = build_table(entries)
        if not table:
            logger.warning("token authentication is on but no token is configured: every lock request gets 401")
        return table

    def reload_if_changed(self) -> bool:
        """Reload the tokens file if it changed on disk. A broken file keeps the previous tokens (logged)."""
        if self._file is None:
            return False
        try:
            state = _stat(self._file)
        except OSError as exc:
            logger.error("tokens file %s unreadable (%s); keeping the previous tokens", self._file, exc.strerror)
            return False
        if state == self._file_state:
            return False
        try:
            table = self._load()
        except TokenConfigError as exc:
            self._file_state = state  # report a broken file once, not every interval
            logger.error("tokens file not reloaded, keeping the previous tokens: %s", exc)
            return False
        self._table = table
        logger.info("tokens reloaded from %s: %d token(s)", self._file, len(table))
        return True

    @contextlib.asynccontextmanager
    async def reloading(self) -> AsyncIterator[None]:
        """While entered, poll the tokens file for changes (mtime, size, inode: a Kubernetes Secret swap too)."""
        if self._file is None or self._interval <= 0:
            yield
            return

        async def poll() -> None:
            while True:
                await asyncio.sleep(self._interval)
                self.reload_if_changed()

        task = asyncio.create_task(poll(), name="schedlock-tokens-reload")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _stat(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
