"""Request and response bodies of the run-history and force-release routes (docs/history.md)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from app.api.models import UtcTime
from app.locking.names import CONTROL_CHARS
from app.locking.timefmt import as_utc_naive

Outcome = Literal["running", "released", "expired", "taken_over", "force_released"]
REASON_MAX = 500


class RunView(BaseModel):
    name: str
    fencing_token: int = Field(description="The acquisition's fencing token: unique across the table (one sequence).")
    locked_by: str
    token_name: str | None = Field(description="The API token that acquired it; null for Java rows and open servers.")
    source: Literal["api", "table"] = Field(
        description="api: acquired through schedlock; table: by SQL on the table (a Java ShedLock node)."
    )
    acquired_at: UtcTime
    lock_until: UtcTime = Field(description="The lease's latest lock_until (extensions, the at-least window).")
    ended_at: UtcTime | None = Field(description="When the run ended; null while it runs.")
    outcome: Outcome = Field(description="How it ended, or running (docs/history.md, 'How a run ends').")
    duration_ms: int = Field(description="ended_at - acquired_at; while running, the time so far.")
    skipped: int = Field(description="Acquire attempts answered 409 lock_held because this run held the lock.")
    forced_by: str | None = Field(description="force_released: the admin token's name ('anonymous' without tokens).")
    force_reason: str | None


class RunList(BaseModel):
    items: list[RunView] = Field(description="Newest first (by fencing token).")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    db_time: UtcTime


class SkipHourView(BaseModel):
    hour: UtcTime = Field(description="The start of the hour (database clock, UTC).")
    skipped: int


class SkipList(BaseModel):
    name: str
    hours: int
    items: list[SkipHourView] = Field(description="Hours with at least one skip, newest first.")
    total: int
    db_time: UtcTime


def _check_reason(value: Any) -> Any:
    if isinstance(value, str) and CONTROL_CHARS.search(value):
        raise ValueError("must not contain control characters")
    return value


class ForceReleaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, BeforeValidator(_check_reason)] = Field(
        min_length=1, max_length=REASON_MAX, description="Why; recorded in the run and the audit log."
    )


class ForceReleaseResponse(BaseModel):
    name: str
    forced: bool = Field(description="false: the lock was not held, and nothing changed.")
    lock_until: UtcTime
    db_time: UtcTime
    run: RunView | None = Field(description="The run of the lock's current row (null if it has none).")


_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:[Zz]|[+-]\d{2}:?\d{2})?")


def _parse_time(value: Any) -> datetime:
    """An ISO-8601 date-time (not a number, not a bare date) as naive UTC; one without an offset is taken as UTC."""
    if not isinstance(value, str) or not _ISO_TIME.fullmatch(value):
        raise ValueError("expected an ISO-8601 date-time, e.g. 2026-11-29T03:00:00Z")
    try:
        return as_utc_naive(datetime.fromisoformat(value.upper().replace("Z", "+00:00")))
    except (ValueError, OverflowError):  # no such day or hour; outside the calendar once in UTC
        raise ValueError("not a valid date-time") from None


QueryTime = Annotated[datetime, BeforeValidator(_parse_time)]
