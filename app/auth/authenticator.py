"""Who is calling: an ``Authorization`` header becomes a Principal (a token's name, its name prefixes, read or
read-write), from a table of configured tokens that reloads when the tokens file changes.

A request costs one SHA-256 of the presented secret, one dict lookup by the digest's first 8 bytes and one
constant-time comparison of the whole digest (the selector/verifier pattern). The lookup's timing can only
reveal how the digest of the caller's own guess compares with stored digests, which does not help find a
secret that hashes to them.

Without any token configured the service is open (every caller may do everything); ``app.auth.exposure`` keeps
that to loopback addresses unless explicitly allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from app.auth.tokens import ALL_NAMES, B64TOKEN, TokenConfigError, TokenEntry, digest, parse_tokens
from app.background import in_background
from app.errors import Forbidden, Unauthorized
from app.settings import Settings

logger = logging.getLogger("schedlock.auth")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name and what it may do. ``name`` None means the server has no tokens."""

    name: str | None
    prefixes: tuple[str, ...] | None  # None: every name
    can_write: bool
    is_admin: bool = False  # may force-release (within its prefixes)

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

    def require_admin(self, lock_name: str) -> None:
        """Raise Forbidden unless this caller may force-release ``lock_name``."""
        self.require(lock_name, write=True)
        if not self.is_admin:
            raise Forbidden(f"token {self.name!r} is not an admin token; force-release needs one", name=lock_name)


#: The caller when the server runs without tokens.
OPEN = Principal(name=None, prefixes=None, can_write=True, is_admin=True)


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
    return Principal(name=entry.name, prefixes=prefixes, can_write=entry.access == "read-write", is_admin=entry.admin)


_SELECTOR = 8
#: RFC 6750 ``credentials = "Bearer" 1*SP b64token``, the scheme case-insensitive (RFC 9110). Nothing else is
#: trimmed than the field's own optional whitespace (SP, HTAB): str.strip() would also drop U+00A0 or U+0085.
_CREDENTIALS = re.compile(rf"[Bb][Ee][Aa][Rr][Ee][Rr] +({B64TOKEN.pattern})", re.ASCII)

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

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller behind an ``Authorization`` header value; raises Unauthorized. Never logs the secret."""
        table = self._table
        if table is None:
            return OPEN
        if not authorization:
            raise Unauthorized("missing credentials: send 'Authorization: Bearer <token>'")
        credentials = _CREDENTIALS.fullmatch(authorization.strip(" \t"))
        if credentials is None:
            raise Unauthorized("malformed Authorization header: expected 'Bearer <token>'")
        presented = digest(credentials.group(1))
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

        async with in_background(poll(), "schedlock-tokens-reload"):
            yield


def _stat(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
