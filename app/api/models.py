"""Request and response bodies of the HTTP API (the table itself is ``app.db.schema``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, StrictBool, WithJsonSchema
from pydantic_core import PydanticCustomError

from app.locking.durations import DurationError, parse_duration
from app.locking.names import CONTROL_CHARS, HOLDER_MAX
from app.locking.slots import SLOT_FORBIDDEN, SLOT_MAX
from app.locking.timefmt import format_time
from app.schedules.cron import SCHEDULE_MAX, TIMEZONE_MAX

_DECIMAL = re.compile(r"-?[0-9]+")
_NOT_AN_INTEGER = "Input should be a valid integer, unable to parse string as an integer"  # pydantic's words


def _query_int(value: Any) -> Any:
    """A query's integer in ASCII digits alone (a leading minus allowed): pydantic's lax int would also take
    " 1", "1\\v", "1_0" or other scripts' digits, which the API's document does not call integers."""
    if isinstance(value, str) and not _DECIMAL.fullmatch(value):
        raise PydanticCustomError("int_parsing", _NOT_AN_INTEGER)
    return value


#: An integer query parameter's check (``limit``, ``hours``): digits only, else 422 as any other invalid integer.
#: It goes after the ``Query(...)`` in the parameter's Annotated (before it, FastAPI documents ``ge`` as "ge").
DIGITS_ONLY = BeforeValidator(_query_int)


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


def _check_slot(value: Any) -> Any:
    # As _check_holder; lone surrogates too, which a JSON parser may let through and no database can store.
    if isinstance(value, str) and SLOT_FORBIDDEN.search(value):
        raise ValueError("must not contain control characters")
    return value


def _absent(value: Any) -> bool:
    # Fields added for slots are left out rather than null when they do not apply: an answer to a request that
    # uses no slot is exactly what it was before slots existed.
    return value is None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AcquireRequest(_Body):
    # Frozen: what was validated is what the endpoint acts on.
    model_config = ConfigDict(extra="forbid", frozen=True)

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
    slot: Annotated[str | None, BeforeValidator(_check_slot)] = Field(
        default=None,
        min_length=1,
        max_length=SLOT_MAX,
        description="Run once per tick: a tick key of the caller's choosing (1-64 characters, no control "
        "characters). If it is the name's last completed slot, the answer is 409 `slot_done`; so it is for a tick "
        "time (`2026-11-30T03:00:00.000Z`, the form times are written in) older than the last completed one "
        "(docs/slots.md). Not with `schedule`.",
        examples=["2026-11-30T03:00:00.000Z"],
    )
    schedule: Annotated[str | None, BeforeValidator(_check_slot)] = Field(
        default=None,
        min_length=1,
        max_length=SCHEDULE_MAX,
        description="Run once per tick of this cron schedule (5 fields, or @hourly, @daily, ...): the slot is its "
        "latest tick at or before the database's now (docs/slots.md). Not with `slot`.",
        examples=["0 3 * * *"],
    )
    timezone: Annotated[str | None, BeforeValidator(_check_slot)] = Field(
        default=None,
        min_length=1,
        max_length=TIMEZONE_MAX,
        description="IANA time zone the `schedule` is read in (default UTC); DST as Debian's cron.",
        examples=["Europe/Berlin"],
    )


class ReleaseRequest(_Body):
    token: str = Field(min_length=1, max_length=256, description="The lease token returned by acquire.")
    # Strict: 0, 1, "yes" or "false" (a string) are refused, so a caller's mistake never decides a slot.
    completed: StrictBool = Field(
        default=True,
        description="For a lease with a slot: true (the job finished) records the slot as the name's last "
        "completed slot; false (it failed) leaves the tick open for another run. A later release changes nothing.",
    )


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
    slot: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="The tick this lease runs (`slot`, or computed from `schedule`); absent without one.",
    )


class ReleaseResponse(BaseModel):
    name: str
    released: bool = True
    lock_until: UtcTime = Field(description="max(now, locked_at + lock_at_least_for).")
    db_time: UtcTime
    slot: str | None = Field(default=None, exclude_if=_absent, description="The lease's slot; absent without one.")
    completed: bool | None = Field(
        default=None, exclude_if=_absent, description="Whether that slot is now done; absent without a slot."
    )


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
    last_completed_slot: str | None = Field(
        default=None, description="The last slot a holder released as completed; null when none (docs/slots.md)."
    )
    last_completed_at: UtcTime | None = Field(default=None, description="When that slot was completed; null when none.")


class LockResponse(LockView):
    db_time: UtcTime


class LockList(BaseModel):
    items: list[LockView]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    db_time: UtcTime


class Health(BaseModel):
    status: str
    detail: str | None = None
