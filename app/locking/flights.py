"""Coalescing of one operation per key: while a caller's statement for a key is in flight, the callers that arrive
for the same key wait; when it is done, they go as one group. The group's first caller runs its own statement, and
that outcome decides the others without a statement of their own, exactly as if each had run right after it
(LockStore.acquire: the first takes the lock or finds it held; either way the others find it held, by the first or
by the holder it found). A caller joins only a group whose statement has not been sent yet, so its answer is the
state of the lock at a moment between its arrival and its answer, as a statement of its own would have been.

If the first caller's statement fails (the database is unavailable, the caller is cancelled, anything else), the
others each run their own statement, concurrently, as if nothing had been coalesced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: What ``follow`` returns when a caller must run its own statement after all.
ALONE: Any = object()


class Flights(Generic[T]):
    """``run(key, attempt, follow)``: ``attempt()`` runs the caller's own statement; ``follow(outcome)``, given the
    outcome of the statement a caller queued behind (its result, or the exception it raised), returns that caller's
    result, or ALONE for "run your own statement"."""

    def __init__(self) -> None:
        # A key is here while a statement for it is in flight; its list holds the callers that arrived meanwhile.
        self._queues: dict[str, list[asyncio.Future[Any]]] = {}

    def waiting(self, key: str) -> int | None:
        """How many callers wait behind the statement in flight for ``key``; None if none is in flight."""
        queue = self._queues.get(key)
        return None if queue is None else sum(not w.done() for w in queue)

    async def run(self, key: str, attempt: Callable[[], Awaitable[T]], follow: Callable[[T | BaseException], T]) -> T:
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = []
            return await self._lead(key, attempt, follow, [])
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
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
        arrived = [w for w in self._queues.pop(key, ()) if not w.done()]
        if arrived:
            self._queues[key] = []
            arrived[0].set_result(arrived[1:])
