"""The campaign's history: one record per operation, as every participant saw it.

A record holds what was asked, what came back (status, body, Retry-After) or how it failed, and when, on the
machine-wide monotonic clock (``time.monotonic()`` is CLOCK_MONOTONIC, shared by every process on the host, so the
clients' and the Java nodes' times compare). The database times the answers carry (``locked_at``, ``lock_until``,
``db_time``) are in the body. Client processes write records as JSON lines; the checker reads them back.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: What a participant did. HTTP: acquire (with or without a slot), extend, release. Java: ShedLock's statements on
#: the table, each answered by the row it wrote (RETURNING): java_acquire, java_extend, java_unlock.
HTTP_KINDS = ("acquire", "extend", "release")
JAVA_KINDS = ("java_acquire", "java_extend", "java_unlock")


@dataclass(frozen=True)
class Op:
    """One operation. ``lease`` ties together the acquire, extends and release of one lease (the participant's own
    id, unique in the run); ``status`` is None for Java statements and for requests that got no answer."""

    id: str
    proc: str
    kind: str
    name: str
    lease: str
    t0: float
    t1: float
    req: dict[str, Any]
    status: int | None = None
    body: dict[str, Any] | None = None
    error: str | None = None
    retry_after: str | None = None

    @property
    def is_java(self) -> bool:
        return self.kind in JAVA_KINDS

    @property
    def ok(self) -> bool:
        """The operation was acknowledged as done (200, or a Java statement that changed its row)."""
        if self.is_java:
            return self.error is None and bool(self.body and self.body.get("ok"))
        return self.status == 200

    @property
    def unknown(self) -> bool:
        """No answer, or a 5xx: the database may or may not have done it."""
        return self.error is not None or (self.status is not None and self.status >= 500)

    @property
    def error_code(self) -> str | None:
        error = (self.body or {}).get("error")
        return error.get("code") if isinstance(error, dict) else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> Op:
        return Op(**json.loads(line))

    def describe(self) -> str:
        """One line for a violation's excerpt."""
        answer = self.error or (f"{self.status} " if self.status is not None else "") + json.dumps(self.body)
        return f"[{self.t0:.3f}..{self.t1:.3f}] {self.proc} {self.kind} {self.name} {json.dumps(self.req)} -> {answer}"


def read_history(paths: list[Path]) -> list[Op]:
    """Every record of every file, in the order the operations started."""
    ops = [Op.from_json(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    return sorted(ops, key=lambda op: (op.t0, op.id))


def db_time(text: str | None) -> datetime | None:
    """An API time (``2026-11-29T03:00:00.000Z``) as naive UTC; None stays None."""
    return None if text is None else datetime.fromisoformat(text.removesuffix("Z"))


def to_api_time(value: datetime) -> str:
    """A database time as the API writes it: naive UTC, truncated to milliseconds (as the server truncates), so
    that Java's microsecond times and the API's compare without a false order."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
