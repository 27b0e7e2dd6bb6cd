"""Acquires (and releases) of different names coalesce into one statement when every connection is busy
(app.coalescing.batches): first the mechanism with scripted statements, then the store's batched statements on a
real Postgres, where each caller must get what a statement of its own would have answered, and where a row another
transaction holds locked stalls nobody but its own caller (issue 20, defects 1, 2, 5 and 6)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, NamedTuple

import asyncpg
import pytest
from fastapi import FastAPI

from app.coalescing.batches import Batches
from app.errors import LockHeld, NotHolder, StorageUnavailable
from app.locking.rows import Lease
from app.settings import Settings
from tests.support.java import JavaNode
from tests.support.patience import SETTLE
from tests.support.stores import own_store


class Op(NamedTuple):
    label: str

    @property
    def name(self) -> str:
        return self.label.split("#")[0]


#: The scripted statements, as a store hands them over: (operation, SQL).
ONE = ("one", "ONE")
MANY = ("many", "MANY")


class Script:
    """A runner whose statements answer from a script: ONE answers "<label>!", MANY "<label>!!" per operation (BUSY,
    ``ok`` NULL, for the names in ``busy_names``), each in a row as the store's statements answer."""

    def __init__(self, fail_many: bool = False, busy_names: frozenset[str] = frozenset()) -> None:
        self.statements: list[list[str]] = []
        self.gate: asyncio.Future[None] | None = None
        self.fail_many = fail_many
        self.busy_names = busy_names
        self.before_many: Callable[[], Awaitable[None]] | None = None

    def stall_batches(self) -> asyncio.Event:
        """From now on a batched statement takes 20 ms; the event is set when one is sent."""
        sent = asyncio.Event()

        async def before_many() -> None:
            sent.set()
            await asyncio.sleep(0.02)

        self.before_many = before_many
        return sent

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[dict[str, Any]]:
        if (operation, sql) == ONE:
            (label,) = args
            self.statements.append([label])
            if self.gate is not None and label == "a":
                await self.gate
            if label == "bad":
                raise ValueError(label)
            return [{"name": Op(label).name, "ok": True, "out": f"{label}!"}]
        assert (operation, sql) == MANY
        (labels,) = args  # one array per field of Op
        self.statements.append(labels)
        if self.before_many is not None:
            await self.before_many()
        if self.fail_many:
            raise ValueError("batch")
        return [{"name": Op(x).name, "ok": None if x in self.busy_names else True, "out": f"{x}!!"} for x in labels]


def always_busy() -> bool:
    return True


async def out(batches: Batches[Op], op: Op) -> str:
    """What the statement that decided ``op`` answered for it."""
    return str((await batches.submit(op))["out"])


def submit(batches: Batches[Op], *labels: str) -> list[asyncio.Future[str]]:
    return [asyncio.ensure_future(out(batches, Op(label))) for label in labels]


async def test_under_backpressure_arrivals_go_together_and_a_name_only_once() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy, limit=3)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    rest = submit(batches, "b", "c", "b#2", "d", "e")
    await asyncio.sleep(0)
    assert script.statements == [["a"]]
    script.gate.set_result(None)
    results = await asyncio.gather(first, *rest)
    # b#2 waits for the statement after b's; at most 3 per statement; the last ones go in the next
    assert script.statements == [["a"], ["b", "c", "d"], ["b#2", "e"]]
    assert results == ["a!", "b!!", "c!!", "b#2!!", "d!!", "e!!"]
    assert (batches.batches, batches.batched) == (2, 5)


async def test_a_slow_statement_holds_back_no_one_past_overdue_from_its_start() -> None:
    # Defect 6: while one statement was slow, every new caller waited the full bound from its own arrival (and a
    # queued one could pay it twice). Now a statement holds others back for OVERDUE from its start, then nobody.
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, overdue=0.05)
    (slow,) = submit(batches, "a")
    await asyncio.sleep(0.03)
    start = time.monotonic()
    assert await asyncio.gather(*submit(batches, "b", "c")) == ["b!!", "c!!"]
    assert time.monotonic() - start < 0.04  # the rest of a's 50 ms, not 50 ms of their own
    start = time.monotonic()
    assert await out(batches, Op("d")) == "d!"  # later: a holds nobody back any more
    assert time.monotonic() - start < 0.02
    assert script.statements == [["a"], ["b", "c"], ["d"]]
    script.gate.set_result(None)
    assert await slow == "a!"


