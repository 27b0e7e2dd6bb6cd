"""What the run history costs on the hot path, printed, not asserted (docs/history.md, "Cost").

    .venv/bin/python scripts/bench_history.py [--database-url URL] [--rounds 6] [--cycles 2000] [--seconds 10]
                                              [--no-pgbench] [--no-http]

One table, migrated to head, measured with the history trigger enabled and disabled
(``ALTER TABLE ... DISABLE TRIGGER <table>_schedlock_runs``), alternating which goes first in each round so a drift
in the machine's load favours neither side:

- database, one connection: blocks of acquire + release cycles, and of refused acquires (the 409 path), through
  app.locking.store.LockStore on one pooled connection (the server's own statements, prepared), timing the wall
  clock and the CPU of the Postgres backend serving them (from /proc: the database must run on this machine). CPU
  per cycle is the figure a loaded machine disturbs least. WAL bytes per cycle are the WAL insert position's
  advance, so they are only right on a cluster of the benchmark's own (a shared one counts everybody's writes);
- pgbench (the store's acquire and release SQL, prepared): cycles at 8 clients, and refused acquires on 4 held names;
- over HTTP (wrk with the benchmark's script, as ``python -m bench`` drives it): acquire + release cycles on 1024
  names and on 4 names (contended), against one ``schedlock-server serve`` process; cycles/s, and the CPU per cycle
  of the server and of the whole Postgres cluster (right on a cluster of the benchmark's own).

The skip counter's own cost (an in-memory increment per 409) is timed on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmark's package, bench/

from app.db import migrate
from app.db.schema import qualified_name, quote_ident
from app.db.statements import close_pool, create_pool
from app.errors import LockHeld
from app.history.skips import SkipCounter
from app.locking.rows import LockRow
from app.locking.store import LockStore
from app.settings import Settings
from bench import target
from bench.database import HELP, database, default_url
from bench.loadgen import Load, run_wrk

_ENABLE = {"on": "ENABLE", "off": "DISABLE"}
#: label -> state ("on"/"off") -> [(main figure, second figure)] per round
RESULTS: dict[str, dict[str, list[tuple[float, float]]]] = {}
UNITS: dict[str, tuple[str, str]] = {}


def record(label: str, state: str, value: tuple[float, float], units: tuple[str, str]) -> None:
    RESULTS.setdefault(label, {"on": [], "off": []})[state].append(value)
    UNITS[label] = units
    print(f"# {label}, history {state}: {value[0]:,.1f} {units[0]}, {value[1]:.3f} {units[1]}", file=sys.stderr)


def backend_cpu_s(pid: int) -> float:
    """CPU seconds a Postgres backend (on this machine) has used: from the scheduler's nanoseconds where the kernel
    keeps them (/proc/<pid>/schedstat), else user + system time in clock ticks (10 ms: coarse for short blocks)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def postgres_cpu_s(postmaster: int) -> dict[int, float]:
    """CPU seconds of each process of a Postgres cluster on this machine: the postmaster and every process it
    started (backends, WAL writer, checkpointer, autovacuum workers...)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process has just ended
            continue
        pid = int(stat.parent.name)
        if int(fields[1]) == postmaster or pid == postmaster:
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def postgres_cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the cluster used between two samples: processes started meanwhile count whole; one that ended meanwhile
    is lost (its last figure is unknown), so this errs low, never negative."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


async def database_round(store: LockStore, pid: int, table: str, trigger: str, state: str, cycles: int) -> None:
    """``cycles`` acquire + release cycles, then as many refused acquires, with the trigger ``state``."""
    await store.fetch("get", f"ALTER TABLE {table} {_ENABLE[state]} TRIGGER {trigger}")
    window = timedelta(seconds=30)
    wal_sql = "SELECT pg_current_wal_insert_lsn() AS at"
    for label in ("cycle", "refused acquire"):
        wal = (await store.fetch("get", wal_sql))[0]["at"]
        cpu, start = backend_cpu_s(pid), time.perf_counter()
        for i in range(cycles):
            if label == "cycle":
                lease = await store.acquire(f"db-{i}", window, timedelta(0), "bench")
                await store.release(f"db-{i}", lease.token)
            else:
                with contextlib.suppress(LockHeld):
                    await store.acquire(f"held-{i % 4 + 1}", window, timedelta(0), "bench")
        wall, cpu = time.perf_counter() - start, backend_cpu_s(pid) - cpu
        wal = (await store.fetch("get", wal_sql))[0]["at"] - wal  # asyncpg reads pg_lsn as an int
        record(f"database, 1 connection: {label}", state, (cpu / cycles * 1e6, wall / cycles * 1e3), ("µs CPU", "ms"))
        # The whole cluster's WAL: meaningful on a cluster nobody else writes to.
        record(f"database, 1 connection: {label}, WAL", state, (float(wal) / cycles, 0.0), ("bytes", "-"))


def pgbench_scripts(store: LockStore, workdir: Path) -> dict[str, Path]:
    """The store's statements, their parameters written out (pgbench's variables are numbers: names are built in
    SQL). A name's lease hash is fixed (its md5 twice: 32 bytes), so a cycle releases what it acquired."""

    def statement(sql: str, name: str) -> str:
        h = f"decode(md5({name}) || md5({name}), 'hex')"
        for param, value in (("$1", name), ("$2", "'30 seconds'"), ("$3", "'pgbench'"), ("$4", h), ("$5", "'0'")):
            sql = sql.replace(param, value)
        return " ".join(sql.split()) + ";\n"  # pgbench reads one statement per line

    own = "('pg-' || :client_id || '-' || :n)"
    # The release's $4 (completed) first, then its hash ($2) becomes the acquire's $4.
    release = store.sql.release.replace("$4", "true").replace("$3", "$M").replace("$2", "$4")
    release = release.replace("$M", "decode(md5($1 || 'r') || md5($1 || 'r'), 'hex')")
    scripts = {
        "cycle": "\\set n random(1, 1024)\n" + statement(store.sql.acquire, own) + statement(release, own),
        "refused acquire": "\\set n random(1, 4)\n" + statement(store.sql.acquire, "('held-' || :n)"),
    }
    paths = {}
    for label, text in scripts.items():
        paths[label] = workdir / f"{label.replace(' ', '-')}.sql"
        paths[label].write_text(text)
    return paths


