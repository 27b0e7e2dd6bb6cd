"""The error responses' bodies, one schema per error code, for the OpenAPI document and the code generated from it.

The bodies themselves are built from the domain errors by ``app.api.errors`` (``{"error": {"code", "message",
<details>}}``); these models only describe them, field for field, so that a generated client can read
``locked_by`` off a 409 or ``field`` off a 422 without guessing. tests/api/test_openapi_contract.py checks that every
example validates against its schema and that real answers do too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.api.models import UtcTime


class _Detail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str  # each subclass narrows it to its one code (a field overridden keeps its place: first)
    message: str = Field(description="For humans; may change between releases. Match on `code`.")


class _Named(_Detail):
    name: str = Field(description="The lock name the request was about.")


class LockHeldDetail(_Named):
    code: Literal["lock_held"]
    locked_by: str = Field(description="The current holder, as it gave itself at acquisition.")
    locked_at: UtcTime
    lock_until: UtcTime = Field(description="When the lock frees itself unless the holder extends it.")
    db_time: UtcTime


class SlotDoneDetail(_Named):
    code: Literal["slot_done"]
    slot: str = Field(
        description="The slot asked for: the name's last completed slot, or (`stale`) a tick older than it "
        "(docs/slots.md)."
    )
    completed_at: UtcTime = Field(description="When a holder released the last completed slot as completed.")
    locked_by: str = Field(description="The holder that completed it, as it gave itself at acquisition.")
    db_time: UtcTime
    stale: bool = Field(
        default=False,
        description="Present (true) when `slot` is a tick older than the last completed one: a late "
        "trigger of an old tick.",
    )
    last_completed_slot: str | SkipJsonSchema[None] = Field(
        default=None, description="With `stale`: the name's last completed slot, the newer tick."
    )


class LockHeldError(BaseModel):
    """409 from acquire: skip this run, do not wait. `lock_held`: someone holds the lock; `slot_done`: the tick
    asked for (`slot` or `schedule`) already ran."""

    error: LockHeldDetail | SlotDoneDetail = Field(discriminator="code")


class NotHolderDetail(_Named):
    code: Literal["not_holder"]


class NotHolderError(BaseModel):
    """409 from release or extend: this token does not hold the lock (released, expired, taken over, or wrong)."""

    error: NotHolderDetail


class LockNotFoundDetail(_Named):
    code: Literal["lock_not_found"]


class LockNotFoundError(BaseModel):
    """404: no lock of that name has ever been taken."""

    error: LockNotFoundDetail


class JobNotFoundDetail(_Named):
    code: Literal["job_not_found"]


class JobNotFoundError(BaseModel):
    """404: no job of that name is registered (docs/jobs.md)."""

    error: JobNotFoundDetail


class Problem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: str = Field(description="Dotted path of the offending field: `lock_at_most_for`, `name`, `body`, ...")
    message: str


class InvalidRequestDetail(_Detail):
    code: Literal["invalid_request"]
    field: str = Field(description="The first offending field (as `problems[0].field`).")
    problems: list[Problem] = Field(min_length=1, description="Every problem found, in order.")


class InvalidRequestError(BaseModel):
    """422: a field is missing or malformed; `field` names the first, `problems` lists them all."""

    error: InvalidRequestDetail


class UnauthorizedDetail(_Detail):
    code: Literal["unauthorized"]


class UnauthorizedError(BaseModel):
    """401: no bearer token, or one the server does not know. Sent with `WWW-Authenticate: Bearer`."""

    error: UnauthorizedDetail


class RateLimitedDetail(_Detail):
    code: Literal["rate_limited"]
    retry_after: int = Field(description="Seconds until a request passes again (also the Retry-After header).")


class RateLimitedError(BaseModel):
    """429: the caller is over its quota (docs/auth.md, Quotas). Sent with `Retry-After`."""

    error: RateLimitedDetail


class ForbiddenDetail(_Detail):
    code: Literal["forbidden"]
    name: str | None = Field(default=None, description="The lock name, when the refusal is about a lock.")
    origin: str | None = Field(
        default=None, description="The page's origin, when a browser's request from another site was refused."
    )


class ForbiddenError(BaseModel):
    """403: the name is outside the token's prefixes, or a read-only token tried to write."""

    error: ForbiddenDetail


class PayloadTooLargeDetail(_Detail):
    code: Literal["payload_too_large"]
    limit: int = Field(description="The server's limit in bytes (SCHEDLOCK_MAX_BODY_BYTES).")


class PayloadTooLargeError(BaseModel):
    """413: the request body is larger than the server accepts."""

    error: PayloadTooLargeDetail


class UnsupportedMediaTypeDetail(_Detail):
    code: Literal["unsupported_media_type"]


class UnsupportedMediaTypeError(BaseModel):
    """415: the body is not sent as JSON (`Content-Type: application/json`). Sent with `Accept: application/json`."""

    error: UnsupportedMediaTypeDetail


class StorageUnavailableDetail(_Detail):
    code: Literal["storage_unavailable", "issuer_unavailable"]


class StorageUnavailableError(BaseModel):
    """503: the database cannot be reached or is not migrated; or (`issuer_unavailable`) the keys of the caller's
    JWT issuer could never be fetched. Retry after `Retry-After` seconds."""

    error: StorageUnavailableDetail
