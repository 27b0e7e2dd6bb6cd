"""What both lease types share: the lease's data and state, loss reporting, and ``assert_locked()``."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from datetime import datetime, timedelta

from schedlock._exceptions import LockLost, NotLocked
from schedlock._keepalive import KeepAlivePlan
from schedlock._models import Acquired, Extended, Released
from schedlock._times import format_time

logger = logging.getLogger("schedlock.client")

#: Called once when a lease is lost, with the LockLost (its ``lease`` and ``__cause__`` say which and why).
#: Sync leases call it from the keep-alive thread; async leases from the event loop.
OnLost = Callable[[LockLost], object]

# The leases the current code runs under (entered as context managers); copied into asyncio tasks it creates.
_current: ContextVar[tuple[LeaseBase, ...]] = ContextVar("schedlock_leases", default=())


class LeaseState(enum.Enum):
    HELD = "held"
    """Acquired, not released, not known to be lost."""
    RELEASED = "released"
    """Released by this process."""
    LOST = "lost"
    """An extension or release was refused, or the lease ran out before keep-alive could extend it."""


class LeaseBase:
    """A lock this process acquired. Shared by :class:`Lease` and :class:`AsyncLease`."""

    def __init__(
        self,
        acquired: Acquired,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        started: float,
        on_lost: OnLost | None,
    ) -> None:
        self._acquired = acquired
        self._lock_at_most_for = lock_at_most_for
        self._lock_at_least_for = lock_at_least_for
        self._on_lost = on_lost
        self._plan = KeepAlivePlan.start(lock_at_most_for, started)
        self._guard = threading.Lock()
        self._released: Released | None = None
        self._context_tokens: list[Token[tuple[LeaseBase, ...]]] = []
        #: Where the lease stands now (see LeaseState).
        self.state = LeaseState.HELD
        #: Until when the server holds the lock for this lease (updated by extend and release).
        self.lock_until: datetime = acquired.lock_until
        #: Why the lease was lost, once it was.
        self.lost_error: LockLost | None = None

    @property
    def name(self) -> str:
        return self._acquired.name

    @property
    def token(self) -> str:
        """The secret lease token (needed to release or extend); never logged, not in ``repr``."""
        return self._acquired.token

    @property
    def fencing_token(self) -> int:
        """Strictly increases with every acquisition of this name: hand it to what the job writes."""
        return self._acquired.fencing_token

    @property
    def locked_at(self) -> datetime:
        return self._acquired.locked_at

    @property
    def locked_by(self) -> str:
        return self._acquired.locked_by

    @property
    def slot(self) -> str | None:
        """The tick this lease runs (``slot`` or ``once_per`` at acquire); None without one (docs/slots.md)."""
        return self._acquired.slot

    @property
    def lock_at_most_for(self) -> timedelta:
        return self._lock_at_most_for

    @property
    def lock_at_least_for(self) -> timedelta:
        return self._lock_at_least_for

    @property
    def expired(self) -> bool:
        """True once the lease has surely run out by this machine's clock (never before the server's lock_until)."""
        return self.state is LeaseState.HELD and time.monotonic() >= self._plan.deadline

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.name!r} fencing_token={self.fencing_token} "
            f"lock_until={format_time(self.lock_until)} state={self.state.value}>"
        )

    def _record_extended(self, result: Extended, started: float, lock_at_most_for: timedelta) -> None:
        with self._guard:
            self.lock_until = result.lock_until
            self._plan.extended(started, lock_at_most_for)

    def _record_released(self, result: Released) -> None:
        with self._guard:
            self._released = result
            self.lock_until = result.lock_until
            if self.state is LeaseState.HELD:
                self.state = LeaseState.RELEASED

    def _lose(self, message: str, cause: BaseException | None) -> LockLost:
        """Mark the lease lost (once), log it, and tell the on_lost callback. Returns the LockLost."""
        with self._guard:
            if self.lost_error is not None:
                return self.lost_error
            error = LockLost(f"lock {self.name!r} lost: {message}", self)
            error.__cause__ = cause
            self.lost_error = error
            self.state = LeaseState.LOST
        logger.error("%s; another holder may be running the same job now", error)
        if self._on_lost is not None:
            try:
                self._on_lost(error)
            except Exception:
                logger.exception("the on_lost callback of lock %r failed", self.name)
        self._lost(error)
        return error

    def _lost(self, error: LockLost) -> None:
        """Called once, when the lease is lost, after ``on_lost``: for what the lease's kind of body needs."""

    def _enter_context(self) -> None:
        self._context_tokens.append(_current.set((*_current.get(), self)))

    def _exit_context(self) -> None:
        if self._context_tokens:
            _current.reset(self._context_tokens.pop())

    def check(self) -> None:
        """Raise LockLost unless this lease still holds its lock (as far as this process can tell)."""
        if self.lost_error is not None:
            raise self.lost_error
        if self.state is LeaseState.RELEASED:
            raise NotLocked(f"lock {self.name!r} was released")
        if self.expired:
            raise LockLost(
                f"lock {self.name!r} has expired (lock_at_most_for {self.lock_at_most_for} passed without an "
                "extension)",
                self,
            )


def assert_locked(name: str | None = None) -> None:
    """Raise unless the calling code runs under a live lease (of ``name``, if given) — ShedLock's ``LockAssert``.

    Sees leases entered as context managers and the bodies of ``scheduler_lock`` functions, in this thread or
    asyncio task (and tasks it creates). Raises :class:`NotLocked` when there is none, :class:`LockLost` when the
    lease was lost or has expired. A fail-open run has no lease, so it raises there too.
    """
    leases = [lease for lease in _current.get() if name is None or lease.name == name]
    if not leases:
        what = f"lock {name!r}" if name else "any lock"
        raise NotLocked(f"this code must run under {what}, but runs under none")
    leases[-1].check()
