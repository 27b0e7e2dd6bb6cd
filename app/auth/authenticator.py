"""Who is calling: an ``Authorization`` header becomes a Principal (a token's name, its name prefixes, read or
read-write), from a table of configured tokens, or from a JWT of a trusted issuer (app.auth.workload); the
configuration reloads when the tokens file changes. A principal with a quota is then admitted by the rate limiter
(app.auth.quotas): being known and being within one's rate are both answered here, in one call.

A static token costs one SHA-256 of the presented secret, one dict lookup by the digest's first 8 bytes and one
constant-time comparison of the whole digest (the selector/verifier pattern). The lookup's timing can only
reveal how the digest of the caller's own guess compares with stored digests, which does not help find a
secret that hashes to them. A bearer value that is no known token but has a JWT's shape goes to the issuers.

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
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from app.auth.config import AuthConfig, parse_config
from app.auth.principal import OPEN, Principal, principal_of
from app.auth.quotas import RateLimiter
from app.auth.tokens import B64TOKEN, TokenConfigError, TokenEntry, digest
from app.background import in_background
from app.errors import Unauthorized
from app.settings import Settings

if TYPE_CHECKING:
    from app.auth.workload import WorkloadIdentity

__all__ = ["OPEN", "Authenticator", "Principal", "build_table"]

logger = logging.getLogger("schedlock.auth")


def _principal(entry: TokenEntry) -> Principal:
    return principal_of(entry.name, entry.prefixes, entry)


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
        self._identity: WorkloadIdentity | None = None
        self._table: TokenTable | None = self._load() if self.enabled else None
        self.limiter = RateLimiter()

    @property
    def enabled(self) -> bool:
        """Whether tokens are required at all (a tokens file or inline tokens are configured)."""
        return self._file is not None or self._inline is not None

    @property
    def token_count(self) -> int:
        return len(self._table or {})

    @property
    def identity(self) -> WorkloadIdentity | None:
        """The trusted JWT issuers and their bindings; None when none is configured."""
        return self._identity

    def count_rate_limited(self, counter: Callable[[str], None]) -> None:
        """Call ``counter(principal name)`` for each request refused for its quota (the metrics)."""
        self.limiter.on_limited = counter

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller behind an ``Authorization`` header value, admitted by its quota; raises Unauthorized,
        RateLimited, or IssuerUnavailable (a JWT whose issuer's keys cannot be had). Never logs the secret."""
        table = self._table
        if table is None:
            return OPEN
        if not authorization:
            raise _refused("missing", "missing credentials: send 'Authorization: Bearer <token>'")
        credentials = _CREDENTIALS.fullmatch(authorization.strip(" \t"))
        if credentials is None:
            raise _refused("malformed_header", "malformed Authorization header: expected 'Bearer <token>'")
        secret = credentials.group(1)
        presented = digest(secret)
        found = table.get(presented[:_SELECTOR])
        if found is not None and hmac.compare_digest(found[0], presented):
            principal = found[1]
        elif self._identity is not None and secret.count(".") == 2:
            principal = await self._identity.principal(secret, presented)
        else:
            raise _refused("unknown_token", "unknown token")
        if principal.quota is not None:
            self.limiter.admit(principal.name or "", principal.quota)
        return principal

    def _load(self) -> TokenTable:
        config = AuthConfig()
        if self._inline is not None:
            config = config.merged(parse_config(self._inline, "SCHEDLOCK_TOKENS"))
        if self._file is not None:
            try:
                self._file_state = _stat(self._file)
                text = self._file.read_text()
            except OSError as exc:
                raise TokenConfigError(f"{self._file}: cannot read ({exc.strerror})") from None
            try:
                config = config.merged(parse_config(text, str(self._file)))
            except ValueError as exc:  # an issuer of the file and one inline with the same name
                raise TokenConfigError(f"{self._file}: {exc}") from None
        table = build_table(config.tokens)
        try:
            identity = None
            if config.issuers:
                # PyJWT and cryptography (~9 MB of a server's memory) only for a server that verifies JWTs.
                from app.auth.workload import WorkloadIdentity

                identity = WorkloadIdentity(config.issuers, config.bindings, previous=self._identity)
        except ValueError as exc:  # a PEM key that is none
            raise TokenConfigError(str(exc)) from None
        if not table and identity is None:
            logger.warning("token authentication is on but no token is configured: every lock request gets 401")
        self._identity = identity
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
        issuers = len(self._identity.keys) if self._identity is not None else 0
        logger.info("tokens reloaded from %s: %d token(s), %d issuer(s)", self._file, len(table), issuers)
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


def _refused(reason: str, message: str) -> Unauthorized:
    logger.info("bearer token refused: %s", reason, extra={"fields": {"reason": reason}})
    return Unauthorized(message)


def _stat(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