async def test_a_name_in_flight_never_joins_another_statement_even_when_overdue() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()  # the first statement does not answer
    batches: Batches[Op] = Batches(script, ONE, MANY, overdue=0.05)
    (stuck,) = submit(batches, "a")
    await asyncio.sleep(0)
    same, other = submit(batches, "a#2", "b")
    await asyncio.sleep(0.15)
    assert script.statements == [["a"], ["b"]]  # b went once overdue; a#2 still waits for a's statement
    assert await other == "b!"
    assert not same.done()
    script.gate.set_result(None)
    assert (await stuck, await same) == ("a!", "a#2!")
    assert script.statements == [["a"], ["b"], ["a#2"]]


async def test_a_busy_row_sends_its_operation_alone() -> None:
    script = Script(busy_names=frozenset({"c"}))
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    rest = submit(batches, "b", "c", "d")
    await asyncio.sleep(0)
    script.gate.set_result(None)
    assert await asyncio.gather(first, *rest) == ["a!", "b!!", "c!", "d!!"]
    assert script.statements == [["a"], ["b", "c", "d"], ["c"]]


async def test_a_failed_batch_falls_back_to_one_statement_each() -> None:
    script = Script(fail_many=True)
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    rest = submit(batches, "b", "bad", "c")
    await asyncio.sleep(0)
    script.gate.set_result(None)
    assert await first == "a!"
    assert await rest[0] == "b!" and await rest[2] == "c!"
    with pytest.raises(ValueError, match="bad"):
        await rest[1]
    assert script.statements == [["a"], ["b", "bad", "c"], ["b"], ["bad"], ["c"]]
    assert batches.batches == 0


async def gone_mid_batch(script: Script) -> tuple[str, str, list[tuple[str, str]]]:
    """a runs alone; b and c go as one batch, and b's caller leaves while it is in flight. a's and c's answers, and
    the results handed to ``orphaned``."""
    script.gate = asyncio.get_running_loop().create_future()
    orphans: list[tuple[str, str]] = []
    batch_sent = script.stall_batches()
    batches: Batches[Op] = Batches(
        script, ONE, MANY, busy=always_busy, orphaned=lambda op, row: orphans.append((op.label, row["out"]))
    )
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    gone, stays = submit(batches, "b", "c")
    await asyncio.sleep(0)
    script.gate.set_result(None)
    await batch_sent.wait()
    gone.cancel()  # its caller leaves while the batch is in flight
    return await first, await stays, orphans


async def test_a_failed_batch_sends_nothing_for_callers_gone_and_hands_on_what_they_were_granted() -> None:
    # Defect 5: the fallback used to run statements for callers that had left: a lease granted to nobody.
    script = Script(fail_many=True)
    assert await gone_mid_batch(script) == ("a!", "c!", [])
    assert script.statements == [["a"], ["b", "c"], ["c"]]  # no statement for b


async def test_a_result_for_a_caller_gone_is_handed_to_orphaned() -> None:
    assert await gone_mid_batch(Script()) == ("a!", "c!!", [("b", "b!!")])


async def test_a_caller_gone_before_its_statement_is_left_out() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    gone, stays = submit(batches, "b", "c")
    await asyncio.sleep(0)
    gone.cancel()
    script.gate.set_result(None)
    assert (await first, await stays) == ("a!", "c!")
    assert script.statements == [["a"], ["c"]]  # alone: the single statement
    assert batches.batches == 0


async def test_idle_means_nothing_waits() -> None:
    script = Script()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy)
    assert [await out(batches, Op(label)) for label in "abc"] == ["a!", "b!", "c!"]
    assert script.statements == [["a"], ["b"], ["c"]]


async def test_operations_that_arrive_in_one_turn_of_the_loop_go_together_at_once() -> None:
    script = Script()
    batches: Batches[Op] = Batches(script, ONE, MANY)  # the pool is idle: nothing holds them back
    results = await asyncio.gather(*submit(batches, "a", "b", "c"))
    assert results == ["a!!", "b!!", "c!!"]
    assert script.statements == [["a", "b", "c"]]
    assert (batches.batches, batches.batched) == (1, 3)


async def test_one_name_twice_in_one_turn_goes_in_two_statements_one_after_the_other() -> None:
    script = Script()
    batches: Batches[Op] = Batches(script, ONE, MANY)
    results = await asyncio.gather(*submit(batches, "b", "b#2", "c"))
    assert results == ["b!!", "b#2!", "c!!"]
    assert script.statements == [["b", "c"], ["b#2"]]


