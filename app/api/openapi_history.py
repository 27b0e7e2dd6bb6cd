"""The OpenAPI document's examples and error responses for the run history and force-release (docs/history.md),
in the story app.api.openapi tells: ``nightly-billing``, taken at 03:00 by a billing job on host-3."""

from __future__ import annotations

from typing import Any

from app.api import openapi as doc

RUN = {
    "name": doc.NAME,
    "fencing_token": 42,
    "locked_by": doc.LOCKED_BY,
    "token_name": "billing-cron",
    "source": "api",
    "acquired_at": doc.LOCKED_AT,
    "lock_until": "2026-11-29T03:05:00.000Z",
    "ended_at": "2026-11-29T03:02:41.317Z",
    "outcome": "released",
    "duration_ms": 161317,
    "skipped": 4,
    "forced_by": None,
    "force_reason": None,
}
_JAVA_RUN = {
    **RUN,
    "fencing_token": 41,
    "locked_by": "host-7",
    "token_name": None,
    "source": "table",
    "acquired_at": "2026-11-28T03:00:00.020Z",
    "lock_until": "2026-11-28T03:14:00.020Z",
    "ended_at": "2026-11-28T03:14:00.020Z",
    "outcome": "expired",
    "duration_ms": 840000,
    "skipped": 0,
}
LOCK_RUNS = {"items": [RUN, _JAVA_RUN], "next_cursor": "cnVuczo0MQ", "db_time": "2026-11-29T09:14:03.201Z"}
ALL_RUNS = {"items": [RUN], "next_cursor": "YXQ6MTc5NTkyMTIwMDAwMDAwMDo0Mg", "db_time": "2026-11-29T09:14:03.201Z"}
SKIPS = {
    "name": doc.NAME,
    "hours": 24,
    "items": [{"hour": "2026-11-29T03:00:00.000Z", "skipped": 4}],
    "total": 4,
    "db_time": "2026-11-29T09:14:03.201Z",
}
FORCE_REQUEST = {"reason": "host-3 died in the outage; the job is rescheduled"}
FORCE_RESPONSE = {
    "name": doc.NAME,
    "forced": True,
    "lock_until": "2026-11-29T03:07:12.540Z",
    "db_time": "2026-11-29T03:07:12.540Z",
    "run": {
        **RUN,
        "lock_until": "2026-11-29T03:07:12.540Z",
        "ended_at": "2026-11-29T03:07:12.540Z",
        "outcome": "force_released",
        "duration_ms": 432540,
        "skipped": 0,
        "forced_by": "ops",
        "force_reason": FORCE_REQUEST["reason"],
    },
}


def _described(responses: doc.Responses, status: int, description: str) -> doc.Responses:
    return {status: {**responses[status], "description": description}}


#: A history read: 401, 422 (a parameter), 503.
READ = {401: doc.AUTH[401], 429: doc.AUTH[429], **doc.BAD_INPUT, **doc.DOWN}
#: A history read of one lock: also 403 outside the token's prefixes.
READ_ONE = {**READ, **_described(doc.AUTH, 403, "`forbidden`: the name is outside the token's prefixes.")}
FORCE: dict[int | str, dict[str, Any]] = {
    **doc.AUTH,
    **_described(doc.AUTH, 403, "`forbidden`: the token is not an admin token, or the name is outside its prefixes."),
    **_described(doc.NOT_FOUND, 404, "`lock_not_found`: no lock of that name."),
    **doc.TOO_LARGE,
    **doc.NOT_JSON,
    **doc.BAD_INPUT,
    **doc.DOWN,
}
