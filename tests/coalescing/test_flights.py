"""Acquires of one name that arrive while one is in flight are decided together (app.coalescing.flights): the group's
first runs the statement, the others follow its outcome as if each came right after it; a failed statement sends
the others to run their own. First the mechanism with scripted statements, then the store on a real Postgres."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.coalescing.flights import Alone, Answer, Failed, Flights, Outcome
from app.errors import LockHeld, StorageUnavailable
from app.locking.rows import Lease
from tests.support.api import acquire, release
from tests.support.java import JavaNode


class Script:
    """Statements that wait until the test lets each one finish, recording who ran one."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.gates: dict[str, asyncio.Future[str]] = {}

    def attempt(self, who: str) -> Any:
        async def run() -> str:
            self.ran.append(who)
            self.gates[who] = asyncio.get_running_loop().create_future()
            return await self.gates[who]

        return run


def follow(outcome: Outcome[str]) -> Answer[str] | Failed | Alone:
    return Answer(f"after {outcome.value}") if isinstance(outcome, Answer) else Alone()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_callers_that_arrive_during_a_statement_go_as_one_group() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    rest = [asyncio.ensure_future(flights.run("a", script.attempt(w), follow)) for w in "234"]
    await settle()
    assert script.ran == ["1"] and flights.waiting("a") == 3
    script.gates["1"].set_result("1 done")
    await settle()
    assert await first == "1 done"
    assert script.ran == ["1", "2"]  # the group's first runs its statement; 3 and 4 wait for its outcome
    late = asyncio.ensure_future(flights.run("a", script.attempt("5"), follow))  # arrives after 2's was sent
    await settle()
    script.gates["2"].set_result("2 done")
    await settle()
    assert [await r for r in rest] == ["2 done", "after 2 done", "after 2 done"]
    assert script.ran == ["1", "2", "5"]  # 5 joined no statement already sent: it leads the next group
    script.gates["5"].set_result("5 done")
    assert await late == "5 done"
    assert flights.waiting("a") is None


async def test_other_keys_do_not_wait() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    a = asyncio.ensure_future(flights.run("a", script.attempt("a"), follow))
    b = asyncio.ensure_future(flights.run("b", script.attempt("b"), follow))
    await settle()
    assert script.ran == ["a", "b"]
    script.gates["b"].set_result("b done")
    assert await b == "b done"
    script.gates["a"].set_result("a done")
    assert await a == "a done"


async def test_a_failed_statement_sends_its_group_to_run_their_own() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    group = [asyncio.ensure_future(flights.run("a", script.attempt(w), follow)) for w in "234"]
    await settle()
    script.gates["1"].set_result("1 done")
    await settle()
    assert script.ran == ["1", "2"]
    script.gates["2"].set_exception(StorageUnavailable("down"))
    await settle()
    assert script.ran == ["1", "2", "3", "4"]  # 3 and 4 followed 2: each runs its own now, side by side
    with pytest.raises(StorageUnavailable):
        await group[0]
    script.gates["3"].set_result("3 done")
    script.gates["4"].set_result("4 done")
    assert [await first, await group[1], await group[2]] == ["1 done", "3 done", "4 done"]
    assert flights.waiting("a") is None


async def test_a_cancelled_leader_leaves_nobody_waiting() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    second = asyncio.ensure_future(flights.run("a", script.attempt("2"), follow))
    third = asyncio.ensure_future(flights.run("a", script.attempt("3"), follow))
    await settle()
    first.cancel()
    await settle()
    assert first.cancelled()
    assert script.ran == ["1", "2"]  # the next group starts at once
    second.cancel()  # its group's leader gone too: 3 runs its own statement
    await settle()
    assert script.ran == ["1", "2", "3"]
    script.gates["3"].set_result("3 done")
    assert await third == "3 done"
    assert flights.waiting("a") is None


async def test_a_waiter_cancelled_while_waiting_is_left_out() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    gone = asyncio.ensure_future(flights.run("a", script.attempt("2"), follow))
    third = asyncio.ensure_future(flights.run("a", script.attempt("3"), follow))
    await settle()
    gone.cancel()
    await settle()
    script.gates["1"].set_result("1 done")
    await settle()
    assert script.ran == ["1", "3"]
    script.gates["3"].set_result("3 done")
    assert (await first, await third) == ("1 done", "3 done")


async def test_a_leader_cancelled_as_it_was_chosen_hands_its_group_on() -> None:
    flights: Flights[str] = Flights()
    script = Script()
    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    chosen = asyncio.ensure_future(flights.run("a", script.attempt("2"), follow))
    others = [asyncio.ensure_future(flights.run("a", script.attempt(w), follow)) for w in "34"]
    await settle()
    script.gates["1"].set_result("1 done")
    await asyncio.sleep(0)  # 1's statement returns and 2 is made the group's leader...
    assert not chosen.done()
    chosen.cancel()  # ...and is cancelled before it could start its statement
    await settle()
    assert chosen.cancelled()
    assert script.ran == ["1", "3", "4"]
    script.gates["3"].set_result("3 done")
    script.gates["4"].set_result("4 done")
    assert [await o for o in others] == ["3 done", "4 done"]
    assert await first == "1 done"


# The store on a real Postgres.

