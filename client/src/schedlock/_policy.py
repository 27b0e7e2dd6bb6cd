"""What a scheduled run does when the lock service cannot decide, and who a holder says it is."""

from __future__ import annotations

import enum
import logging
import os
import socket

from schedlock._exceptions import LockHeld, ServiceUnavailable, SlotDone
from schedlock._times import format_time

logger = logging.getLogger("schedlock.client")

#: The service's limit for the free-text holder.
HOLDER_MAX = 128


class OnUnavailable(enum.StrEnum):
    """The service-down policy of ``scheduler_lock`` (and ``schedlock run --fail-open``).

    Applies only to :class:`ServiceUnavailable` (unreachable, timeout, 5xx): a held lock is always a quiet skip, and
    a rejected request (bad name, wrong token) always raises.
    """

    #: Default. Skip the run, log an ERROR, raise nothing into the scheduler. Nobody runs while the service is down.
    FAIL_CLOSED = "fail-closed"
    #: Run anyway, without a lock, after logging a WARNING. Two nodes may run at once while the service is down.
    FAIL_OPEN = "fail-open"
    #: Raise the ServiceUnavailable to the caller.
    RAISE = "raise"


def run_without_lock(policy: OnUnavailable, job: str, name: str, error: ServiceUnavailable) -> bool:
    """Apply the policy to a failed acquire: True to run the job anyway, False to skip it; or re-raise."""
    if policy is OnUnavailable.RAISE:
        raise error
    if policy is OnUnavailable.FAIL_OPEN:
        logger.warning("running %s WITHOUT the lock %r (fail-open): lock service unavailable: %s", job, name, error)
        return True
    logger.error("skipped %s: lock service unavailable, so %r could not be taken (fail-closed): %s", job, name, error)
    return False


def log_skip(job: str, name: str, skip: LockHeld | SlotDone) -> None:
    if isinstance(skip, SlotDone):
        at = format_time(skip.completed_at) if skip.completed_at else "unknown"
        done_by = skip.locked_by
        if skip.stale:
            logger.info(
                "skipped %s: slot %s of lock %r is stale, older than its last completed slot %s "
                "(completed at %s by %s)",
                *(job, skip.slot, name, skip.last_completed_slot, at, done_by),
            )
            return
        logger.info("skipped %s: slot %s of lock %r was completed at %s by %s", job, skip.slot, name, at, done_by)
        return
    until = format_time(skip.lock_until) if skip.lock_until else "unknown"
    logger.info("skipped %s: lock %r is held by %s until %s", job, name, skip.locked_by, until)


def default_holder(what: str | None = None) -> str:
    """Human-readable and unique enough to find the process: ``[what on ]host pid N``."""
    where = f"{socket.gethostname()} pid {os.getpid()}"
    return clean_holder(f"{what} on {where}" if what else where)


def clean_holder(text: str) -> str:
    """Fit free text into the service's holder field: no control characters, at most 128 characters."""
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text).strip() or "anonymous"
    return cleaned if len(cleaned) <= HOLDER_MAX else cleaned[: HOLDER_MAX - 1] + "…"
