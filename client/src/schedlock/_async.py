"""The asyncio client, its lease, and keep-alive as a task that cancels the body when the lock is lost.

The source of the blocking client too: ``scripts/unasync_client.py`` generates ``_sync.py`` from it. Concurrency goes
through ``_tasks.py`` only (its twin is ``_threads.py``): what cannot be generated belongs there.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

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
from schedlock._tasks import AsyncKeeper, check_job

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class AsyncLockClient:
    """The asyncio twin of :class:`LockClient`: same arguments, same calls, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        holder: str | None = None,
        on_unavailable: OnUnavailable | str = OnUnavailable.FAIL_CLOSED,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._config = ClientConfig.resolve(base_url, token, timeout, holder, on_unavailable)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient(transport=transport)

    @property
    def base_url(self) -> str:
        return self._config.base_url

    @property
    def on_unavailable(self) -> OnUnavailable:
        """What a run does when the service cannot be reached (the scheduler adapters' default)."""
        return self._config.on_unavailable

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_url}>"

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncLockClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(
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

    async def acquire(
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
    ) -> AsyncLease:
        """Take the lock now or raise :class:`LockHeld`; never waits. See :meth:`LockClient.acquire`.

        With ``keep_alive``, a task extends the lease; if it is lost, the task running ``async with lease:`` is
        cancelled and the ``async with`` raises :class:`LockLost`.
        """
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        if keep_alive:
            check_keep_alive(at_most)
        tick = Tick(slot, once_per, once_per_timezone) if slot or once_per or once_per_timezone else None
        started = time.monotonic()
        who = holder or self._config.holder or default_holder()
        acquired = await self._send(acquire_call(name, at_most, at_least or timedelta(0), who, tick))
        return AsyncLease(self, acquired, at_most, at_least or timedelta(0), started, on_lost, keep_alive=keep_alive)

    async def release(self, name: str, token: str, completed: bool = True) -> Released:
        """Release a lease by token. Retries network errors and 5xx briefly (release is idempotent), and a 429
        rate_limited after its Retry-After (at most 10 s each time). For a lease with a slot, ``completed=False``
        (the job failed) leaves the tick open for another run."""
        call = release_call(name, token, completed)
        for delay in RELEASE_RETRY_DELAYS:
            try:
                return await self._send(call)
            except (ServiceUnavailable, RateLimited) as exc:
                delay = release_retry_pause(exc, delay)  # a 429: its Retry-After, bounded
                logger.warning("release of %r failed, retrying in %gs: %s", name, delay, exc)
                await asyncio.sleep(delay)
        return await self._send(call)

    async def extend(
        self, name: str, token: str, lock_at_most_for: DurationLike, lock_at_least_for: DurationLike | None = None
    ) -> Extended:
        """Move lock_until to the database's now + lock_at_most_for; :class:`NotHolder` once the lease is over."""
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        return await self._send(extend_call(name, token, at_most, at_least))

    async def get(self, name: str) -> LockInfo:
        """The lock as the database has it; :class:`LockNotFound` if it was never taken."""
        return await self._send(get_call(name))

    async def list(
        self, *, prefix: str | None = None, held: bool | None = None, limit: int = 100, cursor: str | None = None
    ) -> LockPage:
        """One page of locks in name order, optionally only names starting with ``prefix``, only held/free ones."""
        return await self._send(list_call(prefix, held, limit, cursor))

    async def iter_locks(
        self, *, prefix: str | None = None, held: bool | None = None, page_size: int = 100
    ) -> AsyncIterator[LockInfo]:
        """Every lock matching the filters, following the pages."""
        cursor: str | None = None
        while True:
            page = await self.list(prefix=prefix, held=held, limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def history(self, name: str, *, limit: int = 100, cursor: str | None = None) -> RunPage:
        """One page of the runs of ``name``, newest first: who held it, how long, how it ended (docs/history.md)."""
        return await self._send(history_call(name, limit, cursor))

    async def runs(
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
        return await self._send(runs_call(prefix, since, until, ended, limit, cursor))

    async def jobs(
        self, *, prefix: str | None = None, state: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """One page of the jobs the token may read, by name, with their state (docs/jobs.md): names starting with
        ``prefix``; only jobs in ``state`` (``up``, ``late``, ``down``, ``paused``, ``new``)."""
        return await self._send(jobs_call(prefix, state, limit, cursor))

    async def skips(self, name: str, *, hours: int = 24) -> Skips:
        """Skipped acquire attempts of ``name`` per hour over the last ``hours`` hours."""
        return await self._send(skips_call(name, hours))

    async def force_release(self, name: str, reason: str) -> ForceReleased:
        """Free ``name`` now, whoever holds it (needs an admin token): its holder's release and extend fail, and
        its keep-alive reports the loss. :class:`LockNotFound` for an unknown name, :class:`Forbidden` without."""
        return await self._send(force_release_call(name, reason))

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
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Coroutine[Any, Any, R | None]]]:
        """Decorate an ``async def`` job so it runs only under the lock; see :meth:`LockClient.scheduler_lock`.

        With ``keep_alive``, losing the lock cancels the job and the call raises :class:`LockLost`.
        """
        at_most, at_least = windows(lock_at_most_for, lock_at_least_for)
        if keep_alive:
            check_keep_alive(at_most)
        Tick(once_per=once_per, timezone=once_per_timezone)  # a bad combination fails here, not at the first run
        policy = OnUnavailable(on_unavailable) if on_unavailable is not None else self._config.on_unavailable

        def decorate(func: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R | None]]:
            check_job(func)
            job = func.__qualname__

            @functools.wraps(func)
            async def locked(*args: P.args, **kwargs: P.kwargs) -> R | None:
                try:
                    lease = await self.acquire(
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
                    return await func(*args, **kwargs) if run_without_lock(policy, job, name, exc) else None
                async with lease:
                    return await func(*args, **kwargs)

            return locked

        return decorate


class AsyncLease(LeaseBase):
    """A lock held by this process; ``async with lease:`` releases it on exit, also when the body raises.

    Under keep-alive, a lost lock cancels the task that entered ``async with`` and the block raises
    :class:`LockLost` (the way ``asyncio.timeout`` turns its cancellation into ``TimeoutError``).
    """

    def __init__(
        self,
        client: AsyncLockClient,
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
        self._keeper = AsyncKeeper()
        if keep_alive:
            self._start_keep_alive()

    async def release(self, completed: bool = True) -> Released:
        """Release now (stopping keep-alive). Idempotent: the first release decides. :class:`NotHolder` if the lease
        was lost meanwhile. ``completed=False`` (the job failed) leaves the lease's slot open for another run."""
        await self._keeper.stop()
        if self._released is not None:
            return self._released
        try:
            result = await self._client.release(self.name, self.token, completed)
        except NotHolder as exc:
            self._lose("release refused: it expired and was taken over before the job finished", exc)
            raise
        self._record_released(result)
        return result

    async def extend(
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
            result = await self._client.extend(self.name, self.token, at_most, at_least)
        except (ServiceUnavailable, RateLimited):  # not refused: the lease may well live, try again
            raise
        except SchedlockError as exc:
            self._lose(f"extension refused ({exc})", exc)
            raise
        self._record_extended(result, started, at_most)
        return result

    async def __aenter__(self) -> AsyncLease:
        self._enter_context()
        self._keeper.enter_body()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit_context()
        self._keeper.exit_body()
        try:
            await self.release(completed=exc_type is None)  # a body that raised did not complete its tick
        except NotHolder:
            pass  # already reported as lost
        except SchedlockError as error:
            logger.error("could not release lock %r; it frees itself at its lock_until: %s", self.name, error)
        self._keeper.raise_lost(exc_type, self.lost_error)

    def _lost(self, error: LockLost) -> None:
        self._keeper.lost(error)

    def _start_keep_alive(self) -> None:
        self._keeper.start(self._keep_alive, self.name)

    async def _keep_alive(self) -> None:
        while self.state is LeaseState.HELD and await self._keeper.pause(self._plan.delay(time.monotonic())):
            try:
                await self.extend()
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
