"""python -m bench.fleet runs end to end on a hundredth of a fleet's day: the history generated as described, every
read answered, retention by DELETE and by partitions measured. Nothing here is about speed: it keeps the script
runnable and its history shaped as docs/history.md says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fleet_data import runs_per_minute

ROOT = Path(__file__).parents[3]

pytestmark = pytest.mark.system  # an embedded cluster of its own, a server, a day of history


def test_runs_per_minute_is_the_fleets() -> None:
    assert runs_per_minute(1.0) == 1000


def test_a_small_fleet_is_generated_read_and_pruned(tmp_path: Path) -> None:
    output = tmp_path / "fleet.json"
    command = [sys.executable, "-m", "bench.fleet", "--days", "1", "--scale", "0.01", "--requests", "3"]
    done = subprocess.run(
        [*command, "--partitions", "--output", str(output)], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(output.read_text())
    # 6 jobs every minute, 10 every 5, 24 every 15, 24 hourly: 9 runs a minute, a day of them.
    assert record["generate"]["runs"] == 1440 * 6 + 288 * 10 + 96 * 24 + 24 * 24
    assert set(record["reads"]) >= {"lock_runs_busy", "runs_all", "jobs_list", "job_ticks_busy", "ui_jobs"}
    assert all(read["n"] == 3 and read["p99_ms"] > 0 for read in record["reads"].values())
    assert record["statements"]["jobs_list"]["job_runs"]["p50_ms"] > 0
    deleted = record["retention_delete"]
    assert deleted["delete"]["rows"] > 0 and deleted["delete"]["wal_mb"] > 0
    assert deleted["after_new_day"]["heap_mb"] > 0 and deleted["vacuum"]["seconds"] >= 0
    partitions = record["retention_partitions"]
    assert partitions["partitions"] >= 1 and partitions["drop_day"]["rows"] > 0
