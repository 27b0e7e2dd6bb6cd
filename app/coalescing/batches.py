"""Coalescing of one kind of statement across names: while a statement of the kind is in flight, the operations that
arrive wait, and go together as one statement over arrays when it is done: one round trip, one transaction, one
WAL flush for many locks (group commit, as databases do while the log is busy). docs/performance.md, "Coalescing".

- A caller that finds no statement of its kind in flight lets the event loop's turn end first (one pass of the
  ready callbacks, ``sleep(0)``): the operations that arrive in that turn, from requests read in the same poll,
  join it in one statement. Alone, it then runs its own: at low load nothing waits but that pass.
- A statement in flight for OVERDUE no longer holds anyone back (a stuck database, a lost connection): what waits
  goes at once, side by side, and later callers do not wait for it at all. So no caller waits more than OVERDUE
  after the statement it queued behind started, however slow that statement is. While every connection of the pool
  is lent, what arrives waits for one of this kind's statements to finish: it would only queue for a connection.
- A name is never in two statements at once: an operation on a name in a statement in flight waits for it, so it
  is decided after it, exactly as if it had come after it.
- A batched statement never waits on a row lock: an operation whose row another transaction has locked comes back
  ``BUSY`` and its caller runs its own statement, waiting for that row alone.
- A batch whose statement fails falls back to one statement per operation, side by side, unless ``shared`` says the
  failure is everyone's (the database unavailable: their own statements would wait out the same timeouts again).
- A caller that goes away before its statement is sent is left out; one that goes away while it runs is handed to
  ``orphaned`` with its result (the store releases a lease granted to nobody).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Generic, Protocol, TypeVar

#: Operations per statement, at most: a batch of this many takes a few milliseconds; more would only wait longer.
LIMIT = 64
#: Seconds a statement in flight holds back the operations that arrive. A statement takes milliseconds; one that
#: takes this long is stuck, or the machine is saturated.
OVERDUE = 0.05


class Busy:
    """A batched statement's answer for an operation whose row another transaction had locked."""

    def __repr__(self) -> str:
        return "BUSY"


BUSY: Final = Busy()


class Operation(Protocol):
    @property
    def name(self) -> str: ...


Op = TypeVar("Op", bound=Operation)
R = TypeVar("R")


def _not_shared(_: Exception) -> Exception | None:
    return None


def _never_busy() -> bool:
    return False


def _keep(_op: object, _result: object) -> None:
    return None


