"""Request and response bodies of the HTTP API (the table itself is ``app.db.schema``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from app.locking.durations import DurationError, parse_duration
from app.locking.names import CONTROL_CHARS, HOLDER_MAX
from app.locking.timefmt import format_time


def _to_duration(value: Any) -> timedelta:
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise ValueError(str(exc)) from None


Duration = Annotated[
    timedelta,
    BeforeValidator(_to_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1, "maxLength": 40, "examples": ["10m", "PT10M", "500ms"]},
                {"type": "integer", "minimum": 0, "description": "milliseconds"},
            ],
            "description": "ISO-8601 (PT10M, P1D) or ShedLock's short form (500ms, 30s, 10m, 1h, 2d); "
            "a bare number means milliseconds.",
        }
    ),
]

UtcTime = Annotated[
    datetime,
    PlainSerializer(format_time, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "examples": ["2026-11-29T03:00:00.000Z"],
            "description": "UTC, millisecond precision, from the database clock.",
        }
    ),
]


def reject_control_chars(value: Any) -> Any:
    """A BeforeValidator for free text (a holder, a reason): no C0 or C1 control characters."""
    # Runs before type validation: anything but a string is left for pydantic to refuse (422).
    if isinstance(value, str) and CONTROL_CHARS.search(value):
        raise ValueError("must not contain control characters")
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AcquireRequest(_Body):
    lock_at_most_for: Duration = Field(
        description="How long the lock is held at most if the holder never "
        "releases it (crash). Must be > 0 and within the server's maximum."
    )
    lock_at_least_for: Duration = Field(
        default=timedelta(0),
        description="The lock is kept at least this long "
        "after acquisition, even if released earlier. 0 <= value <= lock_at_most_for.",
    )
    holder: Annotated[str | None, BeforeValidator(reject_control_chars)] = Field(
        default=None,
        min_length=1,
        max_length=HOLDER_MAX,
        description="Free text for humans (host, job, pod); recorded in locked_by.",
    )


class ReleaseRequest(_Body):
    token: str = Field(min_length=1, max_length=256, description="The lease token returned by acquire.")


class ExtendRequest(_Body):
    token: str = Field(min_length=1, max_length=256, description="The lease token returned by acquire.")
    lock_at_most_for: Duration = Field(description="New lock_until = database now + this.")
    lock_at_least_for: Duration | None = Field(
        default=None, description="Optional new at-least window, still measured from the original locked_at."
    )


class AcquireResponse(BaseModel):
    name: str
    acquired: bool = True
    token: str = Field(description="Secret lease token; needed to release or extend. Not shown anywhere else.")
    fencing_token: int = Field(
        description="Strictly increases with every acquisition of this name, "
        "including Java ShedLock acquisitions on the same table."
    )
    locked_at: UtcTime
    lock_until: UtcTime
    locked_by: str = Field(description="Holder text plus a unique lease id; never a bare hostname.")
    db_time: UtcTime


class ReleaseResponse(BaseModel):
    name: str
    released: bool = True
    lock_until: UtcTime = Field(description="max(now, locked_at + lock_at_least_for).")
    db_time: UtcTime


class ExtendResponse(BaseModel):
    name: str
    extended: bool = True
    fencing_token: int
    locked_at: UtcTime
    lock_until: UtcTime
    db_time: UtcTime


class LockView(BaseModel):
    name: str
    locked_by: str
    locked_at: UtcTime
    lock_until: UtcTime
    held: bool = Field(description="lock_until is later than the database's now.")
    fencing_token: int


class LockResponse(LockView):
    db_time: UtcTime


class LockList(BaseModel):
    items: list[LockView]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    db_time: UtcTime


class Health(BaseModel):
    status: str
    detail: str | None = None
