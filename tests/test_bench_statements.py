"""scripts/bench_statements.py runs end to end and prints a row per statement variant. Nothing here is about speed."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.system
def test_the_statement_benchmark_prints_every_variant_and_leaves_nothing_behind(database_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "scripts/bench_statements.py",
            "--database-url",
            database_url,
            "--rounds",
            "2",
            "--locks",
            "32",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [line for line in done.stdout.splitlines() if re.search(r"\d µs +(\d+\.\d\d|nan) +[\d,]+ B$", line)]
    labels = [re.split(r" {2,}", row)[0] for row in rows]
    assert labels == [
        "cycle: ShedLock (Java's statements)",
        "cycle: schedlock, one name per statement",
        "cycle: schedlock, 16 names per statement",
        "refused: INSERT ... ON CONFLICT (before)",
        "refused: schedlock's acquire (now)",
    ], done.stdout
    assert rows[0].split()[-3] in ("1.00", "nan")  # the baseline against itself (nan: too short to read)
    assert asyncio.run(schemas_left(database_url)) == 0


async def schemas_left(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench_statements_%'"))
    finally:
        await conn.close()