class Batches(Generic[Op, R]):
    """``submit(op)``: ``one(op)`` runs the single statement; ``many([op, ...])`` the batched one, returning a result
    (or BUSY) per operation in the same order. ``busy()`` says whether every pool connection is lent (then callers
    wait for a statement of this kind to finish); ``shared(error)``, for a batch that failed, a copy of the error for
    each caller if it is everyone's, else None; ``orphaned(op, result)`` is told of a result whose caller went away."""

    def __init__(
        self,
        one: Callable[[Op], Awaitable[R]],
        many: Callable[[Sequence[Op]], Awaitable[Sequence[R | Busy]]],
        *,
        busy: Callable[[], bool] = _never_busy,
        shared: Callable[[Exception], Exception | None] = _not_shared,
        orphaned: Callable[[Op, R], None] = _keep,
        limit: int = LIMIT,
        overdue: float = OVERDUE,
    ) -> None:
        self._one, self._many, self._busy, self._shared, self._orphaned = one, many, busy, shared, orphaned
        self._limit, self._overdue = limit, overdue
        self._in_flight = 0
        self._young = 0  # statements in flight for less than OVERDUE: they hold back what arrives
        self._names: set[str] = set()  # names in a statement in flight
        self._pending: list[tuple[Op, asyncio.Future[R]]] = []
        self._leading = False  # an operation is letting this turn's others join it
        self._tasks: set[asyncio.Task[None]] = set()
        #: Statements run, and operations they carried (batched ones only), what the tests look at.
        self.batches = 0
        self.batched = 0

    async def submit(self, op: Op) -> R:
        """``op``'s result, from its own statement or a batched one, as early as the rules above allow."""
        if self._leading or self._pending or op.name in self._names or self._held_back():
            waiter: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._pending.append((op, waiter))
            return await waiter
        self._leading = True  # until the turn ends, what arrives joins this operation
        try:
            await asyncio.sleep(0)
        except BaseException:  # gone before its statement: what joined it goes without it
            self._leading = False
            self._dispatch()
            raise
        self._leading = False
        if not self._pending and op.name not in self._names and not self._held_back():
            return await self._own(op)
        waiter = asyncio.get_running_loop().create_future()
        self._pending.insert(0, (op, waiter))
        self._dispatch()
        return await waiter

    def _held_back(self) -> bool:
        """Whether what arrives now waits: a statement of this kind is young, or every connection is lent."""
        return self._young > 0 or (self._in_flight > 0 and self._busy())

    async def _own(self, op: Op) -> R:
        """The caller's own statement, run in its own task."""
        end = self._begin({op.name})
        try:
            return await self._one(op)
        finally:
            end()
            self._dispatch()

    def _begin(self, names: set[str]) -> Callable[[], None]:
        """Count a statement in flight (young until OVERDUE); the function returned ends it."""
        self._in_flight += 1
        self._young += 1
        self._names |= names
        aged = asyncio.get_running_loop().call_later(self._overdue, self._aged)

        def end() -> None:
            self._in_flight -= 1
            self._names -= names
            if not aged.cancelled():
                aged.cancel()
                self._young -= 1

        return end

    def _aged(self) -> None:
        """A statement has been in flight for OVERDUE: it holds nobody back any more."""
        self._young -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Send what waits as one statement, unless a young statement or a full pool holds it back."""
        if not self._pending or self._held_back():
            return
        batch: list[tuple[Op, asyncio.Future[R]]] = []
        later: list[tuple[Op, asyncio.Future[R]]] = []
        names: set[str] = set()
        for op, waiter in self._pending:
            if waiter.done():  # its caller went away before the statement was sent
                continue
            if op.name in names or op.name in self._names or len(batch) >= self._limit:
                later.append((op, waiter))
            else:
                names.add(op.name)
                batch.append((op, waiter))
        self._pending = later
        if batch:
            self._start(self._run(batch), names)

    def _start(self, work: Awaitable[None], names: set[str]) -> None:
        end = self._begin(names)

        async def run() -> None:
            try:
                await work
            finally:
                end()
            self._dispatch()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[Op, asyncio.Future[R]]]) -> None:
        try:
            if len(batch) == 1:
                await self._alone(*batch[0])
            else:
                await self._together(batch)
        except BaseException:  # cancelled: the loop is shutting down. Nobody is left waiting.
            for _, waiter in (*batch, *self._pending):
                waiter.cancel()
            self._pending = []
            raise

    async def _together(self, batch: list[tuple[Op, asyncio.Future[R]]]) -> None:
        try:
            results = await self._many([op for op, _ in batch])
        except Exception as exc:
            if self._shared(exc) is None:
                await asyncio.gather(*(self._alone(op, waiter) for op, waiter in batch if not waiter.done()))
                return
            for _, waiter in batch:
                error = self._shared(exc)
                if not waiter.done() and error is not None:
                    waiter.set_exception(error)
            return
        self.batches += 1
        self.batched += len(batch)
        busy = []
        for (op, waiter), result in zip(batch, results, strict=True):
            if isinstance(result, Busy):
                busy.append((op, waiter))
            else:
                self._answer(op, waiter, result)
        if busy:  # rows another transaction holds: each waits for its own, outside the batch
            await asyncio.gather(*(self._alone(op, waiter) for op, waiter in busy if not waiter.done()))

    async def _alone(self, op: Op, waiter: asyncio.Future[R]) -> None:
        try:
            result = await self._one(op)
        except Exception as exc:
            if not waiter.done():
                waiter.set_exception(exc)
            return
        self._answer(op, waiter, result)

    def _answer(self, op: Op, waiter: asyncio.Future[R], result: R) -> None:
        if waiter.done():
            self._orphaned(op, result)
        else:
            waiter.set_result(result)
