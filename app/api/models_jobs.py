"""Request and response bodies of the jobs routes (docs/jobs.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

from app.api.models import Duration, UtcTime, reject_control_chars
from app.api.models_history import RunView
from app.jobs.model import DESCRIPTION_MAX
from app.schedules.cron import SCHEDULE_MAX, TIMEZONE_MAX

TickState = Literal["completed", "failed", "timed_out", "missed", "running", "pending"]
JobState = Literal["up", "late", "down", "paused", "new"]


class JobRequest(BaseModel):
    """``PUT /v1/jobs/{name}``: the job as it should be (idempotent)."""

    model_config = ConfigDict(extra="forbid")

    schedule: str = Field(
        min_length=1,
        max_length=SCHEDULE_MAX,
        description="5-field cron (`0 3 * * *`, `@daily`) read in `timezone`, or an ISO-8601 interval (`PT15M`) "
        "counted from the Unix epoch.",
    )
    timezone: str | None = Field(
        default=None, max_length=TIMEZONE_MAX, description="IANA zone of a cron schedule (default UTC)."
    )
    grace: Duration | None = Field(
        default=None,
        description="How late a tick's run may start before the tick is missed: `5m`, `PT5M`, or milliseconds "
        "(default 5 minutes, at most 31 days).",
    )
    description: Annotated[str | None, BeforeValidator(reject_control_chars)] = Field(
        default=None, max_length=DESCRIPTION_MAX
    )
    paused: StrictBool | None = Field(default=None, description="Omitted: unchanged (a new job is not paused).")
    public: StrictBool | None = Field(
        default=None, description="Its badge (`/badge.svg`) readable without a token. Omitted: unchanged (false)."
    )


class TickView(BaseModel):
    """One expected tick. `run` is the run that decided it (the completed one, the one running, or the last one
    that failed or timed out); null for pending and missed ticks."""

    tick: UtcTime = Field(description="When the tick was due (database clock, UTC).")
    state: TickState = Field(description="docs/jobs.md, 'Ticks'.")
    duplicate: bool = Field(description="More than one run completed in this tick's window.")
    run: RunView | None = None
    runs: int = Field(description="Runs acquired in this tick's window.")
    skipped: int = Field(description="Acquire attempts those runs made skip (409 lock_held).")


class TickBrief(BaseModel):
    tick: UtcTime
    state: TickState


class JobView(BaseModel):
    name: str
    schedule: str
    timezone: str
    grace: str = Field(description="ISO-8601, e.g. PT5M.")
    description: str | None = None
    paused: bool
    public: bool
    state: JobState = Field(description="docs/jobs.md, 'Job states'.")
    last_tick: TickView | None = Field(default=None, description="The latest due tick; null while the job is new.")
    recent: list[TickBrief] = Field(description="The latest due ticks, oldest first (at most 12).")
    next_tick: UtcTime | None = Field(default=None, description="The next tick after now.")
    last_completed_at: UtcTime | None = Field(default=None, description="When its last completed run ended.")
    expected_since: UtcTime = Field(description="Ticks before this are not expected (registered, changed, resumed).")
    created_at: UtcTime
    updated_at: UtcTime
    changed_by: str | None = Field(
        default=None,
        description="Who last registered, updated, paused or resumed it: a token's name or a workload's principal "
        "(docs/auth.md); null when unknown, on an open server, or when an acquire registered it.",
    )
    db_time: UtcTime


class JobList(BaseModel):
    items: list[JobView] = Field(description="By name.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    db_time: UtcTime


class TickList(BaseModel):
    name: str
    items: list[TickView] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page.")
    db_time: UtcTime
