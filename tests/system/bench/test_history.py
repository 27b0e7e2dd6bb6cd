"""scripts/bench_history.py runs end to end, pgbench included, and prints a row per measurement. Nothing here is
about speed: it is what keeps the script runnable (its pgbench script once bound a statement parameter of the wrong
type, and every run with pgbench aborted unnoticed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.databases import schemas_left

ROOT = Path(__file__).parents[3]


def test_the_history_benchmark_runs_pgbench_and_leaves_nothing_behind(database_url: str) -> None:
    command = [sys.executable, "scripts/bench_history.py", "--database-url", database_url]
    done = subprocess.run(
        [*command, "--rounds", "1", "--cycles", "20", "--seconds", "1", "--no-http"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row.split(" | ")[0].lstrip("| "): row for row in done.stdout.splitlines() if row.startswith("| ")}
    pgbench = [label for label in rows if label.startswith("pgbench, 8 clients")]
    assert len(pgbench) == 2, done.stdout  # the cycles and the refused acquires
    for label in pgbench:  # transactions per second, each side: pgbench ran and reported
        assert all(float(tps.replace(",", "")) > 0 for tps in re.findall(r"([\d,.]+) /s", rows[label])), rows[label]
    assert schemas_left(database_url, "bench_hist_") == 0
