"""Whether the database acknowledges commits that a failover could lose, checked once at start-up.

A lease is exactly as durable as the commit that granted it (docs/high-availability.md): with
``synchronous_commit`` off or ``local``, or a primary streaming to standbys of which none is synchronous, a
failover can promote a standby that never received the last grants, and their locks are then granted twice. The
server still serves (it may be a deliberate choice, and a single server without standbys loses nothing to a
failover it cannot have), but says so once, in the log, with the setting to change.
"""

from __future__ import annotations

import logging

from app.db.pool import StatementPool
from app.db.statements import fetch
from app.errors import StorageUnavailable

logger = logging.getLogger("schedlock")

# pg_stat_replication's rows are visible to every role, its sync_state only to superusers and pg_read_all_stats
# (NULL otherwise); synchronous_standby_names is readable by all. "Synchronous" is either: a standby Postgres
# reports as sync or quorum, or (details hidden) a non-empty synchronous_standby_names.
DURABILITY_SQL = """
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       pg_is_in_recovery() AS in_recovery,
       current_setting('synchronous_standby_names') <> '' AS names_synchronous,
       count(r.pid) AS standbys,
       count(r.sync_state) AS visible,
       count(r.pid) FILTER (WHERE r.sync_state IN ('sync', 'quorum')) AS synchronous
FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication r ON true
"""


def durability_problem(
    synchronous_commit: str, standbys: int, visible: int, synchronous: int, names_synchronous: bool
) -> str | None:
    """What makes an acknowledged commit losable in a failover, in words an operator can act on; None if nothing."""
    if synchronous_commit in ("off", "local"):
        return (
            f"synchronous_commit is {synchronous_commit} for schedlock's connections: a commit is acknowledged "
            "before any standby has it"
        )
    if standbys and ((visible and not synchronous) or (not visible and not names_synchronous)):
        return f"the primary streams to {standbys} standby(s), none of them synchronous"
    return None


async def warn_if_commits_may_be_lost(pool: StatementPool, pool_timeout: float) -> str | None:
    """Log a warning once if the database would lose acknowledged grants in a failover; returns the problem.
    A database that cannot answer now is logged apart (app.db.availability): nothing is said here, and a start-up
    that found it down already does not wait for it a second time."""
    if pool.availability.down:
        return None
    try:
        rows = await fetch(pool, pool_timeout, "durability check", DURABILITY_SQL)
    except StorageUnavailable:
        return None
    row = rows[0]
    if row["in_recovery"]:  # a standby: writes fail anyway, and its own standbys say nothing about the primary
        return None
    problem = durability_problem(
        row["synchronous_commit"], row["standbys"], row["visible"], row["synchronous"], row["names_synchronous"]
    )
    if problem is not None:
        logger.warning(
            "%s: a lease granted just before a failover can vanish with the primary, and its lock be granted again "
            "while the first holder runs; use synchronous replication with synchronous_commit = on "
            "(docs/high-availability.md)",
            problem,
        )
    return problem