async def test_the_first_of_a_turn_gone_before_its_statement_leaves_the_others_answered() -> None:
    script = Script()
    batches: Batches[Op] = Batches(script, ONE, MANY)
    first, *rest = submit(batches, "a", "b", "c")
    await asyncio.sleep(0)  # a lets the others join it, and is cancelled while it does
    first.cancel()
    assert await asyncio.wait_for(asyncio.gather(*rest), 2) == ["b!!", "c!!"]
    assert first.cancelled()
    assert script.statements == [["b", "c"]]


async def test_while_every_connection_is_lent_arrivals_wait_for_a_statement_to_finish() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy, overdue=0.01)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0.05)  # a is no longer young, but the pool has no connection for another statement
    rest = submit(batches, "b", "c")
    await asyncio.sleep(0.05)
    assert script.statements == [["a"]]
    script.gate.set_result(None)
    assert await asyncio.gather(first, *rest) == ["a!", "b!!", "c!!"]


async def test_waiting_is_bounded_behind_a_stuck_statement() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()  # the first statement never answers
    batches: Batches[Op] = Batches(script, ONE, MANY, overdue=0.05)
    (stuck,) = submit(batches, "a")
    await asyncio.sleep(0)
    waiting = submit(batches, "b", "c")
    await asyncio.sleep(0.01)
    assert script.statements == [["a"]]  # coalescing: b and c wait for a...
    await asyncio.sleep(0.1)
    assert script.statements == [["a"], ["b", "c"]]  # ...but not longer than `overdue`: they go side by side
    assert [await w for w in waiting] == ["b!!", "c!!"]
    script.gate.set_result(None)
    assert await stuck == "a!"


async def test_a_batch_that_fails_for_everyone_answers_everyone_with_the_error() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()

    async def unavailable() -> None:
        raise StorageUnavailable("acquire_batch: database unavailable (TimeoutError)")

    def shared(error: Exception) -> Exception | None:
        return StorageUnavailable(str(error)) if isinstance(error, StorageUnavailable) else None

    script.before_many = unavailable
    batches: Batches[Op] = Batches(script, ONE, MANY, busy=always_busy, shared=shared)
    (first,) = submit(batches, "a")
    await asyncio.sleep(0)
    rest = submit(batches, "b", "c")
    await asyncio.sleep(0)
    script.gate.set_result(None)
    assert await first == "a!"
    errors = await asyncio.gather(*rest, return_exceptions=True)
    assert all(isinstance(e, StorageUnavailable) for e in errors) and errors[0] is not errors[1]
    assert script.statements == [["a"], ["b", "c"]]  # no second round of statements to wait out


# The store's batched statements on a real Postgres, on a store of the test's own with one connection: a burst
# started in one go runs the first alone, and the others, arriving while the pool is busy, go as one statement.

AT_MOST = timedelta(minutes=10)


async def burst(store: Any, names: list[str], by: str = "node") -> list[Any]:
    return await asyncio.gather(
        *(store.acquire(n, AT_MOST, timedelta(0), f"{by}-{n}") for n in names), return_exceptions=True
    )


async def test_a_burst_of_acquires_and_releases_goes_in_batches(settings: Settings, name: str) -> None:
    async with own_store(settings) as store:
        names = [f"{name}-{i:02}" for i in range(40)]
        leases = await burst(store, names)
        assert all(isinstance(lease, Lease) for lease in leases)
        assert [lease.row.name for lease in leases] == names
        assert [lease.row.locked_by for lease in leases] == [f"node-{n}" for n in names]
        assert len({lease.row.fencing_token for lease in leases}) == 40
        refused = await burst(store, names, by="other")
        assert all(isinstance(r, LockHeld) for r in refused)
        assert [r.details["locked_by"] for r in refused] == [f"node-{n}" for n in names]
        rows = await asyncio.gather(*(store.release(lease.row.name, lease.token) for lease in leases))
        assert [row.name for row in rows] == names
        assert store.acquires.batches > 0 and store.releases.batches > 0  # the witness: batches did run
        again = await burst(store, names, by="third")
        assert all(isinstance(lease, Lease) for lease in again)


async def test_a_burst_on_the_service_store_is_answered_alike(app: FastAPI, name: str) -> None:
    # The service's own store (a wide pool): whether or not the burst coalesced, every caller's answer is its own.
    store = app.state.store
    names = [f"{name}-{i:02}" for i in range(40)]
    leases = await burst(store, names)
    assert [lease.row.name for lease in leases] == names
    await asyncio.gather(*(store.release(lease.row.name, lease.token) for lease in leases))


