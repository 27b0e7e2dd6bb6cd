"""Coalescing of one operation per key: while a caller's statement for a key is in flight, the callers that arrive
for the same key wait; when it is done, they go as one group. The group's first caller runs its own statement, and
that outcome decides the others without a statement of their own, exactly as if each had run right after it
(LockStore.acquire: the first takes the lock or finds it held; either way the others find it held). A caller joins
only a group whose statement has not been sent, so its answer is the state of the lock at a moment between its
arrival and its answer, as a statement of its own would have been.

A key is never in two statements at once: the callers behind a slow statement wait for it (its database timeouts
bound it), rather than send a second one that would queue on the same row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """A statement's result: the leader's own, or a follower's answer derived from it."""

    value: T


@dataclass(frozen=True, slots=True)
class Failed:
    """A statement's error: the leader's own, or a follower's error derived from it."""

    error: BaseException


@dataclass(frozen=True, slots=True)
class Alone:
    """A follower that must run its own statement after all."""


@dataclass(frozen=True, slots=True)
class Lead:
    """A follower that leads the next group: it runs its statement, and ``followers`` wait on it."""

    followers: list[asyncio.Future[Any]]


Outcome = Answer[T] | Failed
#: What a waiting caller is told.
Role = Answer[T] | Failed | Alone | Lead
#: Given the outcome of the statement a caller queued behind, that caller's answer, its error, or Alone.
Follow = Callable[[Outcome[T]], Answer[T] | Failed | Alone]


class Flights(Generic[T]):
    """``run(key, attempt, follow)``: ``attempt()`` runs the caller's own statement; ``follow`` decides for the
    callers that queued behind it."""

    def __init__(self) -> None:
        # A key is here while a statement for it is in flight; its list holds the callers that arrived meanwhile.
        self._queues: dict[str, list[asyncio.Future[Role[T]]]] = {}

    def waiting(self, key: str) -> int | None:
        """How many callers wait behind the statement in flight for ``key``; None if none is in flight."""
        queue = self._queues.get(key)
        return None if queue is None else sum(not w.done() for w in queue)

    async def run(self, key: str, attempt: Callable[[], Awaitable[T]], follow: Follow[T]) -> T:
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = []
            return await self._lead(key, attempt, follow, [])
        waiter: asyncio.Future[Role[T]] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            role = await waiter
        except asyncio.CancelledError:
            # Told to lead just before the cancellation reached this caller: its group is not left waiting.
            if waiter.done() and not waiter.cancelled() and isinstance(lead := waiter.result(), Lead):
                self._settle(key, lead.followers, Failed(asyncio.CancelledError()), follow)
            raise
        match role:
            case Lead(followers):
                return await self._lead(key, attempt, follow, followers)
            case Alone():
                return await attempt()
            case Failed(error):
                raise error
            case Answer(value):
                return value

    async def _lead(
        self, key: str, attempt: Callable[[], Awaitable[T]], follow: Follow[T], followers: list[asyncio.Future[Role[T]]]
    ) -> T:
        try:
            result = await attempt()
        except BaseException as exc:
            self._settle(key, followers, Failed(exc), follow)
            raise
        self._settle(key, followers, Answer(result), follow)
        return result

    def _settle(
        self, key: str, followers: list[asyncio.Future[Role[T]]], outcome: Outcome[T], follow: Follow[T]
    ) -> None:
        """Answer the group that followed a statement, then start the next one (whoever arrived meanwhile)."""
        for waiter in followers:
            if not waiter.done():
                waiter.set_result(follow(outcome))
        arrived = [w for w in self._queues.get(key, ()) if not w.done()]
        if arrived:
            self._queues[key] = []
            arrived[0].set_result(Lead(arrived[1:]))
        else:
            self._queues.pop(key, None)
