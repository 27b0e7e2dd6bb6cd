"""Whether the database answers, as the log tells it: one line per change, not one per failed attempt.

While the database is down every lock request fails (503) and the pool tries a new connection for each one; a
line (let alone a traceback) per attempt would bury the one fact an operator needs. The log instead carries: the
moment it went down and why, a reminder every ``every`` seconds while it stays down, and the moment it is back
with how long it was gone. Each request's 503 is still in the access log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger("schedlock.db")


class Availability:
    """Told of each database call's outcome (``failed``/``answered``); logs when the state changes."""

    def __init__(self, every: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._down_since: float | None = None
        self._reported_at = 0.0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, what: str, reason: str) -> None:
        """A call failed because the database could not answer: ``what`` was being done, ``reason`` the error's
        name (never its text, which may carry a host or user name)."""
        now = self._clock()
        if self._down_since is None:
            self._down_since = self._reported_at = now
            logger.warning(
                "database unavailable (%s during %s): lock requests get 503 until it answers again",
                reason,
                what,
                extra={"fields": {"database": "down", "reason": reason}},
            )
        elif now - self._reported_at >= self.every:
            self._reported_at = now
            logger.warning(
                "database still unavailable after %.0f s (%s)",
                now - self._down_since,
                reason,
                extra={"fields": {"database": "down", "reason": reason, "down_seconds": round(now - self._down_since)}},
            )

    def answered(self) -> None:
        """A call reached the database (whatever it then said)."""
        if self._down_since is not None:
            seconds = self._clock() - self._down_since
            self._down_since = None
            logger.warning(
                "database available again after %.1f s",
                seconds,
                extra={"fields": {"database": "up", "down_seconds": round(seconds, 1)}},
            )
