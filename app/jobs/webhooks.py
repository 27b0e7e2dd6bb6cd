"""Webhooks on a job's state change (docs/jobs.md): every replica checks the jobs' states every few seconds; the one
whose claim of a change wins writes its events (app.jobs.events); any replica delivers them, signed, retried with
backoff. The URLs and the key are the server's settings (an operator's), never a caller's.

A change from or to ``paused`` is recorded and not posted (a paused job raises nothing), nor is a job's first
state (there is no change to tell). The body is JSON; ``X-Schedlock-Signature: sha256=<hex>`` is the HMAC-SHA256 of
the body's bytes with SCHEDLOCK_JOBS_WEBHOOK_SECRET.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable

import orjson

from app.background import every
from app.jobs.events import Event, Events
from app.jobs.status import Jobs
from app.locking.timefmt import format_time

logger = logging.getLogger("schedlock.jobs")
#: Seconds a receiver has to answer.
TIMEOUT = 5.0
SIGNATURE_HEADER = "X-Schedlock-Signature"


def signature(secret: bytes, body: bytes) -> str:
    """The signature header's value for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def origin(url: str) -> str:
    """``url``'s scheme, host and port alone, for the logs: a webhook's path or query is often its secret (a chat
    service's incoming-webhook URL is the credential), and its user info may hold a password."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def body_of(event: Event) -> bytes:
    return orjson.dumps(
        {
            "event_id": event.id,
            "job": event.name,
            "state": event.state,
            "previous": event.previous,
            "at": format_time(event.at),
            "attempt": event.attempts,
        }
    )


class Notifier:
    """Checks ``jobs``' states and delivers their changes to ``urls``, signed with ``secret``."""

    def __init__(
        self,
        jobs: Jobs,
        events: Events,
        urls: list[str],
        secret: bytes,
        attempts: int,
        counted: Callable[[str], None] | None = None,
    ) -> None:
        self.jobs, self.events, self.urls, self.secret, self.attempts = jobs, events, urls, secret, attempts
        #: Told each POST's result: delivered, failed, or given_up (its last attempt failed); the server's metrics.
        self.counted = counted or (lambda result: None)

    async def check_once(self, page: int = 500) -> int:
        """Claim every job's state change since the last check; how many changes this replica claimed."""
        claimed = 0
        after: str | None = None
        while True:
            found, more, db_time = await self.jobs.store.page(limit=page, after=after, prefix=None, scope=None)
            for status in await self.jobs.statuses(found, db_time) if found else []:
                previous, state = status.job.notified_state, status.state
                if previous == state:
                    continue
                quiet = previous is None or "paused" in (previous, state)
                if await self.events.claim(status.job.name, previous, state, [] if quiet else self.urls):
                    claimed += 0 if quiet else 1
            if not more:
                return claimed
            after = found[-1].name

    async def deliver_once(self, rounds: int = 10) -> int:
        """Post the events due; how many were delivered. A claim holds one event per job and URL (they go in
        order), so while a claim delivers something the next follows, up to ``rounds`` claims (a failed event is
        in its backoff by then: it does not come again)."""
        done = 0
        for _ in range(rounds):
            before = done
            for event in await self.events.due(self.attempts):
                error = await asyncio.to_thread(self._post, event)
                if error is None:
                    await self.events.delivered(event)
                    done += 1
                    self.counted("delivered")
                elif event.attempts < self.attempts:
                    logger.warning(
                        "job %r: webhook to %s failed (attempt %d): %s",
                        event.name,
                        origin(event.url),
                        event.attempts,
                        error,
                    )
                    await self.events.failed(event, error)
                    self.counted("failed")
                else:
                    logger.error(
                        "job %r: webhook to %s failed (attempt %d, the last): %s; event %d (%s -> %s) given up",
                        event.name,
                        origin(event.url),
                        event.attempts,
                        error,
                        event.id,
                        event.previous,
                        event.state,
                    )
                    await self.events.failed(event, error)
                    self.counted("given_up")
            if done == before:
                break
        return done

    def _post(self, event: Event) -> str | None:
        """POST the event; None when the receiver answered 2xx, else what went wrong."""
        body = body_of(event)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(self.secret, body),
            "X-Schedlock-Event": str(event.id),
            "User-Agent": "schedlock-webhooks",
        }
        request = urllib.request.Request(event.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return None if 200 <= response.status < 300 else f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return str(exc)

    async def run_once(self) -> None:
        await self.check_once()
        await self.deliver_once()


@contextlib.asynccontextmanager
async def job_chores(notifier: Notifier | None, interval: float) -> AsyncIterator[None]:
    """While entered (with a ``notifier``): check and deliver every ``interval`` seconds."""
    if notifier is None:
        yield
        return
    async with every(interval, notifier.run_once, "schedlock-job-webhooks", logger):
        yield
