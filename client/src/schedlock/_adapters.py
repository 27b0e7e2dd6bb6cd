"""What every scheduler adapter does before a run: take the tick's lock, or decide to skip or to run unlocked.

The adapters (``schedlock.apscheduler``, ``schedlock.celery``, ``schedlock.django_cron``) differ in where a
scheduler lets them in and what its "skip" looks like; the decision itself is the same everywhere and lives here,
so that a held lock, a done tick and an outage are logged alike whichever scheduler runs the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import metadata

from schedlock._durations import DurationLike
from schedlock._exceptions import LockHeld, ServiceUnavailable, SlotDone
from schedlock._policy import OnUnavailable, default_holder, log_skip, run_without_lock
from schedlock._sync import Lease, LockClient
from schedlock._times import format_time


@dataclass(frozen=True, slots=True)
class Decision:
    """Run the job (under ``lease``, or without a lock when ``lease`` is None: fail-open), or skip it."""

    run: bool
    lease: Lease | None = None


SKIP = Decision(False)


def slot_of(run_time: datetime) -> str:
    """A scheduled run time as a slot key: the API's time format, the same on every node for the same tick."""
    return format_time(run_time)


def take(
    client: LockClient,
    name: str,
    lock_at_most_for: DurationLike,
    *,
    job: str,
    slot: str | None = None,
    once_per: str | None = None,
    once_per_timezone: str | None = None,
    lock_at_least_for: DurationLike = timedelta(0),
    keep_alive: bool = False,
    holder: str | None = None,
    on_unavailable: OnUnavailable | str | None = None,
) -> Decision:
    """Acquire ``name`` for ``job`` (for ``slot``, or the tick of ``once_per``): a lease, a skip, or the policy's say.

    A held lock or a done slot is a skip, logged at INFO with who holds it or who completed the tick. A
    :class:`ServiceUnavailable` goes to ``on_unavailable`` (default: the client's, fail-closed): fail-closed logs
    an ERROR and skips, fail-open logs a WARNING and runs without a lock, ``raise`` raises. Anything else (a bad
    name, a refused token) raises: a misconfiguration is never mistaken for "another node runs it".
    """
    policy = OnUnavailable(on_unavailable) if on_unavailable is not None else client.on_unavailable
    what = f"{job} (tick {slot})" if slot else job
    try:
        lease = client.acquire(
            name,
            lock_at_most_for,
            lock_at_least_for,
            holder=holder or default_holder(job),
            keep_alive=keep_alive,
            slot=slot,
            once_per=once_per,
            once_per_timezone=once_per_timezone,
        )
    except (LockHeld, SlotDone) as skip:
        log_skip(what, name, skip)
        return SKIP
    except ServiceUnavailable as error:
        return Decision(True) if run_without_lock(policy, what, name, error) else SKIP
    return Decision(True, lease)


def require(module: str, distribution: str, extra: str, major: int | None = None) -> None:
    """Fail the adapter's import with the install line, when its scheduler is missing or of another major version."""
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise ImportError(f"{module} needs {distribution}: pip install 'schedlock[{extra}]'") from None
    if major is not None and not version.startswith(f"{major}."):
        raise ImportError(f"{module} supports {distribution} {major}.x, found {version}")
