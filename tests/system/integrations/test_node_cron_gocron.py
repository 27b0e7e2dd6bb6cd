"""node-cron v4 and gocron v2 on schedlock (integrations/node-cron, integrations/go/gocron): the real schedulers, as
separate processes on seconds-level schedules, against a live server.

Each tick of a job runs on one scheduler only; a run that fails leaves its tick open, and a scheduler whose trigger
for the same tick comes later (its clock is a second behind) runs it; a holder that is killed blocks the job only
until its lease ends; with schedlock down the job does not run and the adapter says so, unless it is told to fail
open.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.api import ts
from tests.support.polyglot import node_command
from tests.support.polyglot import row as lock_row
from tests.support.schedulers_js_go import GO_MODULE, Example, Scheduler, build_gocron, build_node_cron, tool
from tests.support.servers import LiveServer, free_port, serving_tokens
from tests.support.tokens import Token

EVERY_2S = "*/2 * * * * *"
EVERY_1S = "* * * * * *"
#: What each adapter's example calls a skipped run: another scheduler runs or ran the tick / schedlock is down.
NOT_ELECTED = {"node-cron": {"not-elected"}, "gocron": {"held", "done"}}
UNAVAILABLE = {"node-cron": "coordinator-error", "gocron": "unavailable"}


@pytest.fixture(scope="module")
def node_cron_example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    folder = tmp_path_factory.mktemp("node-cron") / "schedlock-node-cron"
    build_node_cron(folder)
    return Example("node-cron", [*node_command(), "example.mjs"], folder)


@pytest.fixture(scope="module")
def gocron_example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    out = tmp_path_factory.mktemp("gocron")
    build_gocron(out)
    return Example("gocron", [str(out / "example")], out)


@pytest.fixture(params=["node-cron", "gocron"])
def example(request: pytest.FixtureRequest) -> Example:
    built: Example = request.getfixturevalue(f"{request.param.replace('-', '_')}_example")
    return built


@pytest.fixture
def job_name() -> str:
    return f"sched.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def schedulers() -> Iterator[list[Scheduler]]:
    """The scheduler processes a test starts; stopped at its end whatever happened."""
    started: list[Scheduler] = []
    yield started
    for scheduler in started:
        scheduler.stop()


def ticks(scheduler: Scheduler, kind: str = "started") -> list[datetime]:
    return [ts(e["tick"]) for e in scheduler.of(kind)]


def slot(tick: datetime) -> str:
    """A tick as the adapters send it as the slot (and the API writes times)."""
    return tick.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_each_tick_runs_on_one_scheduler_and_the_other_skips(
    example: Example, live_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    a = example.start(live_server.url, job_name, EVERY_2S)
    schedulers.append(a)
    b = example.start(live_server.url, job_name, EVERY_2S)
    schedulers.append(b)
    both_up = datetime.now(UTC) + timedelta(milliseconds=500)

    def window() -> list[datetime]:
        return [t for t in ticks(a) + ticks(b) if t > both_up]

    def skips() -> list[dict[str, object]]:
        return a.of("skipped") + b.of("skipped")

    a.wait(lambda: len(window()) >= 3 and len(skips()) >= 3, "three ticks run and three skipped")
    a.stop()
    b.stop()

    runs = ticks(a) + ticks(b)
    assert len(runs) == len(set(runs)), f"a tick ran twice: {sorted(runs)}"
    first, last = min(runs), max(runs)
    every = [first + timedelta(seconds=2 * i) for i in range((last - first) // timedelta(seconds=2) + 1)]
    # A tick nobody ran is one both schedulers dropped as missed (node-cron does, when its event loop is more than a
    # second late: a loaded machine), never one each left to the other.
    unrun = set(every) - set(runs)
    assert unrun <= set(ticks(a, "missed")) & set(ticks(b, "missed")), (sorted(runs), sorted(unrun))
    assert {e["reason"] for e in skips()} <= NOT_ELECTED[example.adapter]
    if example.adapter == "node-cron":  # node-cron says which tick it skipped: one the other scheduler ran
        assert set(ticks(a, "skipped") + ticks(b, "skipped")) <= set(runs)
    assert lock_row(live_server, job_name)["last_completed_slot"] == slot(last)


def test_a_failed_run_leaves_its_tick_to_a_later_trigger_of_the_same_tick(
    example: Example, live_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    failing = example.start(live_server.url, job_name, EVERY_2S, JOB="fail")
    schedulers.append(failing)
    late = example.start(live_server.url, job_name, EVERY_2S, clock_behind_s=1)
    schedulers.append(late)

    def retried() -> set[datetime]:
        return set(ticks(failing, "failed")) & set(ticks(late))

    late.wait(lambda: len(retried()) >= 2, "two failed ticks run again by the late scheduler")
    late.stop()  # first: once the scheduler on time has stopped, the late one would run the ticks it never saw
    failing.stop()

    # The scheduler on time takes every tick and fails it; the one a second behind runs each of those ticks again,
    # once, and completes it. Neither scheduler retries by itself: the tick was left open for a later trigger.
    # (A tick before the on-time scheduler's first, or one it dropped as missed on a loaded machine, is the late
    # one's to run from the start.)
    failed = set(ticks(failing, "failed"))
    since_failing = {t for t in ticks(late) if t >= min(failed)}
    assert since_failing - failed <= set(ticks(failing, "missed")), (failing.events, late.events)
    assert len(ticks(late)) == len(set(ticks(late)))
    assert lock_row(live_server, job_name)["last_completed_slot"] == slot(max(ticks(late)))


def test_a_late_trigger_of_an_old_tick_is_skipped_and_the_newer_tick_does_not_run_again(
    example: Example, live_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    """Issue 43: a scheduler whose clock is 3 s behind fires each 2 s tick after the scheduler on time ran the newer
    one; schedlock answers a stale slot_done, and the late trigger is skipped. No tick runs twice, and the last
    completed tick is the newest run (it never moved back)."""
    on_time = example.start(live_server.url, job_name, EVERY_2S)
    schedulers.append(on_time)
    late = example.start(live_server.url, job_name, EVERY_2S, clock_behind_s=3)
    schedulers.append(late)

    def twice() -> bool:
        return bool(set(ticks(on_time)) & set(ticks(late)))

    late.wait(lambda: len(late.of("skipped")) >= 3 or twice(), "three late triggers skipped")
    late.stop()
    on_time.stop()

    runs = ticks(on_time) + ticks(late)
    assert len(runs) == len(set(runs)), f"a tick ran twice: {sorted(runs)}"
    assert len(late.of("skipped")) >= 3, late.events
    assert {e["reason"] for e in late.of("skipped")} <= NOT_ELECTED[example.adapter]
    if example.adapter == "node-cron":  # node-cron says which tick it skipped: each older than one already run
        assert all(t < max(ticks(on_time)) for t in ticks(late, "skipped"))
        # and its log says why: stale, not "already run" (console.info, on stdout)
        stale = [line for line in late.lines if "is stale, older than its last completed tick" in line]
        assert stale, late.stdout
    assert lock_row(live_server, job_name)["last_completed_slot"] == slot(max(runs))


def test_a_killed_holder_blocks_the_job_until_its_lease_ends(
    example: Example, live_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    lease_s = 3
    holder = example.start(live_server.url, job_name, EVERY_2S, JOB="hang", LEASE_MS=str(lease_s * 1000))
    schedulers.append(holder)
    holder.wait(lambda: bool(holder.of("started")), "the holder did not start a run")
    held_tick = ticks(holder)[0]
    other = example.start(live_server.url, job_name, EVERY_2S, LEASE_MS=str(lease_s * 1000))
    schedulers.append(other)
    holder.kill()

    other.wait(lambda: bool(other.of("finished")), "the other scheduler did not run the job after the lease ended")
    runs = httpx.get(f"{live_server.url}/v1/runs", params={"name": job_name}).json()["items"]
    killed = next(r for r in runs if f"pid {holder.process.pid} " in r["locked_by"])
    taken = min(ts(r["acquired_at"]) for r in runs if f"pid {other.process.pid} " in r["locked_by"])
    assert taken >= ts(killed["lock_until"]), (killed, runs)  # not before the killed holder's lease ended
    assert killed["outcome"] in {"expired", "taken_over"}
    assert ticks(other)[0] > held_tick
    assert {e["reason"] for e in other.of("skipped")} <= NOT_ELECTED[example.adapter]
    assert lock_row(live_server, job_name)["last_completed_slot"] not in {None, slot(held_tick)}  # it stays open


def test_with_schedlock_down_the_job_does_not_run_unless_told_to_fail_open(
    example: Example, job_name: str, schedulers: list[Scheduler]
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    closed = example.start(nowhere, job_name, EVERY_1S)
    schedulers.append(closed)
    open_ = example.start(nowhere, job_name, EVERY_1S, FAIL_OPEN="1")
    schedulers.append(open_)

    closed.wait(lambda: len(closed.of("skipped")) >= 2, "two ticks skipped while schedlock is down")
    open_.wait(lambda: len(open_.of("finished")) >= 2, "two ticks run without a lock (fail-open)")
    time.sleep(0.2)  # the last skip's log line
    assert closed.of("started") == []
    assert {e["reason"] for e in closed.of("skipped")} == {UNAVAILABLE[example.adapter]}
    assert "NOT run (fail-closed)" in closed.stderr or "NOT started (fail-closed)" in closed.stderr
    assert "unreachable" in closed.stderr or "connection refused" in closed.stderr
    assert "WITHOUT a lock" in open_.stderr


#: One request per 5 s, two at once: a scheduler ticking every second (an acquire and a release a run) is over it.
TIGHT = Token("tight", rate=0.2, burst=2)
#: One request per 4 s, none saved up, ticking every 3 s: a run's acquire spends the bucket, its release meets a 429
#: (Retry-After 4) and passes when sent again; the acquires of the two ticks before that meet 429s too, and spend
#: nothing, so the retried release does not compete with them.
TIGHT_GO = Token("tight-gocron", rate=0.25, burst=1)
EVERY_3S = "*/3 * * * * *"
ADMIN = Token("ops", admin=True)


@pytest.fixture(scope="module")
def quota_server(settings: Settings) -> Iterator[LiveServer]:
    with serving_tokens(settings, TIGHT, TIGHT_GO, ADMIN) as server:
        yield server


def test_node_cron_over_its_quota_skips_ticks_and_releases_after_retry_after(
    node_cron_example: Example, quota_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    """A 429 rate_limited (the caller over its quota, docs/auth.md) is no outage: the acquire's tick is skipped as
    not elected, with a warning, and a release answered 429 is sent again after its Retry-After while the lease
    lasts, so every run is released, none left to expire."""
    over = node_cron_example.start(quota_server.url, job_name, EVERY_1S, LEASE_MS="60000", SCHEDLOCK_TOKEN=TIGHT.secret)
    schedulers.append(over)
    over.wait(lambda: len(over.of("finished")) >= 2 and len(over.of("skipped")) >= 2, "two runs and two skips", 60)
    over.stop()  # its last release, if waiting out a Retry-After, is sent before the process ends

    assert {e["reason"] for e in over.of("skipped")} == {"not-elected"}, over.events  # no coordinator-error
    assert "over this caller's quota (429 rate_limited, retry after" in over.stderr, over.stderr
    response = httpx.get(f"{quota_server.url}/v1/locks/{job_name}/runs", headers=ADMIN.headers, timeout=10)
    runs = response.json()["items"]
    assert len(runs) >= 2 and {r["outcome"] for r in runs} == {"released"}, runs
    assert "retrying in" in over.stdout, "no release met a 429: not tested"


def test_gocron_over_its_quota_skips_runs_with_a_warning_and_releases_after_retry_after(
    gocron_example: Example, quota_server: LiveServer, job_name: str, schedulers: list[Scheduler]
) -> None:
    """As node-cron: a 429 on acquire skips the run (ErrRateLimited, logged as a warning), not an outage logged as
    an error, and a release answered 429 is sent again after its Retry-After, so every run is released."""
    over = gocron_example.start(quota_server.url, job_name, EVERY_3S, LEASE_MS="60000", SCHEDLOCK_TOKEN=TIGHT_GO.secret)
    schedulers.append(over)
    over.wait(lambda: len(over.of("finished")) >= 2 and len(over.of("skipped")) >= 2, "two runs and two skips", 60)

    def runs() -> list[dict[str, Any]]:
        response = httpx.get(f"{quota_server.url}/v1/locks/{job_name}/runs", headers=ADMIN.headers, timeout=10)
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    # Runs go on while we look: wait for two released ones (a release waits out its Retry-After, 4 s here).
    over.wait(lambda: sum(r["outcome"] == "released" for r in runs()) >= 2, "two runs released", 60)
    over.stop()
    # Held: a tick whose acquire passed while the last run's release waited out its Retry-After. Never "unavailable".
    reasons = {e["reason"] for e in over.of("skipped")}
    assert "rate-limited" in reasons and reasons <= {"rate-limited", *NOT_ELECTED["gocron"]}, over.events
    assert "over this caller's quota (429 rate_limited)" in over.stderr, over.stderr
    assert "fail-closed" not in over.stderr and "level=ERROR" not in over.stderr, over.stderr
    assert {r["outcome"] for r in runs()} <= {"released", "running"}, runs()  # none left to expire
    assert "release failed, retrying" in over.stderr, "no release met a 429: not tested"


def test_the_node_cron_adapter_type_checks(node_cron_example: Example) -> None:
    """tsc (strict, checkJs) over the adapter and the example, against node-cron's own types."""
    done = tool(["node_modules/.bin/tsc", "--project", "tsconfig.json"], cwd=node_cron_example.cwd)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_gocron_adapter_passes_go_vet_gofmt_and_its_go_test(gocron_example: Example) -> None:
    """go vet and gofmt over the module, and its go test: the witness that, when gocron calls Lock for a scheduled
    run, the job's next run is still that run's tick (what the slot is made of), and that RunNow has none."""
    vet = tool(["go", "vet", "./..."], cwd=GO_MODULE)
    assert vet.returncode == 0, vet.stdout + vet.stderr
    gofmt = tool(["gofmt", "-l", "."], cwd=GO_MODULE)
    assert gofmt.returncode == 0 and gofmt.stdout == "", f"not gofmt-formatted: {gofmt.stdout}{gofmt.stderr}"
    test = tool(["go", "test", "-count=1", "./..."], cwd=GO_MODULE)
    assert test.returncode == 0, test.stdout + test.stderr
