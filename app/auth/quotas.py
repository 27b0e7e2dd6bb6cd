"""Quotas: a request rate per principal (a token bucket), so that one runaway job loop cannot starve the fleet.

A principal with a quota may make ``burst`` requests at once and ``rate`` per second after that; one more is
refused (429 ``rate_limited``) with the seconds until a request would pass again (``Retry-After``). Buckets live in
the process: with ``serve --workers N`` each worker counts its own, so the server as a whole allows up to N times
the rate. The table of buckets is bounded: the least recently seen principal's bucket goes first (it comes back
full, which only ever lets a forgotten caller through, never refuses one).

What it costs per request: one dict lookup, a clock read and a few float operations (docs/auth.md, "Quotas").
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.errors import RateLimited


class Quota(BaseModel):
    """A principal's rate: ``rate`` requests per second on average, ``burst`` at once (at least 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float = Field(gt=0, le=1_000_000, description="Requests per second, on average.")
    burst: int | None = Field(default=None, ge=1, le=1_000_000, description="Requests at once; default: the rate.")

    @model_validator(mode="after")
    def _default_burst(self) -> Quota:
        if self.burst is None:
            object.__setattr__(self, "burst", max(1, math.ceil(self.rate)))
        return self

    @property
    def capacity(self) -> int:
        assert self.burst is not None
        return self.burst


#: How many principals' buckets a process keeps (each is a few dozen bytes).
MAX_BUCKETS = 10_000


class RateLimiter:
    """The buckets of every principal with a quota, by principal name. ``on_limited(name)`` counts refusals."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, on_limited: Callable[[str], None] | None = None
    ) -> None:
        self._clock = clock
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # name -> [tokens, last refill]
        self.on_limited = on_limited

    def admit(self, name: str, quota: Quota) -> None:
        """Take one request from ``name``'s bucket, or raise RateLimited saying when to retry."""
        now = self._clock()
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = [float(quota.capacity), now]
            if len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(name)
            bucket[0] = min(float(quota.capacity), bucket[0] + (now - bucket[1]) * quota.rate)
            bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return
        if self.on_limited is not None:
            self.on_limited(name)
        retry_after = max(1, math.ceil((1.0 - bucket[0]) / quota.rate))
        raise RateLimited(
            f"{name!r} is over its quota of {quota.rate:g} requests per second (burst {quota.capacity}); "
            f"retry after {retry_after} s",
            retry_after=retry_after,
        )