async def test_a_batch_mixes_free_held_and_stale_tokens_correctly(settings: Settings, name: str) -> None:
    async with own_store(settings) as store:
        held, free, other = f"{name}-a-held", f"{name}-b-free", f"{name}-c"
        holder = await store.acquire(held, AT_MOST, timedelta(0), "holder")
        mine = await store.acquire(other, AT_MOST, timedelta(0), "mine")
        outcomes = await burst(store, [f"{name}-0-first", held, free])
        assert isinstance(outcomes[0], Lease) and isinstance(outcomes[2], Lease)
        assert isinstance(outcomes[1], LockHeld) and outcomes[1].details["locked_by"] == "holder"
        # releases in one burst: a good token, a stale one (never issued for that name), the same lease twice
        results = await asyncio.gather(
            store.release(outcomes[0].row.name, outcomes[0].token),
            store.release(held, mine.token),
            store.release(other, mine.token),
            store.release(other, mine.token),
            return_exceptions=True,
        )
        assert isinstance(results[1], NotHolder)
        released = [results[0], results[2], results[3]]
        assert [getattr(r, "name", r) for r in released] == [outcomes[0].row.name, other, other]
        assert (await store.get(held)).locked_by == "holder"
        assert store.acquires.batches > 0 and store.releases.batches > 0
        await store.release(held, holder.token)


async def test_a_row_java_holds_locked_stalls_only_its_own_caller(
    settings: Settings, db: Any, java: JavaNode, name: str
) -> None:
    # Defect 1: Java's takeover inside an open transaction (ShedLock #3577) keeps the row locked. A batch carrying
    # that name used to wait on it, holding the other names' rows and stalling everyone behind it.
    async with own_store(settings) as store:
        taken, others = f"{name}-a", [f"{name}-{i}" for i in range(6)]
        for row in (taken, *others):  # rows that exist and are free: a batch takes them over, locking them
            await store.release(row, (await store.acquire(row, AT_MOST, timedelta(0), "earlier")).token)
        async with db.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                assert await JavaNode(conn, store.table, hostname="java-host-7").take_over(taken, 600)
                first = asyncio.ensure_future(store.acquire(others[0], AT_MOST, timedelta(0), "node"))
                await asyncio.sleep(0)  # the first holds the one connection: the rest coalesce behind it
                stalled = asyncio.ensure_future(store.acquire(taken, AT_MOST, timedelta(0), "node"))
                rest = [asyncio.ensure_future(store.acquire(o, AT_MOST, timedelta(0), "node")) for o in others[1:]]
                # every other name is granted while Java's transaction is still open...
                leases = await asyncio.wait_for(asyncio.gather(first, *rest), SETTLE)
                assert [lease.row.name for lease in leases] == others
                assert store.acquires.batches > 0
                # ...and none of their rows is left locked: a direct update (another replica, Java) goes at once
                async with db.acquire() as other_conn:
                    await other_conn.execute("SET lock_timeout = '500ms'")
                    await other_conn.execute(
                        f"UPDATE {store.table} SET locked_by = locked_by WHERE name = $1", others[1]
                    )
                assert not stalled.done()  # the taken name's caller waits for Java's row, alone
            finally:
                await tx.commit()
            refused = await asyncio.wait_for(asyncio.gather(stalled, return_exceptions=True), SETTLE)
        assert isinstance(refused[0], LockHeld) and refused[0].details["locked_by"] == "java-host-7"


