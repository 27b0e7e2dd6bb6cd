"""A fleet's run history, generated in SQL: what ``python -m bench.fleet`` measures the history's reads and retention
on (docs/history.md, "A fleet's month").

The fleet: 6,400 jobs whose schedules add up to 1,000 runs a minute (1.44 M a day): 600 every minute, 1,000 every
5 minutes, 2,400 every 15 minutes, 2,400 hourly. Names as teams give them (``billing.invoice-export-0012``), 30% of
them Java ShedLock nodes (no token name), the others schedlock callers with a token per team. Each run's start
jitters within its minute, its duration is spread over three orders of magnitude around its job's typical one, and
its outcome is ``released`` but for 1% ``expired``, 0.5% ``taken_over`` and 1% released ``completed: false``; the
runs still going at the end are ``running``. 3 in 10 runs made another node skip (the skips table). Every job is
registered with its schedule, and the lock table holds each job's last run, as the trigger would have left it.

Rows go in a day at a time (``INSERT ... SELECT`` over ``generate_series``, with the history's triggers off: a
throwaway database only), oldest first, the history's indexes built afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from app.db.schema import jobs_table, qualified_name, quote_ident, runs_table, skips_table

#: (every n minutes, jobs, cron): 600 + 1000/5 + 2400/15 + 2400/60 = 1,000 runs a minute.
CADENCES = ((1, 600, "* * * * *"), (5, 1000, "*/5 * * * *"), (15, 2400, "*/15 * * * *"), (60, 2400, "0 * * * *"))
TEAMS = [
    "billing",
    "payments",
    "reports",
    "etl",
    "search",
    "mail",
    "inventory",
    "analytics",
    "crm",
    "auth",
    "shipping",
    "pricing",
    "catalog",
    "ledger",
    "notifications",
    "fraud",
]
VERBS = [
    "export",
    "import",
    "sync",
    "rollup",
    "cleanup",
    "reindex",
    "refresh",
    "backfill",
    "compact",
    "digest",
    "reconcile",
    "archive",
]
NOUNS = ["invoice", "order", "user", "event", "ledger", "report", "session", "cache", "feed", "index", "price", "stock"]


def runs_per_minute(scale: float) -> int:
    return sum(round(jobs * scale) // every for every, jobs, _ in CADENCES)


def _names_sql(scale: float) -> str:
    """One row per job: i, name, team, every (minutes), its offset within its period, java, typical duration (ms)."""
    bounds: list[tuple[int, int, int, str]] = []
    lo = 0
    for every, all_jobs, cron in CADENCES:
        jobs = round(all_jobs * scale)
        bounds.append((lo, lo + jobs, every, cron))
        lo += jobs
    every_case = " ".join(f"WHEN i < {hi} THEN {e}" for _, hi, e, _ in bounds)
    cron_case = " ".join(f"WHEN i < {hi} THEN '{c}'" for _, hi, _, c in bounds)

    def arr(words: tuple[str, ...] | list[str]) -> str:
        return "ARRAY[" + ",".join(f"'{w}'" for w in words) + "]"

    return f"""
        SELECT i, t.team || '.' || ({arr(VERBS)})[1 + (i / 16) % {len(VERBS)}] || '-'
                 || ({arr(NOUNS)})[1 + (i / 192) % {len(NOUNS)}] || '-' || lpad(i::text, 4, '0') AS name,
               t.team, e.every, abs(hashint4(i)) % e.every AS phase, e.cron,
               abs(hashint4(i + 7)) % 10 < 3 AS java,
               (ARRAY[200, 2000, 20000, 120000])[1 + abs(hashint4(i + 11)) % 4] AS typical_ms
        FROM generate_series(0, {lo - 1}) AS i,
             LATERAL (SELECT ({arr(TEAMS)})[1 + i % {len(TEAMS)}] AS team) t,
             LATERAL (SELECT CASE {every_case} END AS every, CASE {cron_case} END AS cron) e"""


async def generate(
    conn: asyncpg.Connection, table: str, schema: str, days: int, say: Callable[[str], None], scale: float = 1.0
) -> dict[str, float]:
    """``days`` of history ending now in ``schema``'s migrated tables (empty), of ``scale`` times the fleet's jobs
    (and runs); seconds per stage."""
    import time

    runs, skips = runs_table(table, schema), skips_table(table, schema)
    locks, jobs = qualified_name(table, schema), jobs_table(table, schema)
    names = qualified_name("fleet_jobs", schema)
    timings: dict[str, float] = {}
    await conn.execute("SET session_replication_role = replica")  # no trigger: the rows are written as they are
    await conn.execute(f"CREATE UNLOGGED TABLE {names} AS {_names_sql(scale)}")
    indexes = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = ANY($2) "
        "AND indexdef NOT LIKE '%UNIQUE%'",
        schema,
        [f"{table}_runs", f"{table}_skips"],
    )
    for index in indexes:
        await conn.execute(f"DROP INDEX {qualified_name(index['indexname'], schema)}")
    await conn.execute(f"ALTER TABLE {skips} DROP CONSTRAINT IF EXISTS {quote_ident(f'{table}_skips_pkey')}")
    now = await conn.fetchval("SELECT date_trunc('minute', timezone('utc', now()))")
    t0 = time.monotonic()
    for day in range(days):
        first = (days - day) * 1440  # minutes before now
        await conn.execute(day_sql(runs, names, skips), now, first, first - 1440, days * 1440)
        say(f"day {day + 1}/{days}: {time.monotonic() - t0:.0f} s")
    timings["insert_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    await conn.execute(f"ALTER TABLE {skips} ADD PRIMARY KEY (name, fencing_token, hour)")
    for index in indexes:
        await conn.execute(index["indexdef"])
    timings["index_s"] = time.monotonic() - t0
    await conn.execute(
        f"""INSERT INTO {locks} (name, lock_until, locked_at, locked_by, fencing_token)
            SELECT DISTINCT ON (name) name, lock_until, acquired_at, locked_by, fencing_token FROM {runs}
            ORDER BY name, fencing_token DESC"""
    )
    await conn.execute(
        f"""INSERT INTO {jobs} (name, schedule, timezone, grace, created_at, updated_at, expected_since)
            SELECT name, cron, 'UTC', interval '5 minutes', $1::timestamp - make_interval(days => $2),
                   $1::timestamp - make_interval(days => $2), $1::timestamp - make_interval(days => $2)
            FROM {names}""",
        now,
        days,
    )
    seq = qualified_name(f"{table}_fencing_seq", schema)
    await conn.execute(f"SELECT setval('{seq}', (SELECT max(fencing_token) FROM {runs}))")
    await conn.execute("SET session_replication_role = DEFAULT")
    t0 = time.monotonic()
    await conn.execute(f"VACUUM (ANALYZE) {runs}, {skips}, {locks}, {jobs}")
    timings["vacuum_s"] = time.monotonic() - t0
    return timings


def day_sql(runs: str, names: str, skips: str | None = None) -> str:
    """A day of runs: minutes [now - $2, now - $3) before now ($1), of $4 in all. A run's fencing token orders it in
    time (one sequence numbers every acquisition), and its hash draws its jitter, duration, holder and outcome."""
    insert = f"""
        INSERT INTO {runs} (name, fencing_token, locked_by, token_name, acquired_at, lock_until, ended_at, outcome,
                            failed)
        SELECT r.name, r.token,
               CASE WHEN r.java THEN 'ip-10-0-' || r.h % 8 || '-' || r.h % 211
                    ELSE 'worker-' || r.h % 12 || ' [schedlock via fleet-' || r.team || ' lease '
                         || lpad(to_hex(r.h), 8, '0') || ']' END,
               CASE WHEN r.java THEN NULL ELSE 'fleet-' || r.team END,
               r.acquired_at, r.lock_until,
               CASE WHEN r.ends > $1 THEN NULL WHEN r.h % 1000 < 15 THEN r.lock_until ELSE r.ends END,
               CASE WHEN r.ends > $1 THEN 'running' WHEN r.h % 1000 < 10 THEN 'expired'
                    WHEN r.h % 1000 < 15 THEN 'taken_over' ELSE 'released' END,
               CASE WHEN r.ends <= $1 AND r.h % 1000 BETWEEN 15 AND 24 THEN true END
        FROM (
          SELECT n.name, n.team, n.java, x.token, x.h, x.acquired_at,
                 x.acquired_at + make_interval(mins => 10 * n.every) AS lock_until,
                 LEAST(x.acquired_at + n.typical_ms * exp((x.h % 1000) / 1000.0 * 4.6 - 2.3) * interval '1 ms',
                       x.acquired_at + make_interval(mins => 10 * n.every) - interval '1 second') AS ends
          FROM {names} n
          -- the minutes m (before now) in ($3, $2] this job runs at: m = phase modulo every
          CROSS JOIN LATERAL generate_series($2::int - ($2::int - n.phase) % n.every, $3::int + 1, -n.every) AS m
          CROSS JOIN LATERAL (
            SELECT (($4::bigint - m) * 10000 + n.i + 1) AS token,
                   abs(hashint8((m::bigint * 10000 + n.i))) AS h,
                   $1::timestamp - make_interval(mins => m) + (abs(hashint8(m::bigint * 10000 + n.i + 3)) % 2000)
                     * interval '1 ms' AS acquired_at) x
        ) r"""
    if skips is None:
        return insert
    # 3 in 10 runs made another node skip, 1 to 3 times: counted in the hour of the run's start.
    return f"""
        WITH run AS ({insert} RETURNING name, fencing_token, acquired_at)
        INSERT INTO {skips} (name, fencing_token, hour, skipped)
        SELECT name, fencing_token, date_trunc('hour', acquired_at), 1 + abs(hashint8(fencing_token)) % 3
        FROM run WHERE abs(hashint8(fencing_token + 1)) % 10 < 3"""
