# GENERATED from _async.py by scripts/unasync_client.py: do not edit. Change _async.py (its concurrency: _tasks.py,
# twin of _threads.py; the blocking docstrings: in the script), then run: python scripts/unasync_client.py
"""The blocking client, its lease, and keep-alive on a thread."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from types import TracebackType
from typing import ParamSpec, TypeVar

import httpx

from schedlock._base import (
    RELEASE_RETRY_DELAYS,
    Call,
    ClientConfig,
    Tick,
    acquire_call,
    decode,
    extend_call,
    force_release_call,
    get_call,
    history_call,
    jobs_call,
    list_call,
    release_call,
    release_retry_pause,
    runs_call,
    skips_call,
    unreachable,
    windows,
)
from schedlock._durations import DurationLike
from schedlock._exceptions import (
    LockHeld,
    LockLost,
    NotHolder,
    NotLocked,
    RateLimited,
    SchedlockError,
    ServiceUnavailable,
    SlotDone,
)
from schedlock._keepalive import check_keep_alive
from schedlock._lease import LeaseBase, LeaseState, OnLost, logger
from schedlock._models import (
    Acquired,
    Extended,
    ForceReleased,
    JobPage,
    LockInfo,
    LockPage,
    Released,
    RunPage,
    Skips,
)
from schedlock._policy import OnUnavailable, default_holder, log_skip, run_without_lock
from schedlock._threads import SyncKeeper, check_job

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class LockClient:
    """A blocking schedlock client. Thread-safe; use one per process and close it (or use ``with``).

    ``base_url`` and ``token`` default to ``SCHEDLOCK_URL`` (else ``http://127.0.0.1:8000``) and ``SCHEDLOCK_TOKEN``.
    ``holder`` is recorded in ``locked_by`` (default: host and pid). ``on_unavailable`` is the default
    service-down policy of :meth:`scheduler_lock`. Pass ``transport`` or a whole ``http_client`` to control the
    HTTP layer (proxies, TLS, tests); schedlock still sets the URL, auth header and timeout of each request.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        holder: str | None = None,
        on_unavailable: OnUnavailable | str = OnUnavailable.FAIL_CLOSED,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._config = ClientConfig.resolve(base_url, token, timeout, holder, on_unavailable)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(transport=transport)

    @property
    def base_url(self) -> str:
        return self._config.base_url

    @property
    def on_unavailable(self) -> OnUnavailable:
        """What a run does when the service cannot be reached (the scheduler adapters' default)."""
        return self._config.on_unavailable

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_url}>"

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> LockClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method,
                self._config.base_url + call.path,
                json=dict(call.json) if call.json is not None else None,
                params=dict(call.params) if call.params is not None else None,
                headers=self._config.headers(),
                timeout=self._config.timeout,
            )
        except httpx.TransportError as exc:
            raise unreachable(call, self._config.base_url, exc) from exc
        return decode(call, response)

    def acquire(
        self,
        name: str,
        lock_at_most_for: DurationLike,
        lock_at_least_for: DurationLike = 0,
        *,
        holder: str | None = None,
        keep_alive: bool = False,
        on_lost: OnLost | None = None,
        slot: str | None = None,
        once_per: str | None = None,
        once_per_timezone: str | None = None,
    ) -> Lease:
        """Take the lock now or raise :class:`LockHeld` (who holds it, until when); never waits.

        The returned :class:`Lease` is a context manager that releases on exit. With ``keep_alive`` a thread
        extends it every lock_at_most_for / 2 until release (lock_at_most_for must be >= 30s); ``on_lost`` is
        called if it is lost. A network failure raises :class:`ServiceUnavailable`; acquire is not retried, since
        a lost answer may have taken the lock (it then frees itself after lock_at_most_for).

        To run once per tick (docs/slots.md), give ``once_per`` (a cron schedule, read in ``once_per_timezone``,
        default UTC, on the database's clock) or a ``slot`` key of your own: a tick already completed raises
        :class:`SlotDone`, and ``lease.slot`` says which tick the lease runs.
        """
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        if keep_alive:
            check_keep_alive(at_most)
        tick = Tick(slot, once_per, once_per_timezone) if slot or once_per or once_per_timezone else None
        started = time.monotonic()
        who = holder or self._config.holder or default_holder()
        acquired = self._send(acquire_call(name, at_most, at_least or timedelta(0), who, tick))
        return Lease(self, acquired, at_most, at_least or timedelta(0), started, on_lost, keep_alive=keep_alive)

    def release(self, name: str, token: str, completed: bool = True) -> Released:
        """Release a lease by token. Retries network errors and 5xx briefly (release is idempotent), and a 429
        rate_limited after its Retry-After (at most 10 s each time). For a lease with a slot, ``completed=False``
        (the job failed) leaves the tick open for another run."""
        call = release_call(name, token, completed)
        for delay in RELEASE_RETRY_DELAYS:
            try:
                return self._send(call)
            except (ServiceUnavailable, RateLimited) as exc:
                delay = release_retry_pause(exc, delay)  # a 429: its Retry-After, bounded
                logger.warning("release of %r failed, retrying in %gs: %s", name, delay, exc)
                time.sleep(delay)
        return self._send(call)

    def extend(
        self, name: str, token: str, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike | None = None
    ) -> Extended:
        """Move lock_until to the database's now + lock_at_most_for; :class:`NotHolder` once the lease is over."""
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        return self._send(extend_call(name, token, at_most, at_least))

    def get(self, name: str) -> LockInfo:
        """The lock as the database has it; :class:`LockNotFound` if it was never taken."""
        return self._send(get_call(name))

    def list(
        self, *, prefix: str | None = None, held: bool | None = None, limit: int = 100, cursor: str | None = None
    ) -> LockPage:
        """One page of locks in name order, optionally only names starting with ``prefix``, only held/free ones."""
        return self._send(list_call(prefix, held, limit, cursor))

    def iter_locks(
        self, *, prefix: str | None = None, held: bool | None = None, page_size: int = 100
    ) -> Iterator[LockInfo]:
        """Every lock matching the filters, following the pages."""
        cursor: str | None = None
        while True:
            page = self.list(prefix=prefix, held=held, limit=page_size, cursor=cursor)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def history(self, name: str, *, limit: int = 100, cursor: str | None = None) -> RunPage:
        """One page of the runs of ``name``, newest first: who held it, how long, how it ended (docs/history.md)."""
        return self._send(history_call(name, limit, cursor))

    def runs(
        self,
        *,
        prefix: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        ended: bool | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """One page of runs of every lock the token may read, newest first: names starting with ``prefix``,
        acquired in [``since``, ``until``) (aware datetimes), only ended (True) or only running (False) runs."""
        return self._send(runs_call(prefix, since, until, ended, limit, cursor))

    def jobs(
        self, *, prefix: str | None = None, state: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """One page of the jobs the token may read, by name, with their state (docs/jobs.md): names starting with
        ``prefix``; only jobs in ``state`` (``up``, ``late``, ``down``, ``paused``, ``new``)."""
        return self._send(jobs_call(prefix, state, limit, cursor))

    def skips(self, name: str, *, hours: int = 24) -> Skips:
        """Skipped acquire attempts of ``name`` per hour over the last ``hours`` hours."""
        return self._send(skips_call(name, hours))

    def force_release(self, name: str, reason: str) -> ForceReleased:
        """Free ``name`` now, whoever holds it (needs an admin token): its holder's release and extend fail, and
        its keep-alive reports the loss. :class:`LockNotFound` for an unknown name, :class:`Forbidden` without."""
        return self._send(force_release_call(name, reason))

    def scheduler_lock(
        self,
        name: str,
        lock_at_most_for: DurationLike,
        lock_at_least_for: DurationLike = 0,
        *,
        keep_alive: bool = False,
        on_unavailable: OnUnavailable | str | None = None,
        on_lost: OnLost | None = None,
        holder: str | None = None,
        once_per: str | None = None,
        once_per_timezone: str | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
        """Decorate a job so it runs only under the lock, like ShedLock's ``@SchedulerLock``.

        When the lock is held the call is skipped: it returns None and logs at INFO who holds it. It never waits.
        When the service is unavailable, ``on_unavailable`` (default: the client's, fail-closed) decides. For
        ``async def`` jobs use :meth:`AsyncLockClient.scheduler_lock`.

        With ``once_per`` (a cron schedule, in ``once_per_timezone``), the job runs at most once per tick when it
        finishes: a tick already completed is skipped too, and a job that raises leaves its tick open for another
        node (docs/slots.md).
        """
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        if keep_alive:
            check_keep_alive(at_most)
        Tick(once_per=once_per, timezone=once_per_timezone)  # a bad combination fails here, not at the first run
        policy = OnUnavailable(on_unavailable) if on_unavailable is not None else self._config.on_unavailable

        def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
            check_job(func)
            job = func.__qualname__

            @functools.wraps(func)
            def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
                try:
                    lease = self.acquire(
                        name,
                        at_most,
                        at_least or timedelta(0),
                        holder=holder or self._config.holder or default_holder(job),
                        keep_alive=keep_alive,
                        on_lost=on_lost,
                        once_per=once_per,
                        once_per_timezone=once_per_timezone,
                    )
                except (LockHeld, SlotDone) as skip:
                    log_skip(job, name, skip)
                    return None
                except ServiceUnavailable as exc:
                    return func(*args, **kwargs) if run_without_lock(policy, job, name, exc) else None
                with lease:
                    return func(*args, **kwargs)

            return locked

        return decorate


class Lease(LeaseBase):
    """A lock held by this process. ``with lease:`` releases it on exit, also when the body raises.

    Release honours lock_at_least_for (the server keeps the lock until locked_at + lock_at_least_for). A release
    that fails on exit is logged, not raised: the lock then frees itself at ``lock_until``. A body that raised
    releases with ``completed=False``: the lease's slot, if it has one, stays open for another run.
    """

    def __init__(
        self,
        client: LockClient,
        acquired: Acquired,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        started: float,
        on_lost: OnLost | None,
        *,
        keep_alive: bool = False,
    ) -> None:
        super().__init__(acquired, lock_at_most_for, lock_at_least_for, started, on_lost)
        self._client = client
        self._keeper = SyncKeeper()
        if keep_alive:
            self._start_keep_alive()

    def release(self, completed: bool = True) -> Released:
        """Release now (stopping keep-alive). Idempotent: the first release decides. :class:`NotHolder` if the lease
        was lost meanwhile. ``completed=False`` (the job failed) leaves the lease's slot open for another run."""
        self._keeper.stop()
        if self._released is not None:
            return self._released
        try:
            result = self._client.release(self.name, self.token, completed)
        except NotHolder as exc:
            self._lose("release refused: it expired and was taken over before the job finished", exc)
            raise
        self._record_released(result)
        return result

    def extend(
        self, lock_at_most_for: DurationLike | None = None, lock_at_least_for: DurationLike | None = None
    ) -> Extended:
        """Extend to now + lock_at_most_for (default: the acquire's). A refusal marks the lease lost and raises."""
        at_most, at_least = windows(
            self.lock_at_most_for if lock_at_most_for is None else lock_at_most_for, lock_at_least_for
        )
        if self._released is not None:
            raise NotLocked(f"lock {self.name!r} was released; it cannot be extended")
        started = time.monotonic()
        try:
            result = self._client.extend(self.name, self.token, at_most, at_least)
        except (ServiceUnavailable, RateLimited):  # not refused: the lease may well live, try again
            raise
        except SchedlockError as exc:
            self._lose(f"extension refused ({exc})", exc)
            raise
        self._record_extended(result, started, at_most)
        return result

    def __enter__(self) -> Lease:
        self._enter_context()
        self._keeper.enter_body()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit_context()
        self._keeper.exit_body()
        try:
            self.release(completed=exc_type is None)  # a body that raised did not complete its tick
        except NotHolder:
            pass  # already reported as lost
        except SchedlockError as error:
            logger.error("could not release lock %r; it frees itself at its lock_until: %s", self.name, error)
        self._keeper.raise_lost(exc_type, self.lost_error)

    def _lost(self, error: LockLost) -> None:
        self._keeper.lost(error)

    def _start_keep_alive(self) -> None:
        self._keeper.start(self._keep_alive, self.name)

    def _keep_alive(self) -> None:
        while self.state is LeaseState.HELD and self._keeper.pause(self._plan.delay(time.monotonic())):
            try:
                self.extend()
            except (ServiceUnavailable, RateLimited) as exc:  # a 429 is no verdict on the lease either
                if not self._plan.retry_after_failure(time.monotonic()):
                    self._lose("could not be extended before it ran out", exc)
                    return
                logger.warning("could not extend lock %r, retrying: %s", self.name, exc)
            except SchedlockError:
                return  # refused: extend() has marked the lease lost
            except Exception as exc:  # a bug must not leave the lease silently unextended
                self._lose(f"keep-alive failed: {exc!r}", exc)
                return
