"""What a database error that is neither an outage nor a bug means for the caller (used by app.db.statements).

- Contention: a serialization failure or a deadlock rolled the statement's transaction back, so nothing happened
  and the statement (one atomic statement, its own transaction) is sent once more; a lock timeout (only a
  statement that sets its own ``lock_timeout`` meets one: the pool pins it to 0) is the answer of that row. Either
  way the caller gets 503 with ``Retry-After``, and the database is not reported down: it answered.
- Text the database cannot store: a database whose encoding is not UTF8 refuses characters outside its own
  (LATIN1: "锁"), and SQL_ASCII counts ``VARCHAR(64)`` in bytes (40 times "é" is 80 bytes). That is the caller's 422,
  naming the field, until the operator moves to a UTF8 database (``migrate`` and ``/readyz`` say so).
- A statement Postgres cancelled (its ``statement_timeout``, or an operator's ``pg_cancel_backend``): rolled back,
  nothing was done, the connection is fine. 503 with ``Retry-After``, and the database is not reported down.
- A prepared statement the connection no longer finds: a pooler in between (PgBouncer in transaction or statement
  mode) lends each transaction another server connection; ``SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0`` is the cure.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from app.errors import DatabaseContention, InvalidRequest, RowLockTimeout, StatementCancelled, StorageUnavailable

logger = logging.getLogger("schedlock.db")

#: The statement's transaction was rolled back whole: sending it once more is safe.
RETRY_ONCE: tuple[type[BaseException], ...] = (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)
#: The statement gave up waiting for a row lock (its own lock_timeout): not retried, that row's answer is 503.
LOCK_TIMEOUT: tuple[type[BaseException], ...] = (asyncpg.LockNotAvailableError,)
#: Postgres cancelled the statement: a statement timeout (SQLSTATE 57014) or an operator's cancel.
CANCELLED: tuple[type[BaseException], ...] = (asyncpg.QueryCanceledError,)
#: A text argument the database cannot store in its encoding.
UNSTORABLE_TEXT: tuple[type[BaseException], ...] = (
    asyncpg.UntranslatableCharacterError,
    asyncpg.CharacterNotInRepertoireError,
    asyncpg.StringDataRightTruncationError,
)
#: The connection's prepared statements are not where it left them: a transaction-pooling proxy is in between.
LOST_STATEMENT: tuple[type[BaseException], ...] = (
    asyncpg.InvalidSQLStatementNameError,
    asyncpg.DuplicatePreparedStatementError,
)

#: Which request field each text argument of an operation (by position) comes from: what a refusal names.
_FIELDS: dict[str, Sequence[str | None]] = {
    "acquire": ("name", None, "holder"),
    "acquire_batch": ("name", None, "holder"),
    "force_release": ("name", None, "reason"),
}
#: The list query's text arguments are the cursor's name, the prefix and bounds derived from them; the listing of
#: every lock's runs takes a prefix, one lock's runs its name (the statement tells them apart).
_LIST_FIELD = "prefix"
_ONE_LOCK_S_RUNS = "r.name = $1"

#: Python's codec for each Postgres server encoding that has one (SQL_ASCII has none: it stores bytes).
_CODECS = {
    "LATIN1": "latin_1",
    **{f"LATIN{n}": f"iso8859_{p}" for n, p in ((2, 2), (3, 3), (4, 4), (5, 9), (6, 10), (7, 13), (8, 14), (9, 15))},
    "LATIN10": "iso8859_16",
    **{f"ISO_8859_{n}": f"iso8859_{n}" for n in (5, 6, 7, 8)},
    **{f"WIN{n}": f"cp{n}" for n in (866, 874, 1250, 1251, 1252, 1253, 1254, 1255, 1256, 1257, 1258)},
    "KOI8R": "koi8_r",
    "KOI8U": "koi8_u",
    "EUC_CN": "gb2312",
    "EUC_JP": "euc_jp",
    "EUC_KR": "euc_kr",
    "EUC_JIS_2004": "euc_jis_2004",
    "UTF8": "utf_8",
}


def contended(action: str, exc: BaseException) -> DatabaseContention:
    """The 503 for a statement that met another transaction (after its one retry, for RETRY_ONCE); a lock timeout
    is a RowLockTimeout, which code that set one can tell apart."""
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return RowLockTimeout(f"{action}: nothing was done, a row it needs is locked by another transaction; retry")
    if isinstance(exc, asyncpg.DeadlockDetectedError):
        why = "it deadlocked with another transaction, twice"
    else:
        why = "it could not be serialized with a concurrent transaction, twice"
    return DatabaseContention(f"{action}: nothing was done, {why}; retry")


def cancelled(action: str) -> StatementCancelled:
    return StatementCancelled(
        f"{action}: nothing was done, the database cancelled the statement (it ran past the statement timeout, "
        "or an operator cancelled it); retry"
    )


def unstorable(operation: str, sql: str, args: Sequence[Any], encoding: str, exc: BaseException) -> InvalidRequest:
    """The 422 for text the database (of ``encoding``) cannot store, naming the argument's field."""
    index = next((i for i, value in enumerate(args) if not _storable(value, encoding)), 0)
    if operation == "list" or (operation == "runs" and _ONE_LOCK_S_RUNS not in sql):
        field = _LIST_FIELD
    else:
        fields = _FIELDS.get(operation, ("name",))
        field = (fields[index] if index < len(fields) else None) or "name"
    if isinstance(exc, asyncpg.StringDataRightTruncationError):
        why = "too long for its column in this table"
        if encoding == "SQL_ASCII":
            why += " (the database's encoding is SQL_ASCII, which counts lengths in bytes; schedlock needs UTF8)"
    else:
        why = f"cannot be stored in this database (its encoding is {encoding}; schedlock needs a UTF8 database)"
    return InvalidRequest(f"{field}: {why}", field=field)


def _storable(value: Any, encoding: str) -> bool:
    if isinstance(value, list | tuple):
        return all(_storable(v, encoding) for v in value)
    if not isinstance(value, str) or value.isascii():  # every server encoding holds ASCII
        return True
    codec = _CODECS.get(encoding)
    if codec is None:  # SQL_ASCII, or one Python cannot check: any other character may be what failed
        return False
    try:
        value.encode(codec)
    except UnicodeEncodeError:
        return False
    return True


_lost_reported_at = [-math.inf]


def lost_statement(action: str) -> StorageUnavailable:
    """The 503 for a prepared statement a pooler lost, and (once per 30 s) the log line that says what to set."""
    now = time.monotonic()
    if now - _lost_reported_at[0] >= 30:
        _lost_reported_at[0] = now
        logger.warning(
            "a prepared statement was not found on the database connection: a pooler in transaction or statement "
            "mode (PgBouncer) is in between; set SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0 (docs/operations.md)"
        )
    return StorageUnavailable(
        f"{action}: the connection pooler lost a prepared statement; the server needs "
        "SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0 behind it"
    )
