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

The statements come with the runner that runs them (app.db.runner.Statements, or anything with its ``fetch``), so a
caller goes from its store to the runner through this one object, and nothing here knows a lock or a database: the
single statement takes an operation's fields as its arguments and answers its row, or none; the batched one takes
one array per field and answers a row per name it decided, whose ``ok`` is NULL when another transaction held that
row locked (BUSY).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar

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
    """An operation on one name: a tuple of its statement's arguments (a NamedTuple), the name among them."""

    @property
    def name(self) -> str: ...

    def __iter__(self) -> Iterator[Any]: ...


class Runner(Protocol):
    """What runs a statement: ``fetch(operation, sql, *args)``, its rows (app.db.runner.Statements)."""

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]: ...


#: A statement as the runner takes it: the operation it is observed as, and its SQL.
Statement = tuple[str, str]
Op = TypeVar("Op", bound=Operation)


def _not_shared(_: Exception) -> Exception | None:
    return None


def _never_busy() -> bool:
    return False


def _keep(_op: object, _result: object) -> None:
    return None


class Batches(Generic[Op]):
    """``submit(op)``: ``runner`` runs ``one``, the single statement, or ``many``, the batched one (see above); an
    operation's result is its row, or None. ``busy()`` says whether every pool connection is lent (then callers wait
    for a statement of this kind to finish); ``shared(error)``, for a batch that failed, a copy of the error for each
    caller if it is everyone's, else None; ``orphaned(op, row)`` is told of a result whose caller went away."""

    def __init__(
        self,
        runner: Runner,
        one: Statement,
        many: Statement,
        *,
        busy: Callable[[], bool] = _never_busy,
        shared: Callable[[Exception], Exception | None] = _not_shared,
        orphaned: Callable[[Op, Any], None] = _keep,
        limit: int = LIMIT,
        overdue: float = OVERDUE,
    ) -> None:
        self._runner, self._one_sql, self._many_sql = runner, one, many
        self._busy, self._shared, self._orphaned = busy, shared, orphaned
        self._limit, self._overdue = limit, overdue
        self._in_flight = 0
        self._young = 0  # statements in flight for less than OVERDUE: they hold back what arrives
        self._names: set[str] = set()  # names in a statement in flight
        self._pending: list[tuple[Op, asyncio.Future[Any]]] = []
        self._leading = False  # an operation is letting this turn's others join it
        self._tasks: set[asyncio.Task[None]] = set()
        #: Statements run, and operations they carried (batched ones only), what the tests look at.
        self.batches = 0
        self.batched = 0

    async def submit(self, op: Op) -> Any:
        """``op``'s result, from its own statement or a batched one, as early as the rules above allow."""
        if self._leading or self._pending or op.name in self._names or self._held_back():
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
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

    async def _own(self, op: Op) -> Any:
        """The caller's own statement, run in its own task."""
        end = self._begin({op.name})
        try:
            return await self._one(op)
        finally:
            end()
            self._dispatch()

    async def _one(self, op: Op) -> Any:
        """The single statement: the operation's row, or None."""
        rows = await self._runner.fetch(*self._one_sql, *op)
        return rows[0] if rows else None

    async def _many(self, ops: Sequence[Op]) -> list[Any]:
        """The batched statement: each operation's row, None, or BUSY."""
        rows = await self._runner.fetch(*self._many_sql, *(list(column) for column in zip(*ops, strict=True)))
        by_name = {row["name"]: row for row in rows}
        return [BUSY if (row := by_name.get(op.name)) is not None and row["ok"] is None else row for op in ops]

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
        batch: list[tuple[Op, asyncio.Future[Any]]] = []
        later: list[tuple[Op, asyncio.Future[Any]]] = []
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

    async def _run(self, batch: list[tuple[Op, asyncio.Future[Any]]]) -> None:
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

    async def _together(self, batch: list[tuple[Op, asyncio.Future[Any]]]) -> None:
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

    async def _alone(self, op: Op, waiter: asyncio.Future[Any]) -> None:
        try:
            result = await self._one(op)
        except Exception as exc:
            if not waiter.done():
                waiter.set_exception(exc)
            return
        self._answer(op, waiter, result)

    def _answer(self, op: Op, waiter: asyncio.Future[Any], result: Any) -> None:
        if waiter.done():
            self._orphaned(op, result)
        else:
            waiter.set_result(result)
