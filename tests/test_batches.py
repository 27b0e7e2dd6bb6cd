"""Acquires (and releases) of different names that arrive while one is in flight go as one statement
(app.locking.batches): first the mechanism with scripted statements, then the store's batched statements on a real
Postgres, where each caller must get what a statement of its own would have answered."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI

from app.errors import InvalidRequest, LockHeld, NotHolder, StorageUnavailable
from app.locking.batches import Batches
from app.locking.rows import Lease
from tests.support.java import JavaNode


class Script:
    def __init__(self, fail_many: bool = False) -> None:
        self.statements: list[list[str]] = []
        self.gate: asyncio.Future[None] | None = None
        self.fail_many = fail_many

    async def one(self, args: str) -> str:
        self.statements.append([args])
        if self.gate is not None:
            await self.gate
        if args == "bad":
            raise ValueError(args)
        return f"{args}!"

    async def many(self, ops: Sequence[str]) -> list[str]:
        self.statements.append(list(ops))
        if self.fail_many:
            raise ValueError("batch")
        return [f"{op}!!" for op in ops]


def key(args: str) -> str:
    return args.split("#")[0]


async def test_arrivals_during_a_statement_go_together_and_a_name_only_once() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[str, str] = Batches(script.one, script.many, key, limit=3, concurrency=1)
    first = asyncio.ensure_future(batches.submit("a"))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batches.submit(op)) for op in ("b", "c", "b#2", "d", "e")]
    await asyncio.sleep(0)
    assert script.statements == [["a"]]
    script.gate.set_result(None)
    results = await asyncio.gather(first, *rest)
    # b#2 waits for the statement after b's; at most 3 per statement; the last one left goes alone
    assert script.statements == [["a"], ["b", "c", "d"], ["b#2", "e"]]
    assert results == ["a!", "b!!", "c!!", "b#2!!", "d!!", "e!!"]
    assert (batches.batches, batches.batched) == (2, 5)


async def test_a_failed_batch_falls_back_to_one_statement_each() -> None:
    script = Script(fail_many=True)
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[str, str] = Batches(script.one, script.many, key, concurrency=1)
    first = asyncio.ensure_future(batches.submit("a"))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batches.submit(op)) for op in ("b", "bad", "c")]
    await asyncio.sleep(0)
    script.gate.set_result(None)
    assert await first == "a!"
    assert await rest[0] == "b!" and await rest[2] == "c!"
    with pytest.raises(ValueError, match="bad"):
        await rest[1]
    assert script.statements == [["a"], ["b", "bad", "c"], ["b"], ["bad"], ["c"]]
    assert batches.batches == 0


async def test_a_caller_gone_before_its_statement_is_left_out() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[str, str] = Batches(script.one, script.many, key, concurrency=1)
    first = asyncio.ensure_future(batches.submit("a"))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(batches.submit("b"))
    stays = asyncio.ensure_future(batches.submit("c"))
    await asyncio.sleep(0)
    gone.cancel()
    script.gate.set_result(None)
    assert (await first, await stays) == ("a!", "c!")
    assert script.statements == [["a"], ["c"]]  # alone: the single statement
    assert batches.batches == 0


async def test_idle_means_nothing_waits() -> None:
    script = Script()
    batches: Batches[str, str] = Batches(script.one, script.many, key, concurrency=1)
    assert [await batches.submit(op) for op in "abc"] == ["a!", "b!", "c!"]
    assert script.statements == [["a"], ["b"], ["c"]]


async def test_callers_wait_only_beyond_the_statements_allowed_in_flight() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()
    batches: Batches[str, str] = Batches(script.one, script.many, key, concurrency=2)
    calls = [asyncio.ensure_future(batches.submit(op)) for op in "abcd"]
    await asyncio.sleep(0)
    assert script.statements == [["a"], ["b"]]  # two at once, each alone; c and d wait to go together
    script.gate.set_result(None)
    assert await asyncio.gather(*calls) == ["a!", "b!", "c!!", "d!!"]
    assert script.statements == [["a"], ["b"], ["c", "d"]]


# The store's batched statements on a real Postgres. A burst started in one go: the first runs alone, the others
# arrive while it is in flight and go as one statement (the counters say so).

AT_MOST = timedelta(minutes=10)


async def burst(store: Any, names: list[str], by: str = "node") -> list[Any]:
    return await asyncio.gather(
        *(store.acquire(n, AT_MOST, timedelta(0), f"{by}-{n}") for n in names), return_exceptions=True
    )


async def test_a_burst_of_acquires_and_releases_goes_in_batches(app: FastAPI, name: str) -> None:
    store = app.state.store
    names = [f"{name}-{i:02}" for i in range(40)]
    before = (store.acquires.batches, store.releases.batches)
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
    assert (store.acquires.batches, store.releases.batches) > before  # the witness: batches did run
    assert store.releases.batches > before[1]
    again = await burst(store, names, by="third")
    assert all(isinstance(lease, Lease) for lease in again)


async def test_a_batch_mixes_free_held_and_stale_tokens_correctly(app: FastAPI, db: Any, name: str) -> None:
    store = app.state.store
    held, free, other = f"{name}-a-held", f"{name}-b-free", f"{name}-c"
    holder = await store.acquire(held, AT_MOST, timedelta(0), "holder")
    mine = await store.acquire(other, AT_MOST, timedelta(0), "mine")
    outcomes = await burst(store, [f"{name}-0-first", f"{name}-0-second", held, free])
    outcomes = [outcomes[0], *outcomes[2:]]  # the second: so that held and free are batched with CONCURRENCY 2 too
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
    await store.release(held, holder.token)


async def test_a_batch_waits_for_a_java_takeover_and_reports_java_as_the_holder(
    app: FastAPI, db: Any, java: JavaNode, name: str
) -> None:
    store = app.state.store
    taken = f"{name}-a"
    lease = await store.acquire(taken, AT_MOST, timedelta(0), "earlier")
    await store.release(taken, lease.token)  # free now, in every snapshot
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            takeover = JavaNode(conn, store.table, hostname="java-host-7")
            assert await takeover.take_over(taken, 600)  # Java has the row, not yet committed
            before = store.acquires.batches
            # the first goes alone (two with CONCURRENCY 2); the rest wait and go as one batch
            names = [f"{name}-0", f"{name}-1", taken, f"{name}-b", f"{name}-c"]
            pending = asyncio.ensure_future(burst(store, names))
            await asyncio.sleep(0.3)
            assert not pending.done()  # the batch waits for Java's commit on the row
        finally:
            await tx.commit()
        outcomes = await asyncio.wait_for(pending, 10)
    assert store.acquires.batches == before + 1
    assert isinstance(outcomes[2], LockHeld) and outcomes[2].details["locked_by"] == "java-host-7"
    assert all(isinstance(o, Lease) for o in (outcomes[0], outcomes[1], outcomes[3], outcomes[4]))


async def test_a_batch_that_fails_answers_each_caller_as_alone(app: FastAPI, name: str) -> None:
    store = app.state.store
    too_long = f"{name}-" + "x" * 80  # the HTTP layer refuses it; the table's column (64) makes its statement fail
    before = store.acquires.batches
    outcomes = await burst(store, [f"{name}-0", f"{name}-1", f"{name}-a", too_long, f"{name}-b"])
    assert all(isinstance(outcomes[i], Lease) for i in (0, 1, 2, 4))
    assert isinstance(outcomes[3], InvalidRequest) and outcomes[3].details["field"] == "name"  # its own 422
    assert store.acquires.batches == before  # the batch failed; each then ran alone


async def test_waiting_is_bounded_behind_a_stuck_statement() -> None:
    script = Script()
    script.gate = asyncio.get_running_loop().create_future()  # the first statement never answers
    batches: Batches[str, str] = Batches(script.one, script.many, key, overdue=0.05, concurrency=1)
    stuck = asyncio.ensure_future(batches.submit("a"))
    await asyncio.sleep(0)
    waiting = [asyncio.ensure_future(batches.submit(op)) for op in ("b", "c")]
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

    async def unavailable(ops: Sequence[str]) -> list[str]:
        script.statements.append(list(ops))
        raise StorageUnavailable("acquire_batch: database unavailable (TimeoutError)")

    def shared(error: Exception) -> Exception | None:
        return StorageUnavailable(str(error)) if isinstance(error, StorageUnavailable) else None

    batches: Batches[str, str] = Batches(script.one, unavailable, key, shared, concurrency=1)
    first = asyncio.ensure_future(batches.submit("a"))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(batches.submit(op)) for op in ("b", "c")]
    await asyncio.sleep(0)
    script.gate.set_result(None)
    assert await first == "a!"
    errors = await asyncio.gather(*rest, return_exceptions=True)
    assert all(isinstance(e, StorageUnavailable) for e in errors) and errors[0] is not errors[1]
    assert script.statements == [["a"], ["b", "c"]]  # no second round of statements to wait out
