"""A Patroni joining a running primary loses no acknowledged commit (issue 46): scripts/patroni_loss.py's two
scenarios (a restarted leader's Patroni; the ``kill_patroni`` fault's heal) against the suite's Patroni, each ending
in a failover, every acknowledged row looked for on the promoted node. Debian's Patroni 3.0.2 fails both (joining, it
sets ``synchronous_standby_names`` to ``'*'`` while ``/sync`` names one standby: docs/high-availability.md); with
``SCHEDLOCK_PATRONI_BIN=/usr/bin`` this module shows it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system  # a Patroni cluster of its own per scenario, ~30-100 s each

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("scenario", ["restart", "orphan"])
def test_a_patroni_joining_a_running_primary_loses_no_acknowledged_commit(scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/patroni_loss.py", "--scenario", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    result = next((line for line in done.stdout.splitlines() if line.startswith("RESULT")), None)
    assert result is not None, f"the scenario did not get to its end:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0 and "missing on" in result and ": 0 (" in result.split("missing on")[1], done.stdout
