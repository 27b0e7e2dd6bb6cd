"""Patroni's strict synchronous mode losing acknowledged commits: a deterministic reproduction (issue 46, part 1).

    .venv/bin/python scripts/patroni_loss.py [--scenario restart|orphan] [--no-hold] [--attempts 3] [--keep DIR]
    SCHEDLOCK_PATRONI_BIN=/usr/bin .venv/bin/python scripts/patroni_loss.py   # another Patroni: Debian's 3.0.2

It runs the Patroni system tests' cluster (tests/support/patroni.py: etcd, three nodes, ``synchronous_mode`` +
``synchronous_mode_strict``, ttl 10, loop_wait 1, wal_sender_timeout 5s) with the harness's Patroni (the suite's,
pinned in scripts/patroni.lock; ``SCHEDLOCK_PATRONI_BIN`` names another, e.g. ``/usr/bin`` for Debian's 3.0.2 after
``apt-get install patroni``), and writes plain ``INSERT``s (``synchronous_commit=on``, autocommit, one at a time)
straight to the leader, counting a row acknowledged when its commit returned with no warning. At the end every
acknowledged row is looked for on the promoted node; printed: ``synchronous_standby_names`` (s_s_n) and the
``/sync`` key at each step, the rows acknowledged, those missing on the new leader, and the Patroni log lines that
tell the sequence. Exit status 1 when an acknowledged row is missing.

The hole: Patroni 3.0.2, started on a Postgres that already runs as primary, writes ``s_s_n = '*'`` into
postgresql.conf (postgresql/__init__.py:113-122 with config.py:842-844: strict mode, nothing chosen yet by this
process) and reloads it at once (for pg_hba.conf), while ``/sync`` still names the standby X. Under ``'*'`` any
standby's confirmation satisfies a commit, but a failover may promote only X (or the old leader). 3.0.2 never
repairs it while the standby it would pick is the one ``/sync`` names (ha.py:597, ``if set(picked) !=
set(current)``). Patroni 3.1.2 reads the running GUCs when it joins a running Postgres and detects and repairs a
``/sync`` / s_s_n mismatch; 4.0.6 also checks the actual value. Both scenarios lose nothing with 3.1.2 or 4.1.5.

``--scenario restart`` (the default), from a healthy cluster:

1. The leader's Patroni is restarted (SIGKILL, start) while its Postgres runs: s_s_n becomes ``'*'``, ``/sync``
   still names X. Postgres takes the standby in the lowest walsender slot as its synchronous one under ``'*'``;
   when that is not X, 3.0.2 moves ``/sync`` to it (safely) and the restart is repeated (``--attempts``).
2. X's walreceiver is stopped (SIGSTOP), and the leader's Patroni too: it stands for the HA loop (every second,
   later on a loaded machine) that would otherwise notice, one loop on, what follows.
3. After ``wal_sender_timeout`` the leader drops X's walsender; the other standby Y becomes the synchronous one:
   commits are acknowledged again, confirmed by Y alone, while ``/sync`` names X.
4. The leader's Postgres is SIGKILLed (every process), X's walreceiver and the leader's Patroni go on (SIGCONT).
   Patroni fails over after the crash (``primary_start_timeout: 0``) to the one standby ``/sync`` allows: X,
   which lacks what Y confirmed. With ``--no-hold`` the leader's Patroni is not stopped and its Postgres is killed
   at Y's first confirmation: a race with Patroni's next HA loop, which moves ``/sync`` off X first (then the old
   leader is restarted in place and nothing is lost).

``--scenario orphan`` is the Patroni tests' ``kill_patroni`` fault and its heal (tests/system/ha/test_patroni.py):

1. Y's Patroni is stopped (SIGSTOP: slow to point Y at a new leader, so Y goes on streaming from the old one), the
   leader's Patroni is killed (SIGKILL); its Postgres stays a primary. After ttl X is promoted; the old primary's
   commits wait for X, which no longer streams from it.
2. The leader's Patroni is started again (the heal). It reloads its Postgres with ``'*'`` before its first HA loop
   demotes it; the moment ``'*'`` is in force it is held 3 s (SIGSTOP: a first loop as late as a loaded machine
   makes it). Y confirms the commits that waited, and the next ones: acknowledged, and absent from X, the leader.

Run it alone (one Patroni cluster at a time on the machine), under ``nice -n 10`` beside other work.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness lives in tests/support

from tests.support.patroni import EVIDENCE, Node, PatroniCluster, patroni_cluster, patroni_command, poll

TABLE = "patroni_loss_probe"
#: The Patroni log lines that tell the sequence (a regular expression).
TELLING = re.compile(
    r"Assigning synchronous|Synchronous standby status|privilege temporarily|No standbys|Primary crashed|"
    r"Demoting self|promoted self|Leader key released|Changed synchronous_standby_names|Inconsistent state|"
    r"Reloading PostgreSQL|not the healthiest|acquired session lock|Lock owner: None"
)


@dataclass
class Writer:
    """One connection inserting rows one at a time; a row is acknowledged when its commit returned unwarned."""

    url: str
    acked: list[tuple[int, float]] = field(default_factory=list)  # (row, monotonic time of the acknowledgement)
    warned: list[int] = field(default_factory=list)  # commits answered with a warning (sync wait cancelled)
    failed: int = 0
    running: bool = True

    async def run(self) -> None:
        conn = await asyncpg.connect(self.url, timeout=5)
        warnings: list[str] = []
        conn.add_log_listener(lambda _c, message: warnings.append(str(message)))
        row = 0
        try:
            while self.running:
                row += 1
                warnings.clear()
                try:
                    await conn.execute(f"INSERT INTO {TABLE} (n) VALUES ($1)", row)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    self.failed += 1
                    return  # the leader died under it: that commit is not acknowledged
                if warnings:
                    self.warned.append(row)
                else:
                    self.acked.append((row, time.monotonic()))
        finally:
            with contextlib.suppress(Exception):
                conn.terminate()


def sql(node: Node, query: str) -> list[list[str]]:
    """One query on ``node``'s Postgres as the superuser (psql, a fresh connection), its rows as lists of text."""
    done = subprocess.run(
        ["psql", "-X", "-At", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", node.url, "-c", query],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{node.name}: {query}: {done.stderr.strip()}")
    return [line.split("\t") for line in done.stdout.splitlines()]


def sync_key(cluster: PatroniCluster) -> dict[str, Any] | None:
    """The ``/sync`` key as etcd holds it (the v3 JSON gateway), or None when there is none."""
    key = base64.b64encode(b"/service/schedlock/sync").decode()
    body = httpx.post(f"http://127.0.0.1:{cluster.etcd_port}/v3/kv/range", json={"key": key}, timeout=5).json()
    kvs = body.get("kvs") or []
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def replication(leader: Node) -> dict[str, str]:
    """application_name -> sync_state, as the leader's Postgres reports its walsenders."""
    return {r[0]: r[1] for r in sql(leader, "SELECT application_name, sync_state FROM pg_stat_replication")}


def ssn(leader: Node) -> str:
    return str(sql(leader, "SHOW synchronous_standby_names")[0][0])


def process_of(node: Node, what: str) -> int:
    """The pid of the node's Postgres process whose title contains ``what`` (e.g. walreceiver)."""
    for pid in node.postgres_pids():
        with contextlib.suppress(OSError):
            if what in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
    raise RuntimeError(f"no {what} on {node.name}")


def say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:6.2f} s] {text}", flush=True)


