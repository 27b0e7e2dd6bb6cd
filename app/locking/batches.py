"""Coalescing of one kind of statement across names: while a statement of the kind is in flight, the operations that
arrive wait, and go together as one statement over arrays when it is done: one round trip, one transaction, one
WAL flush for many locks (the group commit etcd does with its raft proposals). docs/performance.md, "Coalescing".

- A caller that finds no statement of its kind in flight runs its own, the single-name statement, at once: at low
  load nothing waits and nothing changes.
- One statement holds each name at most once. A second operation on a name already in the batch waits for the next
  one, so it is decided after the first, exactly as if it had come after it.
- A batch whose statement fails (the database unavailable, a deadlock with another process's batch, anything) falls
  back to one statement per operation, side by side: each caller gets what its own statement answers.
- An operation joins only a batch whose statement has not been sent; a caller that goes away before then is left
  out. Once sent, the statement runs to its end for everyone in it, even if one caller has gone (a lone statement
  whose client disconnected may have committed too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

A = TypeVar("A")
R = TypeVar("R")

#: Operations per statement, at most: a batch of this many takes a few milliseconds; more would only wait longer.
LIMIT = 64


class Batches(Generic[A, R]):
    """``submit(args)``: ``one(args)`` runs the single statement; ``many([args, ...])`` the batched one, returning a
    result per operation in the same order; ``key(args)`` is the name an operation is on."""

    def __init__(
        self,
        one: Callable[[A], Awaitable[R]],
        many: Callable[[Sequence[A]], Awaitable[Sequence[R]]],
        key: Callable[[A], str],
        limit: int = LIMIT,
    ) -> None:
        self._one, self._many, self._key, self._limit = one, many, key, limit
        self._busy = False
        self._pending: list[tuple[A, asyncio.Future[R]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Statements run, and operations they carried (batched ones only), for the tests and the benchmark.
        self.batches = 0
        self.batched = 0

    async def submit(self, args: A) -> R:
        if not self._busy:
            self._busy = True
            try:
                return await self._one(args)
            finally:
                self._dispatch()
        waiter: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((args, waiter))
        return await waiter

    def _dispatch(self) -> None:
        """Send what has waited, as one statement; or, if nothing has, stand idle."""
        batch: list[tuple[A, asyncio.Future[R]]] = []
        later: list[tuple[A, asyncio.Future[R]]] = []
        names: set[str] = set()
        for args, waiter in self._pending:
            if waiter.done():  # its caller went away before the statement was sent
                continue
            name = self._key(args)
            if name in names or len(batch) >= self._limit:
                later.append((args, waiter))
            else:
                names.add(name)
                batch.append((args, waiter))
        self._pending = later
        if not batch:
            self._busy = False
            return
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            if len(batch) == 1:
                await self._alone(*batch[0])
            else:
                await self._together(batch)
        except BaseException:  # cancelled: the loop is shutting down. Nobody is left waiting.
            for _, waiter in (*batch, *self._pending):
                waiter.cancel()
            self._pending, self._busy = [], False
            raise
        self._dispatch()

    async def _together(self, batch: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            results = await self._many([args for args, _ in batch])
        except Exception:
            await asyncio.gather(*(self._alone(args, waiter) for args, waiter in batch))
            return
        self.batches += 1
        self.batched += len(batch)
        for (_, waiter), result in zip(batch, results, strict=True):
            if not waiter.done():
                waiter.set_result(result)

    async def _alone(self, args: A, waiter: asyncio.Future[R]) -> None:
        try:
            result = await self._one(args)
        except Exception as exc:
            if not waiter.done():
                waiter.set_exception(exc)
            return
        if not waiter.done():
            waiter.set_result(result)

    async def drain(self) -> None:
        """Wait for the statements in flight (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
