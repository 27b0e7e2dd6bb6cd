"""Reading the run history (docs/history.md): a lock's runs, all runs with filters, and skips per hour.

The runs are written by the lock table's trigger (migration 0002), never here. A run the table still calls
``running`` whose ``lock_until`` has passed is reported as ``expired`` at its ``lock_until``: nothing writes when a
lease simply runs out, so that outcome is judged when read, with the database's clock like everything else.

Pages are newest first: a lock's runs by fencing token (its acquisitions in order), every lock's runs by acquisition
time, then token (one sequence numbers every acquisition, so the token breaks ties). Each order is an index of the
runs table, and the keyset of its pages. The query text is static per combination of filters, as for the lock list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db.params import Params, name_filters
from app.db.runner import Fetcher
from app.db.schema import runs_table, skips_table
from app.locking.rows import NOW

#: Every outcome a run can have, as the API reports it.
OUTCOMES = ("running", "released", "expired", "taken_over", "force_released")

_LAPSED = f"(r.outcome = 'running' AND r.lock_until <= {NOW})"


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    fencing_token: int
    locked_by: str
    token_name: str | None
    acquired_at: datetime
    lock_until: datetime
    ended_at: datetime | None
    outcome: str
    skipped: int
    forced_by: str | None
    force_reason: str | None


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[Run]
    has_more: bool
    db_time: datetime


@dataclass(frozen=True, slots=True)
class SkipHour:
    hour: datetime
    skipped: int


class History:
    """The history tables beside a lock table, read with ``statements``."""

    def __init__(self, statements: Fetcher, table: str, schema: str | None) -> None:
        self._statements = statements
        self.runs_table = runs_table(table, schema)
        self.skips_table = skips_table(table, schema)

    def _select(self, where: str) -> str:
        """The run columns (outcome as judged now) of ``r``, the runs table, filtered by ``where``."""
        return f"""
            SELECT r.name, r.fencing_token, r.locked_by, r.token_name, r.acquired_at, r.lock_until,
              CASE WHEN {_LAPSED} THEN r.lock_until ELSE r.ended_at END AS ended_at,
              CASE WHEN {_LAPSED} THEN 'expired' ELSE r.outcome END AS outcome,
              (SELECT COALESCE(sum(s.skipped), 0) FROM {self.skips_table} s
                WHERE s.name = r.name AND s.fencing_token = r.fencing_token) AS skipped,
              r.forced_by, r.force_reason
            FROM {self.runs_table} r WHERE {where}"""

    async def run(self, name: str, fencing_token: int) -> Run | None:
        """One run of ``name`` by its fencing token."""
        rows = await self._statements.fetch(
            "runs", self._select("r.name = $1 AND r.fencing_token = $2"), name, fencing_token
        )
        return _run(rows[0]) if rows else None

    async def lock_page(self, name: str, *, limit: int, before: int | None = None) -> RunPage:
        """The runs of ``name``, newest first, older than fencing token ``before``."""
        where = "r.name = $1"
        args: list[Any] = [name]
        if before is not None:
            where += " AND r.fencing_token < $2"
            args.append(before)
        return await self._page(where, "fencing_token DESC", args, limit)

    async def page(
        self,
        *,
        limit: int,
        before: tuple[datetime, int] | None = None,
        prefix: str | None = None,
        scope: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        ended: bool | None = None,
    ) -> RunPage:
        """Runs of every lock, newest first, acquired before ``before`` (acquired_at, fencing token). ``prefix``:
        names starting with it; ``scope``: only names starting with one of these (a token's prefixes; None: all);
        ``since`` and ``until``: acquired in [since, until) (naive UTC); ``ended``: only ended (True) or only
        running (False) runs."""
        arg = Params()
        where = name_filters("r.name", arg, prefix=prefix, scope=scope)
        if since is not None:
            where.append(f"r.acquired_at >= {arg(since)}")
        if until is not None:
            where.append(f"r.acquired_at < {arg(until)}")
        if ended is not None:
            running = f"(r.outcome = 'running' AND r.lock_until > {NOW})"
            where.append(f"NOT {running}" if ended else running)
        if before is not None:
            where.append(f"(r.acquired_at, r.fencing_token) < ({arg(before[0])}, {arg(before[1])})")
        order = "acquired_at DESC, fencing_token DESC"
        return await self._page(" AND ".join(where) or "true", order, arg.values, limit)

    async def _page(self, where: str, order: str, args: list[Any], limit: int) -> RunPage:
        """Runs matching ``where`` (over ``r``, parameters ``args``) in ``order``: one more than ``limit`` tells
        whether a next page exists. One round trip even for an empty page: the clock comes from a one-row
        relation the runs are joined to."""
        runs = f"{self._select(where)} ORDER BY {_qualified(order, 'r')} LIMIT ${len(args) + 1}"
        sql = (
            f"SELECT t.db_time, p.* FROM (SELECT {NOW} AS db_time) t LEFT JOIN LATERAL ({runs}) p ON true "
            f"ORDER BY {_qualified(order, 'p')}"
        )
        rows = await self._statements.fetch("runs", sql, *args, limit + 1)
        found = [_run(r) for r in rows if r["fencing_token"] is not None]
        return RunPage(found[:limit], len(found) > limit, rows[0]["db_time"])

    async def skips(self, name: str, hours: int) -> tuple[list[SkipHour], datetime]:
        """Skipped attempts of ``name`` per hour over the last ``hours`` hours (the current one included), newest
        first, and the database's now."""
        sql = f"""
            SELECT t.db_time, s.hour, s.skipped FROM (SELECT {NOW} AS db_time) t LEFT JOIN LATERAL (
              SELECT hour, sum(skipped) AS skipped FROM {self.skips_table}
              WHERE name = $1 AND hour > t.db_time - make_interval(hours => $2)
              GROUP BY hour) s ON true
            ORDER BY s.hour DESC"""
        rows = await self._statements.fetch("skips", sql, name, hours)
        found = [SkipHour(r["hour"], int(r["skipped"])) for r in rows if r["hour"] is not None]
        return found, rows[0]["db_time"]


def _qualified(order: str, alias: str) -> str:
    return ", ".join(f"{alias}.{term.strip()}" for term in order.split(","))


def _run(record: Any) -> Run:
    return Run(
        record["name"],
        record["fencing_token"],
        record["locked_by"],
        record["token_name"],
        record["acquired_at"],
        record["lock_until"],
        record["ended_at"],
        record["outcome"],
        int(record["skipped"]),
        record["forced_by"],
        record["force_reason"],
    )