def stale_star(cluster: PatroniCluster, leader: Node, attempts: int, started: float) -> str | None:
    """Step 1: restart the leader's Patroni until its Postgres runs with '*' for 5 s (several HA loops) while /sync
    names the standby Postgres takes as synchronous. Returns that standby's name, or None if Patroni did not let
    '*' stand (what it set instead is printed)."""
    for attempt in range(1, attempts + 1):
        before = sync_key(cluster)
        say(started, f"attempt {attempt}: /sync {before}, s_s_n {ssn(leader)!r}; restarting {leader.name}'s Patroni")
        cluster.kill_patroni(leader)
        cluster.start_patroni(leader)
        seen: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "*" not in seen:
            value = ssn(leader)
            if not seen or seen[-1] != value:
                seen.append(value)
            time.sleep(0.1)
        if "*" not in seen:
            say(started, f"  s_s_n never '*' within 20 s: {seen}")
            continue
        say(started, f"  s_s_n went {seen}; watching it for 5 s (the HA loop runs every second)")
        stable_since = time.monotonic()
        while time.monotonic() - stable_since < 5:
            value = ssn(leader)
            if value != "*":
                say(started, f"  Patroni set s_s_n to {value!r} (/sync {sync_key(cluster)})")
                break
            time.sleep(0.2)
        else:
            named = (sync_key(cluster) or {}).get("sync_standby")
            states = replication(leader)
            say(started, f"  '*' stood 5 s; /sync names {named!r}; pg_stat_replication {states}")
            if named and states.get(named) == "sync":
                return str(named)
            say(started, "  the standby /sync names is not the one Postgres confirms with: again")
            poll(lambda: ssn(leader) != "*", 30, "Patroni to replace '*'")
        leader_name = cluster.leader()
        poll(lambda: cluster.leader() is not None and cluster.healthy(), 60, "a healthy cluster")
        assert leader_name == leader.name, f"the leader moved to {leader_name}"
    return None