AT_MOST = timedelta(minutes=10)


def counting(app: FastAPI) -> tuple[list[str], Any]:
    """Count the store's statements (its observer), restoring the real one afterwards."""
    statements, seen = app.state.store.statements, []
    real = statements.observe

    def observe(operation: str, seconds: float, outcome: str) -> None:
        seen.append(operation)
        if real is not None:
            real(operation, seconds, outcome)

    return seen, (statements, real, observe)


async def test_many_acquires_of_one_name_grant_one_lease_in_few_statements(app: FastAPI, name: str) -> None:
    seen, (statements, real, observe) = counting(app)
    statements.observe = observe
    try:
        outcomes = await asyncio.gather(
            *(app.state.store.acquire(name, AT_MOST, timedelta(0), f"node-{i}") for i in range(40)),
            return_exceptions=True,
        )
    finally:
        statements.observe = real
    leases = [o for o in outcomes if isinstance(o, Lease)]
    refused = [o for o in outcomes if isinstance(o, LockHeld)]
    assert len(leases) == 1 and len(refused) == 39
    assert {r.details["locked_by"] for r in refused} == {leases[0].row.locked_by}
    assert {r.details["lock_until"] for r in refused} == {refused[0].details["lock_until"]}
    assert seen.count("acquire") <= 3  # the first alone, the 39 others as one group (a late one may lead a third)


async def test_a_group_behind_a_release_sees_the_lock_free(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    # acquire, then its release and a burst of acquires side by side: every acquire either takes the lock or names
    # whoever holds it then; exactly one lease stands at the end.
    store = app.state.store
    lease = await store.acquire(name, AT_MOST, timedelta(0), "first")
    burst = asyncio.gather(
        *(store.acquire(name, AT_MOST, timedelta(0), f"node-{i}") for i in range(20)), return_exceptions=True
    )
    released = store.release(name, lease.token)
    outcomes, _ = await asyncio.gather(burst, released)
    leases = [o for o in outcomes if isinstance(o, Lease)]
    assert len(leases) <= 1
    holders = {o.details["locked_by"] for o in outcomes if isinstance(o, LockHeld)}
    assert holders <= {"first", *(lease.row.locked_by for lease in leases)}
    if not leases:  # the whole burst ran before the release committed: the lock is free now
        assert (await acquire(client, name)).status_code == 200


async def test_a_group_finds_a_java_holder(app: FastAPI, java: JavaNode, name: str) -> None:
    assert await java.insert_or_take_over(name, 600)
    outcomes = await asyncio.gather(
        *(app.state.store.acquire(name, AT_MOST, timedelta(0), f"node-{i}") for i in range(10)),
        return_exceptions=True,
    )
    assert all(isinstance(o, LockHeld) for o in outcomes)
    assert {o.details["locked_by"] for o in outcomes if isinstance(o, LockHeld)} == {"java-host-1"}


async def test_grouped_refusals_are_each_counted_as_a_skip(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    token = (await acquire(client, name)).json()["token"]
    results = await asyncio.gather(*(acquire(client, name) for _ in range(12)))
    assert [r.status_code for r in results] == [409] * 12
    await app.state.skips.flush(app.state.store.statements)
    (run,) = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    assert run["skipped"] == 12
    assert (await release(client, name, token)).status_code == 200


async def test_a_key_is_never_in_two_statements_even_behind_a_stuck_one() -> None:
    # Issue 20: a second statement for the same name would only queue on the same row (a row another transaction
    # holds locked), taking a connection with it. The group waits for the stuck statement, however long it takes.
    flights: Flights[str] = Flights()
    script = Script()
    stuck = asyncio.ensure_future(flights.run("a", script.attempt("1"), follow))
    await settle()
    group = [asyncio.ensure_future(flights.run("a", script.attempt(w), follow)) for w in "23"]
    await asyncio.sleep(0.2)
    assert script.ran == ["1"] and flights.waiting("a") == 2
    script.gates["1"].set_result("1 done")
    await settle()
    assert script.ran == ["1", "2"]
    script.gates["2"].set_result("2 done")
    assert [await g for g in group] == ["2 done", "after 2 done"]
    assert await stuck == "1 done"
    assert flights.waiting("a") is None


async def test_followers_raise_what_follow_says_for_a_failed_statement() -> None:
    flights: Flights[str] = Flights()
    script = Script()

    def shared(outcome: Outcome[str]) -> Answer[str] | Failed | Alone:
        if isinstance(outcome, Failed) and isinstance(outcome.error, StorageUnavailable):
            return Failed(StorageUnavailable("down"))
        return follow(outcome)

    first = asyncio.ensure_future(flights.run("a", script.attempt("1"), shared))
    await settle()
    group = [asyncio.ensure_future(flights.run("a", script.attempt(w), shared)) for w in "234"]
    await settle()
    script.gates["1"].set_result("1 done")
    await settle()
    script.gates["2"].set_exception(StorageUnavailable("down"))
    outcomes = await asyncio.gather(*group, return_exceptions=True)
    assert all(isinstance(o, StorageUnavailable) for o in outcomes)
    assert script.ran == ["1", "2"]  # 3 and 4 were answered with the error, not sent to wait it out again
    assert await first == "1 done"
