"""The real ShedLock 7 JdbcTemplateLockProvider (usingDbTime, on Postgres) on the live server's table, beside
schedlock's callers: its own SQL, not a replay of it (tests/locking/test_java_interop.py replays the statements), so a
ShedLock release that changes them is caught. ShedLock 6's runs in tests/system/integrations/test_spring_boot.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.settings import Settings
from tests.support.servers import LiveServer
from tests.support.shedlock_provider import Driver, acquire, build, jdbc_url, lock_row, lock_runs, release, when

HOST = "java-host-7"


@pytest.fixture(scope="module")
def shedlock(database_url: str, settings: Settings) -> Iterator[Driver]:
    """A JVM with one JdbcTemplateLockProvider on the session's table, locked_by HOST."""
    driver = Driver(build().java("shedlock7", "dev.schedlock.it.Driver"))
    driver.send("jdbc-open", jdbc_url(database_url), settings.table, HOST)
    yield driver
    driver.close()


def test_http_is_refused_while_shedlock_holds(shedlock: Driver, live_server: LiveServer, name: str) -> None:
    assert shedlock.send("jlock", name, 600_000, 0) == {"acquired": True}
    refused = acquire(live_server, name)
    assert refused.status_code == 409 and refused.json()["error"]["locked_by"] == HOST
    [run] = lock_runs(live_server, name)
    assert run["source"] == "table" and run["locked_by"] == HOST and run["outcome"] == "running"
    shedlock.send("junlock", name)
    assert acquire(live_server, name).status_code == 200, "free after ShedLock's unlock"
    assert lock_runs(live_server, name)[1]["outcome"] == "released"


def test_shedlock_unlock_keeps_lock_at_least_for(shedlock: Driver, live_server: LiveServer, name: str) -> None:
    assert shedlock.send("jlock", name, 600_000, 60_000)["acquired"]
    shedlock.send("junlock", name)
    assert acquire(live_server, name).status_code == 409
    row = lock_row(live_server, name)
    assert abs((when(row["lock_until"]) - when(row["locked_at"])).total_seconds() - 60) < 0.01


def test_shedlock_is_refused_while_http_holds_and_cannot_touch_it(
    shedlock: Driver, live_server: LiveServer, name: str
) -> None:
    lease = acquire(live_server, name, "10m").json()
    assert shedlock.send("jlock", name, 600_000, 0) == {"acquired": False}, "ShedLock's INSERT path"
    assert shedlock.send("jlock", name, 600_000, 0) == {"acquired": False}, "its UPDATE path, the row now known"
    assert lock_row(live_server, name)["locked_by"] == lease["locked_by"]
    assert release(live_server, name, lease["token"]).status_code == 200
    assert shedlock.send("jlock", name, 600_000, 0) == {"acquired": True}, "free once released"
    shedlock.send("junlock", name)


def test_shedlock_takes_over_an_expired_lease_and_the_old_token_is_dead(
    shedlock: Driver, live_server: LiveServer, name: str
) -> None:
    lease = acquire(live_server, name, "100ms").json()
    time.sleep(0.3)
    assert shedlock.send("jlock", name, 600_000, 0)["acquired"]
    refused = release(live_server, name, lease["token"])
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "not_holder"
    row = lock_row(live_server, name)
    assert row["locked_by"] == HOST and row["fencing_token"] > lease["fencing_token"]
    assert [r["outcome"] for r in lock_runs(live_server, name)] == ["running", "taken_over"]
    shedlock.send("junlock", name)


def test_shedlock_extends_a_live_lock_only(shedlock: Driver, live_server: LiveServer, name: str) -> None:
    assert shedlock.send("jlock", name, 2_000, 0)["acquired"]
    before = lock_row(live_server, name)
    assert shedlock.send("jextend", name, 600_000, 0) == {"extended": True}
    after = lock_row(live_server, name)
    assert (when(after["lock_until"]) - when(before["lock_until"])).total_seconds() > 500
    assert after["fencing_token"] == before["fencing_token"], "an extension is not an acquisition"
    shedlock.send("junlock", name)
    assert shedlock.send("jlock", f"{name}-x", 300, 0)["acquired"]
    time.sleep(0.6)
    assert shedlock.send("jextend", f"{name}-x", 600_000, 0) == {"extended": False}


def test_fencing_tokens_rise_across_shedlock_and_http(shedlock: Driver, live_server: LiveServer, name: str) -> None:
    seen = []
    for _ in range(2):
        shedlock.send("jlock", name, 600_000, 0)
        seen.append(lock_row(live_server, name)["fencing_token"])
        shedlock.send("junlock", name)
        lease = acquire(live_server, name).json()
        seen.append(lease["fencing_token"])
        release(live_server, name, lease["token"])
    assert seen == sorted(seen) and len(set(seen)) == 4, seen
    assert [r["source"] for r in lock_runs(live_server, name)] == ["api", "table", "api", "table"]