def telling_lines(cluster: PatroniCluster, since: str) -> list[str]:
    lines = []
    for node in cluster.nodes:
        for line in (node.root / "patroni.log").read_text(errors="replace").splitlines():
            if line[:23] >= since and TELLING.search(line):
                lines.append(f"{node.name}: {line}")
    return sorted(lines, key=lambda x: x.split(": ", 1)[1][:23])


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", choices=["restart", "orphan"], default="restart", help="see the module's text")
    parser.add_argument("--attempts", type=int, default=3, help="restarts of the leader's Patroni at most (step 1)")
    parser.add_argument("--keep", help="keep every log of the cluster in this directory")
    parser.add_argument(
        "--no-hold", action="store_true", help="restart: leave the leader's Patroni running, kill at Y's first ack"
    )
    args = parser.parse_args()
    if args.keep:
        os.environ[EVIDENCE] = args.keep
    started = time.monotonic()
    patroni = patroni_command("patroni")
    version = (await asyncio.create_subprocess_exec(patroni, "--version", stdout=asyncio.subprocess.PIPE)).stdout
    assert version is not None
    say(started, f"{(await version.read()).decode().strip()}; scenario {args.scenario}; starting the cluster")
    cluster = await asyncio.to_thread(patroni_cluster, synchronous=True)
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        leader = cluster.node(await asyncio.to_thread(cluster.wait_healthy))
        await asyncio.to_thread(sql, leader, f"CREATE TABLE {TABLE} (n int PRIMARY KEY, at timestamptz DEFAULT now())")
        say(started, f"healthy: leader {leader.name}, /sync {sync_key(cluster)}, s_s_n {ssn(leader)!r}")
        if args.scenario == "restart":
            writer, mark, what = await restart(cluster, leader, args.attempts, started, hold=not args.no_hold)
        else:
            writer, mark, what = await orphan(cluster, leader, started)

        def primary() -> bool:  # Patroni's leader, its Postgres out of recovery (the old leader too, restarted)
            name = cluster.leader()
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                return name is not None and sql(cluster.node(name), "SELECT pg_is_in_recovery()") == [["f"]]
            return False

        await asyncio.to_thread(poll, primary, 120, "a leader taking writes")
        new = cluster.node(str(cluster.leader()))
        present = {int(r[0]) for r in await asyncio.to_thread(sql, new, f"SELECT n FROM {TABLE}")}
        missing = [r for r, _ in writer.acked if r not in present]
        early = [r for r, t in writer.acked if r not in present and t <= mark]
        late = [r for r, t in writer.acked if t > mark]
        say(started, f"new leader {new.name}; /sync {sync_key(cluster)}")
        print("\n".join(telling_lines(cluster, since)))
        print(
            f"\nRESULT {leader.name} -> {new.name}: {len(writer.acked)} rows acknowledged, {len(late)} of them {what}; "
            f"{len(writer.warned)} warned, {writer.failed} failed; missing on {new.name}: {len(missing)} "
            f"({missing[:5]}{'...' if len(missing) > 5 else ''}), of them acknowledged before that: {len(early)}"
        )
        return 1 if missing else 0
    finally:
        for node in cluster.nodes:  # nothing left stopped: destroy() kills what is left
            for pid in [*(p for p in [node.process.pid if node.process else None] if p), *node.postgres_pids()]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(cluster.destroy)


