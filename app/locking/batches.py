"""Coalescing of one kind of statement across names: while a statement of the kind is in flight, the operations that
arrive wait, and go together as one statement over arrays when it is done: one round trip, one transaction, one
WAL flush for many locks (the group commit etcd does with its raft proposals). docs/performance.md, "Coalescing".

- A caller that finds no statement of its kind in flight (fewer than CONCURRENCY) runs its own, the single-name
  statement, at once: at low load nothing waits and nothing changes.
- One statement holds each name at most once. A second operation on a name already in the batch waits for the next
  one, so it is decided after the first, exactly as if it had come after it.
- A batch whose statement fails falls back to one statement per operation, side by side: each caller gets what its
  own statement answers (a deadlock with another process's batch, a value one row cannot take, anything), unless
  ``shared`` says the failure is everyone's: the database unavailable, where their own statements would only wait
  out the same timeouts again. Then each caller gets that error.
- Waiting is bounded: if the statement in flight has not answered within OVERDUE (a stuck database, a lost
  connection), what waits goes at once as another statement, side by side, as it would have without coalescing.
  So a caller's time stays within the database timeouts it had before, plus OVERDUE at most.
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
#: Statements of a kind in flight before callers wait to go together. 1 makes every caller that arrives during a
#: statement wait for it; 2 was tried so that moderate loads would not wait at all, and did worse at the tail of the
#: 500 cycles/s run as well as under full load (docs/performance.md, "Coalescing").
CONCURRENCY = 1
#: Seconds an operation waits for the statement in flight before going in a statement of its own, side by side. A
#: statement takes milliseconds; one that takes this long is stuck, or the machine is saturated.
OVERDUE = 0.05


class Batches(Generic[A, R]):
    """``submit(args)``: ``one(args)`` runs the single statement; ``many([args, ...])`` the batched one, returning a
    result per operation in the same order; ``key(args)`` is the name an operation is on; ``shared(error)``, for a
    batch that failed, a copy of the error for each caller if it is everyone's, else None (one statement each)."""

    def __init__(
        self,
        one: Callable[[A], Awaitable[R]],
        many: Callable[[Sequence[A]], Awaitable[Sequence[R]]],
        key: Callable[[A], str],
        shared: Callable[[Exception], Exception | None] = lambda _: None,
        limit: int = LIMIT,
        overdue: float = OVERDUE,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self._one, self._many, self._key, self._shared = one, many, key, shared
        self._limit, self._overdue, self._concurrency = limit, overdue, concurrency
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._pending: list[tuple[A, asyncio.Future[R]]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Statements run, and operations they carried (batched ones only), what the tests look at.
        self.batches = 0
        self.batched = 0

    async def submit(self, args: A) -> R:
        if self._in_flight < self._concurrency and not self._pending:
            self._in_flight += 1
            try:
                return await self._one(args)
            finally:
                self._in_flight -= 1
                self._dispatch()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[R] = loop.create_future()
        self._pending.append((args, waiter))
        if self._timer is None:
            self._timer = loop.call_later(self._overdue, self._on_overdue)
        return await waiter

    def _on_overdue(self) -> None:
        """The statement in flight is slow: what waits goes now, side by side with it."""
        self._timer = None
        self._dispatch()

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
        loop = asyncio.get_running_loop()
        if self._timer is not None and not later:  # nobody waits any more: the clock starts with the next one
            self._timer.cancel()
            self._timer = None
        elif later and self._timer is None:  # left for a later statement: bounded like the rest
            self._timer = loop.call_later(self._overdue, self._on_overdue)
        if not batch:
            return
        self._in_flight += 1
        task = loop.create_task(self._run(batch))
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
            self._pending, self._in_flight = [], 0
            raise
        self._in_flight -= 1
        self._dispatch()

    async def _together(self, batch: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            results = await self._many([args for args, _ in batch])
        except Exception as exc:
            if self._shared(exc) is None:
                await asyncio.gather(*(self._alone(args, waiter) for args, waiter in batch))
                return
            for _, waiter in batch:
                error = self._shared(exc)
                if not waiter.done() and error is not None:
                    waiter.set_exception(error)
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
