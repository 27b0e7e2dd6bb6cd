"""A primary and a streaming standby (Debian's binaries, pg_basebackup), for failover tests.

Both are throwaway PgClusters on 127.0.0.1. ``synchronous``: the primary waits for the standby to confirm every
commit (``synchronous_standby_names``, ``synchronous_commit = on``), as CloudNativePG does with
``minSyncReplicas: 1``; otherwise it replicates asynchronously, Postgres' default.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import asyncpg

from tests.support.faultproxy import FaultProxy
from tests.support.patience import START_UP
from tests.support.pgcluster import PgCluster

STANDBY_NAME = "standby1"


@dataclass
class ReplicatedPair:
    primary: PgCluster
    standby: PgCluster
    synchronous: bool
    link: FaultProxy  # the standby streams through it, so a test can cut the stream

    @property
    def url(self) -> str:
        """Both hosts, the primary wanted: what a deployment without a virtual IP or proxy in front uses."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def wait_replicated(self, timeout: float = START_UP) -> None:
        """Until the standby has replayed everything the primary has written so far."""

        async def caught_up() -> bool:
            primary = await asyncpg.connect(self.primary.url)
            standby = await asyncpg.connect(self.standby.url)
            try:
                written = await primary.fetchval("SELECT pg_current_wal_lsn()")
                return bool(await standby.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", written))
            finally:
                await primary.close()
                await standby.close()

        _poll(lambda: asyncio.run(caught_up()), timeout, "the standby to catch up")

    @contextlib.contextmanager
    def standby_stalled(self) -> Iterator[None]:
        """While inside, the WAL the primary sends is lost on the way (a partition, a standby gone silent): the
        standby receives nothing more. Synchronous commits wait for it; asynchronous ones are acknowledged all the
        same. Nothing held back is delivered later: once the primary is gone, what it sent is gone."""
        self.link.set_mode("drop_replies")
        yield

    def destroy(self) -> None:
        self.standby.destroy()
        self.link.close()
        self.primary.destroy()


def replicated_pair(*, synchronous: bool) -> ReplicatedPair:
    primary = PgCluster()
    primary.start(synchronous_commit="on", wal_level="replica", max_wal_senders="4")
    standby = PgCluster(initdb=False)
    pair = ReplicatedPair(primary, standby, synchronous, FaultProxy(primary.port))
    try:
        standby.basebackup(primary, STANDBY_NAME, stream_port=pair.link.port)
        standby.start(synchronous_commit="on", hot_standby="on")
        _poll(lambda: _replication_state(primary) is not None, START_UP, "the standby to stream")
        if synchronous:
            asyncio.run(_execute(primary, f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"))
            asyncio.run(_execute(primary, "SELECT pg_reload_conf()"))
            _poll(lambda: _replication_state(primary) == "sync", START_UP, "the standby to become synchronous")
    except BaseException:
        pair.destroy()
        raise
    return pair


def _replication_state(primary: PgCluster) -> str | None:
    """The standby's sync_state as the primary sees it (async, sync), or None while it is not streaming."""

    async def state() -> str | None:
        conn = await asyncpg.connect(primary.url)
        try:
            return await conn.fetchval(  # type: ignore[no-any-return]
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
                STANDBY_NAME,
            )
        finally:
            await conn.close()

    return asyncio.run(state())


async def _execute(cluster: PgCluster, sql: str) -> None:
    conn = await asyncpg.connect(cluster.url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _poll(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)
