"""Java ShedLock's statements, replayed verbatim (../shared/SHEDLOCK.md): JdbcTemplateLockProvider on
Postgres with usingDbTime(). Durations are bound as seconds with millisecond precision, as Java binds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NOW = "timezone('utc', CURRENT_TIMESTAMP)"


@dataclass
class JavaNode:
    pool: Any
    table: str
    hostname: str

    async def insert_or_take_over(self, name: str, lock_at_most_for_s: float) -> bool:
        t = self.table
        status = await self.pool.execute(
            f"""INSERT INTO {t}(name, lock_until, locked_at, locked_by)
            VALUES($1, {NOW} + make_interval(secs => $2), {NOW}, $3)
            ON CONFLICT (name) DO UPDATE SET
              lock_until = {NOW} + make_interval(secs => $2),
              locked_at = {NOW}, locked_by = $3
            WHERE {t.split(".")[-1]}.name = $1 AND {t.split(".")[-1]}.lock_until <= {NOW}""",
            name,
            lock_at_most_for_s,
            self.hostname,
        )
        return _changed(status)

    async def take_over(self, name: str, lock_at_most_for_s: float) -> bool:
        t = self.table
        status = await self.pool.execute(
            f"""UPDATE {t} SET lock_until = {NOW} + make_interval(secs => $2),
              locked_at = {NOW}, locked_by = $3
            WHERE {t.split(".")[-1]}.name = $1 AND {t.split(".")[-1]}.lock_until <= {NOW}""",
            name,
            lock_at_most_for_s,
            self.hostname,
        )
        return _changed(status)

    async def unlock(self, name: str, lock_at_least_for_s: float) -> bool:
        status = await self.pool.execute(
            f"""UPDATE {self.table} SET lock_until = CASE
              WHEN locked_at + make_interval(secs => $2) > {NOW}
              THEN locked_at + make_interval(secs => $2)
              ELSE {NOW} END
            WHERE name = $1 AND locked_by = $3""",
            name,
            lock_at_least_for_s,
            self.hostname,
        )
        return _changed(status)

    async def extend(self, name: str, lock_at_most_for_s: float) -> bool:
        status = await self.pool.execute(
            f"""UPDATE {self.table} SET lock_until = {NOW} + make_interval(secs => $2)
            WHERE name = $1 AND locked_by = $3 AND lock_until > {NOW}""",
            name,
            lock_at_most_for_s,
            self.hostname,
        )
        return _changed(status)

    async def row(self, name: str) -> Any:
        return await self.pool.fetchrow(
            f"SELECT name, lock_until, locked_at, locked_by, fencing_token FROM {self.table} WHERE name = $1", name
        )


def _changed(status: str) -> bool:
    # "INSERT 0 1" / "UPDATE 1": the last number is the count of rows changed.
    return int(status.split()[-1]) > 0