async def test_releases_and_acquires_in_batches_never_deadlock_on_the_generic_plan(
    settings: Settings, name: str
) -> None:
    # Defect 2: on the generic plan prepared statements settle on, the release batch locked rows in physical order,
    # not name order: two batches over the same rows in different orders deadlocked. Two stores (two processes'
    # pools) release and acquire overlapping names in opposite orders, on a forced generic plan.
    names = [f"{name}-{i:03}" for i in range(60)]
    async with (
        own_store(settings, size=1, plan_cache_mode="force_generic_plan") as one,
        own_store(settings, size=1, plan_cache_mode="force_generic_plan") as two,
    ):
        for _ in range(4):
            mine = await burst(one, names[: len(names) // 2], by="one")
            theirs = await burst(two, names[len(names) // 2 :], by="two")
            leases = [(one, lease) for lease in mine] + [(two, lease) for lease in theirs]
            forward = [s.release(lease.row.name, lease.token) for s, lease in leases if s is one]
            backward = [s.release(lease.row.name, lease.token) for s, lease in reversed(leases) if s is two]
            # meanwhile each store tries to take the other's names, in the other order
            grab_one = burst(one, list(reversed(names)), by="one-grab")
            grab_two = burst(two, names, by="two-grab")
            released, grabbed_one, grabbed_two = await asyncio.gather(
                asyncio.gather(*forward, *backward, return_exceptions=True), grab_one, grab_two
            )
            flat = [*released, *grabbed_one, *grabbed_two]
            assert not [o for o in flat if isinstance(o, asyncpg.DeadlockDetectedError | StorageUnavailable)]
            for store, group in ((one, grabbed_one), (two, grabbed_two)):
                for lease in group:
                    if isinstance(lease, Lease):
                        await store.release(lease.row.name, lease.token)
        assert one.releases.batches > 0 and two.releases.batches > 0


async def test_a_release_batch_never_waits_on_a_locked_row_whatever_the_plan(
    settings: Settings, db: Any, name: str
) -> None:
    # Defect 2's mechanism: a batch that waits on a row while holding others is half of every deadlock. On the
    # generic plan, with a row in the middle locked by another transaction, the batch releases the rest at once.
    names = [f"{name}-{i:02}" for i in range(12)]
    async with own_store(settings, plan_cache_mode="force_generic_plan") as store:
        for _ in range(6):  # past the five runs after which Postgres may settle on the generic plan anyway
            leases = [await store.acquire(n, AT_MOST, timedelta(0), "holder") for n in names]
            await asyncio.gather(*(store.release(lease.row.name, lease.token) for lease in leases))
        leases = [await store.acquire(n, AT_MOST, timedelta(0), "holder") for n in names]
        async with db.acquire() as conn, conn.transaction():
            await conn.execute(f"SELECT FROM {store.table} WHERE name = $1 FOR UPDATE", names[6])
            pending = [asyncio.ensure_future(store.release(lease.row.name, lease.token)) for lease in leases]
            others = [p for i, p in enumerate(pending) if i != 6]
            released = await asyncio.wait_for(asyncio.gather(*others), SETTLE)
            assert [row.name for row in released] == [n for i, n in enumerate(names) if i != 6]
            assert not pending[6].done()  # its caller waits for the row, alone
        assert (await asyncio.wait_for(pending[6], SETTLE)).name == names[6]
        assert store.releases.batches > 0


async def test_a_batch_that_fails_answers_each_caller_as_alone(settings: Settings, name: str) -> None:
    async with own_store(settings) as store:
        names = [f"{name}-{i}" for i in range(5)]
        for n in names:  # rows that exist and are free: a batch takes them over (a name with no row goes alone)
            await store.release(n, (await store.acquire(n, AT_MOST, timedelta(0), "earlier")).token)
        # the HTTP layer refuses such a duration; the database cannot add it to now, so its statement fails
        too_long = timedelta(days=999_999_999)
        outcomes = await asyncio.gather(
            *(store.acquire(n, too_long if i == 2 else AT_MOST, timedelta(0), "node") for i, n in enumerate(names)),
            return_exceptions=True,
        )
        assert all(isinstance(outcomes[i], Lease) for i in (0, 1, 3, 4))
        assert isinstance(outcomes[2], asyncpg.DataError)
        assert store.acquires.batches == 0  # the batch failed; each then ran alone


async def test_a_lease_a_batch_granted_to_a_caller_gone_is_released(settings: Settings, name: str) -> None:
    # Defect 5: a caller that leaves while its batch runs must not leave a lease that blocks the job.
    async with own_store(settings) as store:
        for n in (f"{name}-gone", f"{name}-stays"):  # rows that exist: the batch takes them over
            await store.release(n, (await store.acquire(n, AT_MOST, timedelta(0), "earlier")).token)
        statements = store.statements
        real = statements.fetch
        calls: list[asyncio.Future[Any]] = []

        async def fetch(operation: str, sql: str, *args: Any) -> list[Any]:
            if operation == "acquire_batch":
                calls[0].cancel()  # the caller of "gone" leaves as its batch is sent
            return await real(operation, sql, *args)

        statements.fetch = fetch  # type: ignore[method-assign]
        first = asyncio.ensure_future(store.acquire(f"{name}-0", AT_MOST, timedelta(0), "first"))
        await asyncio.sleep(0)
        calls.append(asyncio.ensure_future(store.acquire(f"{name}-gone", AT_MOST, timedelta(0), "gone")))
        stays = asyncio.ensure_future(store.acquire(f"{name}-stays", AT_MOST, timedelta(0), "stays"))
        await asyncio.gather(first, stays)
        assert store.acquires.batches == 1 and calls[0].cancelled()
        deadline = time.monotonic() + SETTLE
        while (row := await store.get(f"{name}-gone")).held and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        assert row.locked_by == "gone" and not row.held  # granted by the batch, then released for nobody
