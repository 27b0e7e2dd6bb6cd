"""scripts/bench_statements.py runs end to end and prints a row per statement variant. Nothing here is about speed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.databases import schemas_left

ROOT = Path(__file__).parents[3]


LABELS = [
    "cycle: ShedLock (Java's statements)",
    "cycle: schedlock, one name per statement",
    "cycle: schedlock, 16 names per statement",
    "cycle: schedlock, one name, a token's name",
    "cycle: schedlock, 16 names, a token's name",
    "refused: INSERT ... ON CONFLICT (before)",
    "refused: schedlock's acquire (now)",
]


def bench(database_url: str, *extra: str) -> str:
    command = [sys.executable, "scripts/bench_statements.py", "--database-url", database_url, "--rounds", "2"]
    done = subprocess.run(
        [*command, "--locks", "32", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    return done.stdout


def test_the_statement_benchmark_prints_every_variant_and_leaves_nothing_behind(database_url: str) -> None:
    out = bench(database_url)
    rows = [line for line in out.splitlines() if re.search(r"\d µs +(\d+\.\d\d|nan) +[\d,]+ B$", line)]
    assert [re.split(r" {2,}", row)[0] for row in rows] == LABELS, out
    assert rows[0].split()[-3] in ("1.00", "nan")  # the baseline against itself (nan: too short to read)
    assert schemas_left(database_url, "bench_statements_") == 0


def test_against_an_older_revision_it_prints_both_and_their_ratio(database_url: str) -> None:
    out = bench(database_url, "--against", "0004")
    rows = [line for line in out.splitlines() if re.search(r"\d µs +(\d+\.\d{3}|nan) +[\d,]+ B +[\d,]+ B$", line)]
    assert [re.split(r" {2,}", row)[0] for row in rows] == LABELS, out
    assert "head ÷ 0004" in out.splitlines()[0]
    assert schemas_left(database_url, "bench_statements_") == 0
