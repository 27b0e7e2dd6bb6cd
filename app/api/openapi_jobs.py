"""The OpenAPI document's examples and error responses for the jobs (docs/jobs.md), in the story app.api.openapi
tells: ``nightly-billing`` at 03:00 Europe/Berlin, run by a billing job on host-3."""

from __future__ import annotations

from typing import Any

from app.api import openapi as doc
from app.api import openapi_history as history
from app.api.error_bodies import JobNotFoundError

DB_TIME = "2026-11-29T09:14:03.201Z"
JOB_REQUEST = {
    "schedule": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "grace": "10m",
    "description": "Invoices for yesterday's usage",
}
_TICK = {
    "tick": "2026-11-29T02:00:00.000Z",
    "state": "completed",
    "duplicate": False,
    "run": {**history.RUN, "acquired_at": "2026-11-29T02:00:00.120Z"},
    "runs": 1,
    "skipped": 4,
}
_MISSED = {
    "tick": "2026-11-28T02:00:00.000Z",
    "state": "missed",
    "duplicate": False,
    "run": None,
    "runs": 0,
    "skipped": 0,
}
JOB = {
    "name": doc.NAME,
    "schedule": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "grace": "PT10M",
    "description": "Invoices for yesterday's usage",
    "paused": False,
    "public": False,
    "state": "up",
    "last_tick": _TICK,
    "recent": [{"tick": "2026-11-28T02:00:00.000Z", "state": "missed"}, {"tick": _TICK["tick"], "state": "completed"}],
    "next_tick": "2026-11-30T02:00:00.000Z",
    "last_completed_at": "2026-11-29T02:02:41.317Z",
    "expected_since": "2026-11-20T10:00:00.000Z",
    "created_at": "2026-11-20T10:00:00.000Z",
    "updated_at": "2026-11-20T10:00:00.000Z",
    "changed_by": "billing-cron",
    "db_time": DB_TIME,
}
JOB_LIST = {"items": [JOB], "next_cursor": "am9iOm5pZ2h0bHktYmlsbGluZw", "db_time": DB_TIME}
TICKS = {"name": doc.NAME, "items": [_TICK, _MISSED], "next_cursor": "dGljazoxNzk0NzEyNDAwMDAwMDAw", "db_time": DB_TIME}

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": JobNotFoundError,
        "description": "`job_not_found`: no job of that name is registered.",
        "content": {
            "application/json": {
                "example": {
                    "error": {"code": "job_not_found", "message": f"no job named '{doc.NAME}'", "name": doc.NAME}
                }
            }
        },
    }
}
_BAD_SCHEDULE = "needs 5 fields (minute hour day-of-month month day-of-week) or an alias such as @daily"
BAD_INPUT: dict[int | str, dict[str, Any]] = {
    422: {
        **doc.BAD_INPUT[422],
        "description": "`invalid_request`: a bad schedule, time zone, grace, description or parameter; `field` "
        "names it.",
        "content": {
            "application/json": {
                "example": {
                    "error": {
                        "code": "invalid_request",
                        "message": f"schedule: {_BAD_SCHEDULE}",
                        "field": "schedule",
                        "problems": [{"field": "schedule", "message": _BAD_SCHEDULE}],
                    }
                }
            }
        },
    }
}
#: A read: 401, 422 (a parameter), 503; of one job also 403 and 404.
READ = {401: doc.AUTH[401], 429: doc.AUTH[429], **BAD_INPUT, **doc.DOWN}
READ_ONE = {**history.READ_ONE, **BAD_INPUT, **NOT_FOUND}
WRITE = {**doc.AUTH, **NOT_FOUND, **doc.TOO_LARGE, **doc.NOT_JSON, **BAD_INPUT, **doc.DOWN}