async def restart(
    cluster: PatroniCluster, leader: Node, attempts: int, started: float, hold: bool
) -> tuple[Writer, float, str]:
    """Steps 1-4 of the module's text. Returns the writer, when X stopped, and what the rows after that are. Without
    ``hold`` the leader's Patroni runs on, and its Postgres is killed once Y confirmed one commit: then it is a race
    with Patroni's next HA loop, which moves /sync to Y."""
    named = await asyncio.to_thread(stale_star, cluster, leader, attempts, started)
    x_name = named or (sync_key(cluster) or {}).get("sync_standby") or ""
    assert x_name, f"no standby named in /sync: {sync_key(cluster)}"
    x = cluster.node(str(x_name).split(",")[0])
    y = next(n for n in cluster.nodes if n.name not in (leader.name, x.name))
    say(started, f"X = {x.name} (named in /sync), Y = {y.name}; s_s_n {ssn(leader)!r}, {replication(leader)}")
    writer = Writer(f"postgresql://postgres@127.0.0.1:{leader.pg_port}/postgres")
    writing = asyncio.create_task(writer.run())
    await asyncio.sleep(1.0)
    assert leader.process is not None
    patroni_pid = leader.process.pid

    # Step 2: X stops confirming; the leader's Patroni is held for the window one of its HA loops leaves open anyway.
    receiver = process_of(x, "walreceiver")
    os.kill(receiver, signal.SIGSTOP)
    frozen_at = time.monotonic()
    if hold:
        os.kill(patroni_pid, signal.SIGSTOP)
    held = f" and {leader.name}'s Patroni" if hold else ""
    say(started, f"SIGSTOP {x.name}'s walreceiver ({receiver}){held}; {len(writer.acked)} acked")

    # Step 3: the walsender of X goes (wal_sender_timeout), Y confirms.
    def y_confirms() -> bool:
        confirmed = sum(1 for _, t in writer.acked if t > frozen_at + 0.5)
        return x.name not in replication(leader) and confirmed >= (20 if hold else 1)

    deadline = time.monotonic() + 30
    # The leader's walsenders are no event: polled.
    while not await asyncio.to_thread(y_confirms) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2 if hold else 0.01)
    if hold:
        value, key = ssn(leader), sync_key(cluster)
        say(started, f"s_s_n {value!r}, /sync {key}, pg_stat_replication {replication(leader)}")

    # Step 4: the leader's Postgres dies; everything stopped goes on; Patroni fails over.
    cluster.kill_postgres(leader)
    if not hold:
        value, key = "*", sync_key(cluster)
        say(started, f"killed at Y's first confirmation; /sync then {key}")
    writer.running = False
    await writing
    os.kill(receiver, signal.SIGCONT)
    if hold:
        os.kill(patroni_pid, signal.SIGCONT)
    say(started, f"SIGKILL {leader.name}'s Postgres; SIGCONT the rest; {len(writer.acked)} acked in all")
    return writer, frozen_at, f"acknowledged after {x.name} stopped (under s_s_n {value!r}, /sync {key})"


