"""A Spring Boot 3 application on ShedLock 6 (@EnableScheduling, @EnableSchedulerLock, @Scheduled +
@SchedulerLock), started as two JVMs with SchedlockLockProvider and a third with the real JdbcTemplateLockProvider
(usingDbTime) on the live server's own table: each tick runs once, the JDBC node and the schedlock nodes exclude
each other, the run history shows all three, and the fencing tokens rise across them."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from app.settings import Settings
from tests.support.servers import LiveServer
from tests.support.shedlock_provider import Build, Jvm, all_runs, build, jdbc_url, start_jvm, stop_jvm, when

MAIN = "dev.schedlock.it.boot.App"


def wait(jvms: list[Jvm], done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        for jvm in jvms:
            if jvm.process.poll() is not None:
                pytest.fail(f"a JVM exited ({jvm.process.returncode}) while waiting for {what}:\n{jvm.output()}")
        if time.monotonic() > deadline:
            outputs = "\n".join(jvm.output()[-3000:] for jvm in jvms)
            pytest.fail(f"no {what} within {timeout}s:\n{outputs}")
        time.sleep(0.2)


def common_ticks(jvms: list[Jvm]) -> list[int]:
    """Ticks of the shared job that every JVM fired once all were warm (from the second tick after the last was
    ready: first runs load classes and open connections), but the last two, whose runs may be on their way."""
    fired = [{e["tick"] for e in jvm.of("tick", "shared")} for jvm in jvms]
    warm = max((e["tick"] for jvm in jvms for e in jvm.of("ready")), default=0) + 2
    return [tick for tick in sorted(set.intersection(*fired)) if tick >= warm][:-2]


def runs_in(jvms: list[Jvm], job: str) -> list[dict[str, Any]]:
    return [e for jvm in jvms for e in jvm.of("run", job)]


@pytest.fixture(scope="module")
def built() -> Build:
    return build()


def test_two_schedlock_jvms_and_a_jdbc_template_jvm_share_the_jobs(
    built: Build, live_server: LiveServer, settings: Settings, database_url: str
) -> None:
    prefix = f"spring.{uuid.uuid4().hex[:8]}."
    schedlock = {"SCHEDLOCK_URL": live_server.url}
    jdbc = [f"--demo.jdbc-url={jdbc_url(database_url)}", f"--demo.table={settings.table}"]
    commands = [
        (
            built.java("boot3", MAIN, "--demo.provider=schedlock", "--demo.index=0", f"--demo.prefix={prefix}"),
            schedlock,
        ),
        (
            built.java("boot3", MAIN, "--demo.provider=schedlock", "--demo.index=1", f"--demo.prefix={prefix}"),
            schedlock,
        ),
        (built.java("boot3", MAIN, "--demo.provider=jdbc", "--demo.index=2", f"--demo.prefix={prefix}", *jdbc), {}),
    ]
    jvms = [start_jvm(command, env) for command, env in commands]
    try:
        wait(jvms, lambda: all(jvm.of("ready") for jvm in jvms), 120, "ready JVMs")

        def every_jvm_ran() -> bool:
            ticks = common_ticks(jvms)
            won = {e["jvm"] for e in runs_in(jvms, "shared") if ticks and e["tick"] in ticks}
            return len(ticks) >= 3 and won == {0, 1, 2}

        wait(jvms, every_jvm_ran, 60, "shared-job runs by all three JVMs")
    finally:
        for jvm in jvms:
            stop_jvm(jvm)

    # Each tick that every JVM fired ran on one of them, never on two. A tick may be missed only if the run of
    # the tick before started so late (a stall of over a second) that its lockAtLeastFor covered this one.
    ticks = common_ticks(jvms)
    per_tick = Counter(e["tick"] for e in runs_in(jvms, "shared") if e["tick"] in ticks)
    assert all(per_tick[tick] <= 1 for tick in ticks), f"runs per tick: {per_tick}, ticks {ticks}"
    assert sum(per_tick[tick] for tick in ticks) >= len(ticks) - 1, f"runs per tick: {per_tick}, ticks {ticks}"
    # The direct job is ShedLock's plain case: a tick runs once as long as every node fires within
    # lockAtLeastFor (1.8 s) of the first, which holds once the JVMs are up (slots need no such guess).
    direct = Counter(e["tick"] for e in runs_in(jvms, "direct") if e["tick"] in ticks)
    assert direct and max(direct.values()) == 1, f"the direct job ran twice in a tick: {direct}"

    runs = all_runs(live_server, prefix)
    for job in ("shared", "direct"):
        mine = [r for r in runs if r["name"] == f"{prefix}{job}"]
        # Never two holders at once: each run starts when the one before it ended its at-least window.
        for before, after in itertools.pairwise(mine):
            assert when(after["acquired_at"]) >= when(before["lock_until"]), (before, after)
            assert after["fencing_token"] > before["fencing_token"], (before, after)

    shared = [r for r in runs if r["name"] == f"{prefix}shared"]
    assert {r["source"] for r in shared} == {"api", "table"}
    by_token = {r["fencing_token"]: r for r in shared}
    for jvm in jvms[:2]:
        pid = jvm.of("ready")[0]["pid"]
        for event in jvm.of("run", "shared"):
            run = by_token[event["fencing_token"]]  # the token the task saw is the run's
            assert run["source"] == "api" and f" pid {pid} [" in run["locked_by"], run
    table_runs = [r for r in shared if r["source"] == "table"]
    assert abs(len(table_runs) - len(jvms[2].of("run", "shared"))) <= 1, "a JDBC run the history lacks"
    assert all(r["outcome"] in ("released", "running") for r in shared), shared
