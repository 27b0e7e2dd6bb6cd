"""The fault campaign (tests/chaos/, docs/reliability.md) in the suite: a short seeded campaign against real server
processes finds no violation, and the same campaign with bugs planted in it is caught.

The short campaign leaves out the nemeses that still find defects in the current server (the opt-in faults of
tests/chaos/nemesis.py); docs/reliability.md lists what they found.
"""

from __future__ import annotations

from pathlib import Path

from tests.chaos.campaign import CampaignConfig, Report, run
from tests.chaos.checker import Violation


def test_a_short_seeded_campaign_finds_no_violation(tmp_path: Path) -> None:
    # The last server reaches Postgres through PgBouncer in transaction pooling mode (issue 20's pooler).
    report = run(CampaignConfig(seed=20, duration=40, pgbouncer=True, workdir=str(tmp_path)))
    assert report.verdict.ok, report.summary()
    # Not vacuous: the campaign granted leases to both kinds of participant, and faults of many kinds hit them.
    sources = {grant.source for grant in report.verdict.grants}
    assert sources == {"http", "java"} and len(report.verdict.grants) > 50, report.summary()
    assert sum(report.faults.values()) >= 10 and len(report.faults) >= 5, report.summary()


def _involves(violation: Violation, report: Report, plant: str) -> bool:
    if plant == "java-unguarded":
        return any(op.proc == "java-planted" for op in violation.ops)
    planted_server = report.extra["urls"][0]
    return any(op.kind == "acquire" and op.req.get("server") == planted_server for op in violation.ops[1:])


def test_the_checker_catches_planted_bugs(tmp_path: Path) -> None:
    """A Java node taking rows over without ShedLock's ``lock_until <= now`` guard, and a server whose acquire has
    no expiry guard (tests/chaos/planted.py): both grant a name that is held, and the checker says so."""
    plants = ("java-unguarded", "server-unguarded")
    report = run(CampaignConfig(seed=21, duration=8, faults=("net_delay",), plant=plants, workdir=str(tmp_path)))
    overlaps = [v for v in report.verdict.violations if v.rule == "no_overlap"]
    for plant in plants:
        assert any(_involves(v, report, plant) for v in overlaps), (plant, report.summary())
    assert all(len(v.ops) >= 2 or not v.ops for v in overlaps)  # each shows the grants that overlap
