"""How the pool opens a connection: the settings every connection pins, and what happens behind a pooler.

The statements rely on a few session settings that a database or role default may change (``ALTER DATABASE ... SET
default_transaction_isolation = 'repeatable read'``, a DBA's ``lock_timeout``): each connection sends its own as
startup parameters, which win over those defaults. PgBouncer (1.18, Debian's) refuses a connection whose startup
packet carries parameters it does not track ("unsupported startup parameter"); the connector then connects with
the ones it passes on, and from then on only with those. Either way it reads back, once per connection, what the
session runs with, and logs once what differs from what schedlock relies on, with the statement that fixes it on
the role (the only place a transaction-pooling proxy leaves for them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from app.db.revisions import encoding_problem
from app.settings import Settings

logger = logging.getLogger("schedlock.db")

#: Startup parameters poolers pass on (PgBouncer tracks these), and what the statements rely on: "now" in UTC,
#: and string literals as written (the force-release marker '\x' is an empty bytea only with this on).
PASSED_SETTINGS = {"timezone": "UTC", "application_name": "schedlock", "standard_conforming_strings": "on"}
#: PgBouncer's refusal of a startup parameter it does not track (its messages are never translated).
_REFUSED = "unsupported startup parameter"
#: The session's values of what session_settings pins, read back on every new connection.
_CHECK = (
    "SELECT current_setting('transaction_isolation') AS default_transaction_isolation, "
    "current_setting('lock_timeout') AS lock_timeout, current_setting('statement_timeout') AS statement_timeout"
)


#: A statement waits for a row another transaction holds locked at most this share of its statement timeout: a
#: holder's commit takes milliseconds, so a wait this long is a transaction left open (a Java node's job inside
#: one, a psql session), and the statement gives up as contention (503, that row's answer), not as an outage.
LOCK_TIMEOUT_SHARE = 0.8


def session_settings(settings: Settings) -> dict[str, str]:
    """What the statements rely on that a database or role default may change, pinned on every connection:
    READ COMMITTED (an acquire that waited for a row re-checks it; under REPEATABLE READ it fails instead), the
    service's own lock timeout (not the database's: LOCK_TIMEOUT_SHARE) and statement timeout."""
    statement_ms = int(settings.db_statement_timeout * 1000)
    return {
        "default_transaction_isolation": "read committed",
        "lock_timeout": f"{max(1, int(statement_ms * LOCK_TIMEOUT_SHARE))}ms",
        "statement_timeout": f"{statement_ms}ms",
    }


class Connector:
    """Opens one connection each call, for app.db.pool.StatementPool; ``listener`` hears the server's log
    messages on each (app.db.statements uses it to spot unconfirmed commits)."""

    def __init__(self, settings: Settings, listener: Callable[[Any, Any], None]) -> None:
        self._settings = settings
        self._listener = listener
        self._wanted = session_settings(settings)
        #: Set once a pooler refused the session settings as startup parameters.
        self.behind_pooler = False
        self._reported: frozenset[str] | None = None
        self._encoding_reported = False

    async def __call__(self) -> Any:
        conn = None
        if not self.behind_pooler:
            try:
                conn = await self._connect({**PASSED_SETTINGS, **self._wanted})
            except asyncpg.ProtocolViolationError as exc:
                if _REFUSED not in str(exc):
                    raise
                self._pooler_found()
        if conn is None:
            conn = await self._connect(PASSED_SETTINGS)
        try:
            await self._check(conn)
        except BaseException:
            conn.terminate()
            raise
        conn.add_log_listener(self._listener)
        return conn

    async def _connect(self, server_settings: dict[str, str]) -> Any:
        s = self._settings
        return await asyncpg.connect(
            dsn=s.asyncpg_dsn(),
            timeout=s.db_connect_timeout,
            command_timeout=s.db_statement_timeout + 1.0,
            statement_cache_size=s.db_statement_cache_size,
            server_settings=server_settings,
        )

    def _pooler_found(self) -> None:
        self.behind_pooler = True
        advice = (
            "; if it pools by transaction or statement, set SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0"
            if self._settings.db_statement_cache_size
            else ""
        )
        logger.warning(
            "the database refused startup parameters (%s): a connection pooler (PgBouncer) is in between; connecting "
            "without them, so the role's own defaults apply%s (docs/operations.md)",
            ", ".join(self._wanted),
            advice,
        )

    async def _check(self, conn: Any) -> None:
        """Read back the session's settings; log once per set of differences. An unnamed statement, outside the
        statement cache: it must work through a transaction-pooling proxy whatever the cache size."""
        self._check_encoding(conn.get_settings().server_encoding)
        row = await (await conn.prepare(_CHECK)).fetchrow()
        wrong = frozenset(name for name, value in self._wanted.items() if not _same(name, row[name], value))
        if wrong == self._reported:
            return
        self._reported = wrong
        if wrong:
            role = getattr(conn.get_settings(), "session_authorization", None) or "<role>"
            fix = ", ".join(f"{name} = {_literal(self._wanted[name])}" for name in sorted(wrong))
            logger.warning(
                "the database session runs with %s; schedlock's statements rely on %s: set them on the role "
                "(for each: ALTER ROLE %s SET <setting> = <value>); lock requests may get 503 until then",
                ", ".join(f"{name} = {row[name]!r}" for name in sorted(wrong)),
                fix,
                role,
            )

    def _check_encoding(self, encoding: str) -> None:
        problem = encoding_problem(encoding)
        if problem is not None and not self._encoding_reported:
            self._encoding_reported = True
            logger.warning("%s; /readyz answers 503 until then", problem)


def _same(name: str, actual: str, wanted: str) -> bool:
    if name == "default_transaction_isolation":
        return actual == wanted
    return _milliseconds(actual) == _milliseconds(wanted)


def _milliseconds(value: str) -> float | None:
    """A duration setting as SHOW prints it ("0", "5s", "500ms", "1min"), in milliseconds."""
    units = {"us": 0.001, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    number = value.rstrip("abcdefghijklmnopqrstuvwxyz")
    try:
        return float(number) * units.get(value[len(number) :], 1)
    except ValueError:
        return None


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