async def orphan(cluster: PatroniCluster, leader: Node, started: float) -> tuple[Writer, float, str]:
    """The Patroni tests' kill_patroni fault and its heal, with Y's Patroni slow to move Y to the new leader."""
    x = cluster.node(str((sync_key(cluster) or {}).get("sync_standby")))
    y = next(n for n in cluster.nodes if n.name not in (leader.name, x.name))
    writer = Writer(f"postgresql://postgres@127.0.0.1:{leader.pg_port}/postgres")
    writing = asyncio.create_task(writer.run())
    await asyncio.sleep(1.0)
    assert y.process is not None
    os.kill(y.process.pid, signal.SIGSTOP)  # Y goes on streaming from the old leader
    cluster.kill_patroni(leader)
    say(started, f"SIGSTOP {y.name}'s Patroni, SIGKILL {leader.name}'s Patroni; {len(writer.acked)} acked")

    def x_leads() -> bool:
        return any(m["name"] == x.name and m["role"] == "leader" and m["state"] == "running" for m in cluster.members())

    await asyncio.to_thread(poll, x_leads, 120, f"{x.name} to lead")
    led_at = time.monotonic()
    # The old leader's commits now wait (for X): once none was acknowledged for 2 s.
    while writer.acked and time.monotonic() - writer.acked[-1][1] < 2:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    say(
        started,
        f"{x.name} leads; {leader.name}'s commits wait: s_s_n {ssn(leader)!r}, {replication(leader)}, "
        f"{len(writer.acked)} acked; starting {leader.name}'s Patroni again (the test's heal)",
    )
    url = f"postgresql://postgres@127.0.0.1:{leader.pg_port}/postgres"
    watch, kick = await asyncpg.connect(url, timeout=5), await asyncpg.connect(url, timeout=5)
    await kick.execute("SET synchronous_commit TO local")  # its commits wait for nobody: WAL for Y to answer

    async def kicking() -> None:
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            while not writing.done():
                await kick.execute("SELECT pg_catalog.pg_logical_emit_message(true, 'kick', '')")
                await asyncio.sleep(0.02)

    kicker = asyncio.create_task(kicking())
    cluster.start_patroni(leader)
    assert leader.process is not None
    seen = ""
    deadline = time.monotonic() + 30
    # The restarted Patroni reloads its Postgres before its first HA loop; that loop demotes it (no leader key).
    # The moment '*' is in force the new Patroni is held 3 s: a first loop as late as a loaded machine makes it.
    while time.monotonic() < deadline and not writing.done():
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            seen = str(await watch.fetchval("SHOW synchronous_standby_names"))
        if seen == "*":
            os.kill(leader.process.pid, signal.SIGSTOP)
            break
        await asyncio.sleep(0.002)
    held = seen == "*"
    acked = len(writer.acked)
    if held:
        await asyncio.sleep(3)
        os.kill(leader.process.pid, signal.SIGCONT)
    say(
        started,
        f"{leader.name}'s new Patroni set s_s_n {seen!r}; "
        + (f"held 3 s: {len(writer.acked) - acked} acknowledged meanwhile" if held else "not held (missed)"),
    )
    await asyncio.wait({writing}, timeout=60)  # the writer ends when the old leader's Postgres goes
    writer.running = False
    await writing
    await kicker
    for conn in (watch, kick):
        conn.terminate()
    os.kill(y.process.pid, signal.SIGCONT)
    say(started, f"{leader.name}'s Postgres is down or demoted; SIGCONT {y.name}'s Patroni")
    return writer, led_at, f"acknowledged by the old leader after {x.name} was reported leading"


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
