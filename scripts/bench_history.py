"""What the run history costs on the hot path, printed, not asserted (docs/history.md, "Cost").

    .venv/bin/python scripts/bench_history.py [--database-url URL] [--seconds 10] [--rounds 3] [--no-http]

One table, migrated to head, measured with the history trigger enabled and disabled
(``ALTER TABLE ... DISABLE TRIGGER <table>_schedlock_runs``), alternating which goes first in each round so a drift
in the machine's load favours neither:

- database only (pgbench, prepared statements, schedlock's own acquire and release SQL from app.locking.store):
  an uncontended acquire + release cycle at 1 client (latency) and 8 clients (throughput), and contended acquires
  (4 held names: every acquire is refused, the 409 path);
- over HTTP (wrk with the benchmark's script, as ``python -m bench`` drives it): acquire + release cycles on 1024
  names and on 4 names (contended), against one ``schedlock-server serve`` process.

The skip counter's own cost (an in-memory increment per 409) is timed separately.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import timeit
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmark's package, bench/

from app.db import migrate
from app.db.schema import qualified_name, quote_ident, skips_table
from app.locking.rows import LockRow
from app.locking.skips import SkipCounter
from app.locking.store import LockStore
from app.settings import Settings
from bench import target
from bench.loadgen import Load, run_wrk

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def pgbench_scripts(store: LockStore, workdir: Path) -> dict[str, Path]:
    """The store's statements, their parameters written out (pgbench's variables are numbers: names are built in
    SQL). A name's lease hash is fixed (its md5 twice: 32 bytes), so a cycle releases what it acquired."""

    def statement(sql: str, name: str) -> str:
        h = f"decode(md5({name}) || md5({name}), 'hex')"
        for param, value in (("$1", name), ("$2", "'30 seconds'"), ("$3", "'pgbench'"), ("$4", h), ("$5", "'0'")):
            sql = sql.replace(param, value)
        return " ".join(sql.split()) + ";\n"  # pgbench reads one statement per line

    own = "('pg-' || :client_id || '-' || :n)"
    release = store._release_sql.replace("$3", "$M").replace("$2", "$4")  # the hash is the acquire's $4
    release = release.replace("$M", "decode(md5($1 || 'r') || md5($1 || 'r'), 'hex')")
    scripts = {
        "cycle": "\\set n random(1, 1024)\n" + statement(store._acquire_sql, own) + statement(release, own),
        "contended": "\\set n random(1, 4)\n" + statement(store._acquire_sql, "('held-' || :n)"),
    }
    paths = {}
    for label, text in scripts.items():
        paths[label] = workdir / f"{label}.sql"
        paths[label].write_text(text)
    return paths


def pgbench(url: str, script: Path, clients: int, seconds: int) -> tuple[float, float]:
    """(transactions per second, mean latency in ms)."""
    out = subprocess.run(
        [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-f",
            str(script),
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(seconds),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tps = float(re.search(r"tps = ([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    latency = float(re.search(r"latency average = ([0-9.]+) ms", out).group(1))  # type: ignore[union-attr]
    return tps, latency


async def sql(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def skip_counter_ns() -> float:
    counter = SkipCounter(skips_table("t", None))
    row = LockRow("nightly-billing", "host", datetime(2026, 1, 1), datetime(2026, 1, 1), 7, datetime(2026, 1, 1))
    n = 200_000
    return timeit.timeit(lambda: counter.count(row), number=n) / n * 1e9


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=DEFAULT_URL)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-http", dest="http", action="store_false")
    args = p.parse_args()
    url, schema = args.database_url, f"bench_hist_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=url, table=f"{schema}.shedlock")  # type: ignore[arg-type]
    migrate.upgrade(settings)
    table = qualified_name("shedlock", schema)
    trigger = quote_ident("shedlock_schedlock_runs")
    store = LockStore(None, "shedlock", schema, 1.0)
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}

    def record(label: str, state: str, value: tuple[float, float]) -> None:
        results.setdefault(label, {"on": [], "off": []})[state].append(value)
        print(f"# {label} history {state}: {value[0]:,.1f}/s, {value[1]:.3f} ms", file=sys.stderr, flush=True)

    server = None
    log = tempfile.NamedTemporaryFile(prefix="bench-history-", suffix=".log", delete=False)  # noqa: SIM115
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scripts = pgbench_scripts(store, Path(tmp))
            asyncio.run(
                sql(
                    url,
                    f"""INSERT INTO {table} (name, lock_until, locked_at, locked_by)
                SELECT 'held-' || i, 'infinity', timezone('utc', now()), 'holder' FROM generate_series(1, 4) i""",
                )
            )
            if args.http:
                server = target.start_server(url, settings.table, {}, log)
            for round_ in range(args.rounds):
                for state in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                    asyncio.run(
                        sql(url, f"ALTER TABLE {table} {'ENABLE' if state == 'on' else 'DISABLE'} TRIGGER {trigger}")
                    )
                    record("pgbench cycle, 1 client", state, pgbench(url, scripts["cycle"], 1, args.seconds))
                    record("pgbench cycle, 8 clients", state, pgbench(url, scripts["cycle"], 8, args.seconds))
                    record(
                        "pgbench contended acquire, 8 clients",
                        state,
                        pgbench(url, scripts["contended"], 8, args.seconds),
                    )
                    if server is not None:
                        for label, load in (
                            ("HTTP cycle, 32 clients, 1024 names", Load("own", 32, args.seconds, 1024, "bench-")),
                            ("HTTP cycle, 32 clients, 4 names", Load("random", 32, args.seconds, 4, "bench-")),
                        ):
                            with target.ProcessWatch(server.pid) as watch:
                                phase = run_wrk(server.url, load)
                            target.expire_bench_leases(url, table, "bench-")
                            summary: dict[str, Any] = phase.summary()
                            cpu = watch.cpu_s / (summary["requests_per_s"] * summary["seconds"]) * 1e6
                            record(label, state, (summary["cycles_per_s"], summary["acquire"]["p50_ms"]))
                            record(label + ", server CPU us/request", state, (cpu, summary["acquire"]["p99_ms"]))
    finally:
        if server is not None:
            target.stop_server(server)
        target.drop_schema(url, schema)
    print("| measure (median of rounds) | history on | history off | on ÷ off |")
    print("|---|---|---|---|")
    for label, by_state in results.items():
        on = statistics.median(v[0] for v in by_state["on"])
        off = statistics.median(v[0] for v in by_state["off"])
        on_ms = statistics.median(v[1] for v in by_state["on"])
        off_ms = statistics.median(v[1] for v in by_state["off"])
        second = "p99 ms" if "CPU" in label else ("acquire p50 ms" if "HTTP" in label else "ms")
        print(f"| {label} | {on:,.1f} ({on_ms:.3f} {second}) | {off:,.1f} ({off_ms:.3f} {second}) | {on / off:.3f} |")
    print(f"| skip counter, one 409 | {skip_counter_ns():.0f} ns | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