def pgbench(url: str, script: Path, clients: int, seconds: int) -> tuple[float, float]:
    """(transactions per second, mean latency in ms)."""
    command = ["pgbench", "-n", "-M", "prepared", "-f", str(script), "-c", str(clients), "-j", "2", "-T", str(seconds)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    tps = re.search(r"tps = ([0-9.]+)", out)
    latency = re.search(r"latency average = ([0-9.]+) ms", out)
    assert tps is not None and latency is not None, out
    return float(tps.group(1)), float(latency.group(1))


async def sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def skip_counter_ns() -> float:
    counter = SkipCounter("x")
    row = LockRow("nightly-billing", "host", datetime(2026, 1, 1), datetime(2026, 1, 1), 7, datetime(2026, 1, 1))
    n = 200_000
    return timeit.timeit(lambda: counter.count(row), number=n) / n * 1e9


def http_round(server: target.Server, url: str, table: str, state: str, seconds: int, postmaster: int) -> None:
    for label, load in (
        ("HTTP, 32 clients, 1024 names", Load("own", 32, seconds, 1024, "bench-")),
        ("HTTP, 32 clients, 4 names (contended)", Load("random", 32, seconds, 4, "bench-")),
    ):
        postgres = postgres_cpu_s(postmaster)
        with target.ProcessWatch(server.pid) as watch:
            phase = run_wrk(server.url, load)
        postgres = postgres_cpu_delta(postgres, postgres_cpu_s(postmaster))
        target.expire_bench_leases(url, table, "bench-")
        summary: dict[str, Any] = phase.summary()
        cycles = summary["cycles_per_s"] * summary["seconds"]
        record(f"{label}: cycles", state, (summary["cycles_per_s"], summary["acquire"]["p99_ms"]), ("/s", "ms p99"))
        cpu = (watch.cpu_s / cycles * 1e6, postgres / cycles * 1e6)
        record(f"{label}: CPU per cycle, server; Postgres", state, cpu, ("µs", "µs"))


async def run(args: argparse.Namespace, settings: Settings, server: target.Server | None) -> None:
    url, table = args.database_url, qualified_name(settings.table_name, settings.table_schema)
    trigger = quote_ident(f"{settings.table_name}_schedlock_runs")
    pool = await create_pool(settings.model_copy(update={"pool_min_size": 1, "pool_max_size": 1}))
    store = LockStore.over(pool, settings.table_name, settings.table_schema, 5.0, on_held=SkipCounter("x").count)
    pid = (await store.fetch("get", "SELECT pg_backend_pid() AS pid"))[0]["pid"]
    postmaster = parent_pid(pid)
    await store.fetch(
        "get",
        f"""INSERT INTO {table} (name, lock_until, locked_at, locked_by)
        SELECT 'held-' || i, 'infinity', timezone('utc', now()), 'holder' FROM generate_series(1, 4) i""",
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scripts = pgbench_scripts(store, Path(tmp))
            for round_ in range(args.rounds):
                for state in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                    await database_round(store, pid, table, trigger, state, args.cycles)
                    if args.pgbench:
                        for label, script in scripts.items():
                            tps, ms = await asyncio.to_thread(pgbench, url, script, 8, args.seconds)
                            record(f"pgbench, 8 clients: {label}", state, (tps, ms), ("/s", "ms"))
                    if server is not None:
                        await asyncio.to_thread(http_round, server, url, table, state, args.seconds, postmaster)
    finally:
        await store.fetch("get", f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")
        await close_pool(pool, 5.0)


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--database-url", default=default_url(), help=HELP)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--cycles", type=int, default=2000, help="cycles per database block")
    p.add_argument("--seconds", type=int, default=10, help="length of each pgbench and HTTP run")
    p.add_argument("--no-pgbench", dest="pgbench", action="store_false")
    p.add_argument("--no-http", dest="http", action="store_false")
    args = p.parse_args()
    with database(args.database_url) as args.database_url:
        return _run_all(args)


def _run_all(args: argparse.Namespace) -> int:
    schema = f"bench_hist_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=args.database_url, table=f"{schema}.shedlock")  # type: ignore[arg-type]
    migrate.upgrade(settings)
    server = None
    try:
        with tempfile.NamedTemporaryFile(prefix="bench-history-", suffix=".log") as log:
            if args.http:
                server = target.start_server(args.database_url, settings.table, {}, log)
            asyncio.run(run(args, settings, server))
    finally:
        if server is not None:
            target.stop_server(server)
        target.drop_schema(args.database_url, schema)
    print(f"| median of {args.rounds} rounds | history on | history off | on ÷ off |")
    print("|---|---|---|---|")
    for label, by_state in RESULTS.items():
        first, second = UNITS[label]
        on = [statistics.median(v[i] for v in by_state["on"]) for i in (0, 1)]
        off = [statistics.median(v[i] for v in by_state["off"]) for i in (0, 1)]
        cells = [f"{x[0]:,.1f} {first}; {x[1]:,.1f} {second}" for x in (on, off)]
        ratio = on[0] / off[0] if off[0] else float("nan")  # a block too short to read any CPU reads 0
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio:.3f} |")
    print(f"| skip counter: one refused acquire counted | {skip_counter_ns():.0f} ns | (none) | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
