"""Coalescing of one operation per key: while a caller's statement for a key is in flight, the callers that arrive
for the same key wait; when it is done, they go as one group. The group's first caller runs its own statement, and
that outcome decides the others without a statement of their own, exactly as if each had run right after it
(LockStore.acquire: the first takes the lock or finds it held; either way the others find it held, by the first or
by the holder it found). A caller joins only a group whose statement has not been sent yet, so its answer is the
state of the lock at a moment between its arrival and its answer, as a statement of its own would have been.

If the first caller's statement fails, ``follow`` decides for the others: the same error (the database is
unavailable: their own statements would wait out the same timeouts), or each runs its own statement, side by side,
as if nothing had been coalesced (the caller was cancelled, anything else).

Waiting is bounded: if the statement in flight has not answered within app.locking.batches.OVERDUE, the callers
queued behind it start their group at once, side by side with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from app.locking.batches import OVERDUE

T = TypeVar("T")

#: What ``follow`` returns when a caller must run its own statement after all.
ALONE: Any = object()


class Flights(Generic[T]):
    """``run(key, attempt, follow)``: ``attempt()`` runs the caller's own statement; ``follow(outcome)``, given the
    outcome of the statement a caller queued behind (its result, or the exception it raised), returns that caller's
    result, an exception for it to raise, or ALONE for "run your own statement"."""

    def __init__(self, overdue: float = OVERDUE) -> None:
        # A key is here while a statement for it is in flight; its list holds the callers that arrived meanwhile.
        self._queues: dict[str, list[asyncio.Future[Any]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._overdue = overdue

    def waiting(self, key: str) -> int | None:
        """How many callers wait behind the statement in flight for ``key``; None if none is in flight."""
        queue = self._queues.get(key)
        return None if queue is None else sum(not w.done() for w in queue)

    async def run(self, key: str, attempt: Callable[[], Awaitable[T]], follow: Callable[[T | BaseException], T]) -> T:
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = []
            return await self._lead(key, attempt, follow, [])
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        queue.append(waiter)
        if key not in self._timers:
            self._timers[key] = loop.call_later(self._overdue, self._next_group, key, False)
        try:
            role = await waiter
        except asyncio.CancelledError:
            # Resolved just before the cancellation reached this caller: a group it was to lead is not left waiting.
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                role = waiter.result()
                if isinstance(role, list):
                    self._settle(key, role, asyncio.CancelledError(), follow)
            raise
        if isinstance(role, list):  # this caller leads the group: role holds the others
            return await self._lead(key, attempt, follow, role)
        if role is ALONE:
            return await attempt()
        if isinstance(role, BaseException):
            raise role
        return role  # type: ignore[no-any-return]

    async def _lead(
        self,
        key: str,
        attempt: Callable[[], Awaitable[T]],
        follow: Callable[[T | BaseException], T],
        followers: list[asyncio.Future[Any]],
    ) -> T:
        try:
            result = await attempt()
        except BaseException as exc:
            self._settle(key, followers, exc, follow)
            raise
        self._settle(key, followers, result, follow)
        return result

    def _settle(
        self,
        key: str,
        followers: list[asyncio.Future[Any]],
        outcome: T | BaseException,
        follow: Callable[[T | BaseException], T],
    ) -> None:
        """Answer the group that followed a statement, then start the next one (whoever arrived meanwhile)."""
        for waiter in followers:
            if not waiter.done():
                waiter.set_result(follow(outcome))
        self._next_group(key, True)

    def _next_group(self, key: str, statement_done: bool) -> None:
        """Start the group of whoever arrived for ``key``: its statement is done, or overdue."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        arrived = [w for w in self._queues.get(key, ()) if not w.done()]
        if arrived:
            self._queues[key] = []
            arrived[0].set_result(arrived[1:])
        elif statement_done:
            self._queues.pop(key, None)
